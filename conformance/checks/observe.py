"""What the client showed against what it should have shown: the client observation checker.

Two pure parts:

* :class:`Reducer`, the catalogue's reference reducer (Appendix G): v1 chunks
  grouped by ``(kind, messageId)`` with the legacy fallback for ID-less chunks,
  v2 chunks appended and whole-message updates applied as three-state patches,
  all keyed by ``(kind, id)``; display order is first appearance. Every block
  remembers the transcript entry that sent it.
* :func:`compare`, which reads the client's rendered messages (role and text,
  from a pty profile or an in-process adapter), recognises the sent texts in
  them, and reports merges, splits, lost, duplicated, stale or re-ordered
  content, each under the requirement the catalogue grades it by, with the IDs
  and entries involved as evidence.

:class:`ShownMessages` is the registered checker: it feeds the reducer from the
timeline and grades each ``observed`` harness event that the client runner
writes into the transcript, so a recorded client transcript regrades offline
exactly like a live run. Grading is a function of the streams the double sent
and the messages the client showed, nothing else.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.controls import Differential, control_view, has_cause
from conformance.checks.timeline import Frame, MessageEvent, OtherUpdate, ReplayStart, TurnStart
from conformance.results import Outcome

F, W, I = Outcome.FAIL, Outcome.WARN, Outcome.INFO
NO_PROFILE = ("no profile: the client's rendered messages were not observed "
              "(give --client-profile or --client-adapter)")
UNSET: Any = object()
JS_NAMES = {"__proto__", "constructor", "toString", "hasOwnProperty", "valueOf", "prototype",
            "null", "undefined"}
OBSERVED = "observed"  # the harness event the client runner writes after each turn


def _short(value: Any, limit: int = 60) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}... ({len(value)} characters)"
    return value


# ---------------------------------------------------------------------------
# ID relations
# ---------------------------------------------------------------------------


def _number(s: str) -> float | None:
    t = s.strip()
    if not t or not (t[0].isdigit() or t[0] in "+-."):
        return None  # keeps "nan", "inf" and words out
    try:
        return float(t)
    except ValueError:
        return None


TRANSFORMS: tuple[tuple[str, Any], ...] = (
    ("case", str.casefold),
    ("whitespace", str.strip),
    ("unicode normalisation", lambda s: unicodedata.normalize("NFC", s)),
    ("compatibility normalisation", lambda s: unicodedata.normalize("NFKC", s).casefold()),
    ("numeric parsing", _number),
)


def related(a: str, b: str) -> str | None:
    """The transform under which two distinct IDs look equal, if any (MID-C-02)."""
    if a == b:
        return None
    for name, f in TRANSFORMS:
        fa, fb = f(a), f(b)
        if fa is not None and fa == fb:
            return name
    return None


def hazardous(mid: str | None) -> bool:
    """An ID that a parsing or normalising client is likely to mishandle."""
    if mid is None:
        return False
    return (mid == "" or mid != mid.strip() or not mid.isascii() or len(mid) > 256
            or any(not ch.isprintable() for ch in mid) or mid in JS_NAMES
            or _number(mid) is not None)


# ---------------------------------------------------------------------------
# The reference reducer
# ---------------------------------------------------------------------------


@dataclass
class Block:
    text: str
    seq: int  # the transcript entry that sent it
    form: str  # id state of the chunk that carried it, or "upsert"


@dataclass
class Expected:
    kind: str
    key: Hashable
    mid: str | None
    order: int
    blocks: list[Block] = field(default_factory=list)
    entries: list[int] = field(default_factory=list)
    forms: set[str] = field(default_factory=set)
    chunks: bool = False
    upserts: bool = False
    malformed_content: bool = False
    meta: Any = UNSET
    chunk_meta: Any = UNSET
    first: int = 0  # index in the conn's update order
    last: int = 0

    def label(self) -> str:
        if self.mid is None:
            return f"{self.kind} message without ID (entry {self.entries[0]})"
        return f"{self.kind} message {_short(self.mid)!r}"

    def text(self) -> str:
        return "".join(b.text for b in self.blocks)


@dataclass
class Stale:
    text: str
    seq: int
    reason: str  # "replaced" | "cleared" | "invalid-v2-chunk"
    owner: Expected | None


class Reducer:
    """Appendix G, per connection: feed message and other updates in receive order."""

    def __init__(self) -> None:
        self.messages: dict[Hashable, Expected] = {}
        self.order: list[Expected] = []
        self.stale: dict[str, Stale] = {}
        self.sent: dict[str, Block] = {}  # every text block sent, by text
        self.updates = 0  # position counter over all session updates
        self.positions: list[tuple[int, Hashable]] = []  # (seq, key or "other")
        self.prompts: set[str] = set()
        self._legacy: tuple[str, Expected] | None = None  # (update type, open ID-less group)
        self._legacy_n = 0
        self.touched: list[Expected] = []
        self.features: set[str] = set()

    def _get(self, key: Hashable, kind: str, mid: str | None, seq: int) -> Expected:
        e = self.messages.get(key)
        if e is None:
            e = Expected(kind, key, mid, len(self.order), first=self.updates)
            self.messages[key] = e
            self.order.append(e)
        e.entries.append(seq)
        e.last = self.updates
        if all(t is not e for t in self.touched):
            self.touched.append(e)
        return e

    def other(self, seq: int) -> None:
        self.positions.append((seq, "other"))
        self.updates += 1
        self._legacy = None

    def message(self, ev: MessageEvent) -> None:
        u = ev.update
        v2 = ev.protocol >= 2
        if ev.form == "chunk":
            block = u.get("content")
            text = model.block_text(block)
            valid = ev.id_state == model.STRING
            if v2 and not valid:
                # Invalid in v2 (MID-V2-01): a client may reject it, never attach it (MID-V2-07).
                self.features.add("v2-invalid-chunk")
                if text:
                    self.stale[text] = Stale(text, ev.seq, "invalid-v2-chunk", None)
                    self.sent[text] = Block(text, ev.seq, ev.id_state)
                self.other(ev.seq)
                return
            if ev.id_state == model.STRING:
                assert ev.mid is not None
                key: Hashable = (ev.kind, ev.mid)
                e = self._get(key, ev.kind, ev.mid, ev.seq)
                if ev.mid == "":
                    self.features.add("empty-id")
                self._legacy = None
            else:
                self.features.add(f"v1-{ev.id_state}")
                if self._legacy is not None and self._legacy[0] == ev.update_type:
                    e = self._legacy[1]
                    e.entries.append(ev.seq)
                    e.last = self.updates
                    if all(t is not e for t in self.touched):
                        self.touched.append(e)
                else:
                    self._legacy_n += 1
                    e = self._get(("legacy", self._legacy_n), ev.kind, None, ev.seq)
                self._legacy = (ev.update_type, e)
            e.chunks = True
            e.forms.add(ev.id_state)
            if "_meta" in u:
                e.chunk_meta = u["_meta"]
                self.features.add("chunk-meta")
            if text:
                b = Block(text, ev.seq, ev.id_state)
                e.blocks.append(b)
                self.sent[text] = b
            self.positions.append((ev.seq, e.key))
            self.updates += 1
            return
        # v2 whole-message update
        self._legacy = None
        if ev.id_state != model.STRING:
            self.other(ev.seq)
            return
        assert ev.mid is not None
        if model.blocks_text(u.get("content")) not in self.prompts:  # not the prompt's echo
            self.features.add("upsert")
        e = self._get((ev.kind, ev.mid), ev.kind, ev.mid, ev.seq)
        e.upserts = True
        if "content" in u:
            content = u["content"]
            if content is None or isinstance(content, list):
                for b in e.blocks:
                    self.stale[b.text] = Stale(b.text, b.seq,
                                               "cleared" if not content else "replaced", e)
                e.blocks = []
                for item in content or []:
                    text = model.block_text(item)
                    if text:
                        blk = Block(text, ev.seq, "upsert")
                        e.blocks.append(blk)
                        self.sent[text] = blk
                        self.stale.pop(text, None)
            else:
                e.malformed_content = True
                self.features.add("malformed-content")
        if "_meta" in u:
            meta = u["_meta"]
            if meta is None or isinstance(meta, dict):
                e.meta = meta
        self.positions.append((ev.seq, e.key))
        self.updates += 1

    def between(self, a: Expected, b: Expected) -> list[Hashable]:
        """Keys of the updates strictly between a's last and b's first update."""
        return [k for _, k in self.positions[a.last + 1:b.first]]

    def take_touched(self) -> list[Expected]:
        out, self.touched = self.touched, []
        return out


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------


@dataclass
class Issue:
    rule: str
    message: str
    entries: tuple[int, ...]
    expected: Any = None
    actual: Any = None
    outcome: Outcome | None = None
    # How a control stream decides this issue's cause (conformance.checks.controls):
    # ("merged", text1, text2), ("split", text), ("order",), ("lost", texts...) or
    # ("attached", text, owner's text); () for an issue that names no cause.
    test: tuple[str, ...] = ()


@dataclass
class Shown:
    role: str
    text: str
    meta: Any = UNSET


def shown_from(data: Iterable[Any]) -> list[Shown]:
    out = []
    for d in data:
        if isinstance(d, dict):
            out.append(Shown(str(d.get("role", "")), str(d.get("text", "")),
                             d.get("meta", UNSET)))
    return out


def tokenize(text: str, known: dict[str, list[str]]) -> list[tuple[int, str]]:
    """(position, sent text) for each sent text recognised in ``text``, longest match first.

    The last text of a shown message may lack its trailing whitespace: a client that
    trims the end of what it displays has not lost content (acpx trims thoughts)."""
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(text):
        for cand in known.get(text[i], ()):
            if text.startswith(cand, i) or (cand != cand.rstrip()
                                            and text[i:] == cand.rstrip()):
                out.append((i, cand))
                i += len(cand)
                break
        else:
            i += 1
    return out


def _index(texts: Iterable[str]) -> dict[str, list[str]]:
    idx: dict[str, list[str]] = {}
    for t in texts:
        if t:
            idx.setdefault(t[0], []).append(t)
    for v in idx.values():
        v.sort(key=len, reverse=True)
    return idx


def _natural(s: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def locate(reducer: Reducer, shown: list[Shown]
           ) -> tuple[dict[str, list[tuple[int, int]]], list[list[str]]]:
    """Where each sent text shows up (text -> [(shown index, position)]), and the sent
    texts each shown message holds, in order."""
    known = _index(set(reducer.sent) | reducer.prompts)
    where: dict[str, list[tuple[int, int]]] = {}
    per_shown: list[list[str]] = []
    for j, s in enumerate(shown):
        located = tokenize(s.text, known)
        per_shown.append([t for _, t in located])
        for pos, t in located:
            where.setdefault(t, []).append((j, pos))
    return where, per_shown


def compare(reducer: Reducer, expected: list[Expected], shown: list[Shown], *, protocol: int,
            kinds: Iterable[str] = ("user", "agent", "thought"),
            controlled: bool = False) -> list[Issue]:
    """The issues of one observation. ``controlled``: a control stream will decide each
    cause (conformance.checks.controls); without one, a merge of look-alike IDs is put
    down to the IDs only when the client kept unrelated adjacent IDs apart."""
    v2 = protocol >= 2
    c03 = F if v2 else W
    visible = set(kinds)
    exp = [e for e in expected if e.kind in visible and e.blocks]
    owner: dict[str, Expected] = {b.text: e for e in exp for b in e.blocks}
    issues: list[Issue] = []
    where, per_shown = locate(reducer, shown)

    def ids(*es: Expected) -> list[Any]:
        return [_short(e.mid) if e.mid is not None else None for e in es]

    def v2_rule(e: Expected) -> str:
        return "MID-V2-03" if e.chunks else "MID-V2-02/client"

    # -- what each rendered message holds ------------------------------------------
    for j, toks in enumerate(per_shown):
        owners: list[Expected] = []
        for t in toks:
            e = owner.get(t)
            if e is not None and all(o is not e for o in owners):
                owners.append(e)
        for t in dict.fromkeys(toks):
            st = reducer.stale.get(t)
            if st is None or t in owner:
                continue
            if st.reason == "invalid-v2-chunk":
                if owners:
                    issues.append(Issue(
                        "MID-V2-07", f"a v2 chunk without a string messageId was attached to "
                        f"the {owners[0].label()}", (st.seq, *owners[0].entries[:2]),
                        expected="the chunk rejected or ignored", actual=shown[j].text[:200],
                        test=("attached", t, owners[0].blocks[0].text)))
                else:
                    issues.append(Issue(
                        "MID-V2-07", "a v2 chunk without a string messageId is shown as a "
                        "message of its own", (st.seq,), expected="the chunk rejected or ignored",
                        actual=shown[j].text[:200], outcome=W))
            elif st.owner is not None:
                issues.append(Issue(
                    v2_rule(st.owner), f"text {t!r} of the {st.owner.label()} is still shown "
                    f"after a whole-message update {st.reason} it", (st.seq, *st.owner.entries[-1:]),
                    expected=st.owner.text(), actual=shown[j].text[:200]))
        if len(owners) == 1 and shown[j].role != owners[0].kind and shown[j].role:
            e = owners[0]
            issues.append(Issue("MID-C-03/content", f"the {e.label()} is shown as {shown[j].role}",
                                tuple(e.entries[:3]), expected=e.kind, actual=shown[j].role))
        for e1, e2 in itertools.pairwise(owners):
            issues.append(_merge(reducer, e1, e2, shown[j].text, c03, exp, where, controlled))

    # -- where each expected message went ---------------------------------------------
    for e in exp:
        texts = [b.text for b in e.blocks]
        places = sorted({j for t in texts for j, _ in where.get(t, ())})
        missing = [b for b in e.blocks if b.text not in where]
        if missing:
            lost_all = len(missing) == len(e.blocks)
            what = "is missing" if lost_all else f"lost {len(missing)} of {len(e.blocks)} chunk(s)"
            ev = tuple(b.seq for b in missing[:4])
            malformed = [b for b in missing if b.form == model.WRONG_TYPE]
            if malformed and not v2:
                for rule in ("MID-C-05", "MID-S-03/client"):
                    issues.append(Issue(rule, f"the client dropped content of a chunk with a "
                                        f"malformed messageId ({e.label()})", ev,
                                        expected=e.text(), actual="(not shown)",
                                        test=("lost", *(b.text for b in malformed))))
            elif e.malformed_content and lost_all:
                issues.append(Issue("MID-V2-08", f"a whole-message update with malformed content "
                                    f"cleared the {e.label()}", tuple(e.entries[-2:]),
                                    expected=e.text(), actual="(not shown)"))
            elif e.upserts:
                issues.append(Issue(v2_rule(e), f"the {e.label()} {what} after whole-message "
                                    "updates", ev, expected=e.text(),
                                    actual=_shown_text(shown, places)))
            else:
                issues.append(Issue("MID-C-03/content", f"the {e.label()} {what}", ev,
                                    expected=e.text(), actual=_shown_text(shown, places)))
        dup = [t for t in texts if len(where.get(t, ())) > 1]
        if dup:
            issues.append(Issue(v2_rule(e) if e.upserts else "MID-C-03/content",
                                f"text {dup[0]!r} of the {e.label()} is shown "
                                f"{len(where[dup[0]])} times", tuple(e.entries[:3]),
                                expected=e.text(), actual=_shown_text(shown, places)))
        if len(places) >= 2:
            issues.append(_split(reducer, e, places, where, shown, c03))
        elif len(places) == 1 and not dup:
            seen = [t for t in per_shown[places[0]] if owner.get(t) is e]
            if seen != [t for t in texts if t in where]:
                issues.append(Issue(v2_rule(e) if e.upserts else "MID-C-03/content",
                                    f"the chunks of the {e.label()} are shown out of order",
                                    tuple(e.entries[:4]), expected=e.text(),
                                    actual=shown[places[0]].text[:200]))
        if len(places) == 1 and shown[places[0]].meta is not UNSET:
            got = shown[places[0]].meta
            want = None if e.meta is UNSET else e.meta
            if got != want:
                if e.chunk_meta is not UNSET and got == e.chunk_meta:
                    issues.append(Issue("MID-V2-04", f"a chunk's _meta patched the {e.label()}",
                                        tuple(e.entries[-2:]), expected=want, actual=got))
                else:
                    issues.append(Issue(v2_rule(e) if e.upserts else "MID-V2-04",
                                        f"the {e.label()} has _meta {got!r}", tuple(e.entries[-2:]),
                                        expected=want, actual=got, outcome=I))
    issues.extend(_order(exp, where))
    # The catalogue grades null-vs-omitted under both names (S-02 / C-04).
    issues += [Issue("MID-S-02/client", i.message, i.entries, i.expected, i.actual, i.outcome,
                     i.test) for i in issues if i.rule == "MID-C-04"]
    return issues


def _shown_text(shown: list[Shown], places: list[int]) -> Any:
    if not places:
        return "(not shown)"
    return [f"{shown[j].role}: {shown[j].text[:120]}" for j in places[:4]]


def _merge(reducer: Reducer, e1: Expected, e2: Expected, text: str, c03: Outcome,
           exp: list[Expected], where: dict[str, list[tuple[int, int]]],
           controlled: bool = False) -> Issue:
    entries = (e1.entries[0], e2.entries[0])
    evidence = {"ids": [_short(e1.mid), _short(e2.mid)], "shown": text[:200]}
    test = ("merged", e1.blocks[0].text, e2.blocks[0].text)
    expected = [e1.text(), e2.text()]
    if e1.kind != e2.kind:
        return Issue("MID-C-03/content", f"one rendered message mixes the {e1.label()} and the "
                     f"{e2.label()}", entries, expected=expected, actual=evidence)
    if e1.mid is not None and e2.mid is not None:
        how = related(e1.mid, e2.mid)
        adjacent = not reducer.between(e1, e2) if e1.last < e2.first else \
            not reducer.between(e2, e1)
        if how and (controlled or not adjacent or _separates_unrelated(reducer, exp, where)):
            return Issue("MID-C-02/merged", f"distinct IDs {_short(e1.mid)!r} and "
                         f"{_short(e2.mid)!r} (equal only after {how}) are shown as one message",
                         entries, expected=expected, actual=evidence, test=test)
        extra = f" (the IDs also differ only by {how})" if how else ""
        return Issue("MID-C-03/merged", f"the {e1.label()} and the {e2.label()} are shown as one "
                     f"message{extra}", entries, expected=expected, actual=evidence, outcome=c03)
    pair = (e1, e2)
    if any(e.mid == "" for e in pair) and any(e.mid is None for e in pair):
        return Issue("MID-C-06", "chunks with the empty-string ID are merged with ID-less "
                     "chunks, as if \"\" were no ID", entries, expected=expected, actual=evidence,
                     test=test)
    idless = [e for e in pair if e.mid is None]
    if any(model.NULL in e.forms for e in idless):
        return Issue("MID-C-04", f"a null messageId is treated unlike an omitted one: the "
                     f"{e1.label()} and the {e2.label()} are shown as one message", entries,
                     expected=expected, actual=evidence, test=test)
    if any(model.WRONG_TYPE in e.forms for e in idless):
        return Issue("MID-C-05", "a chunk with a malformed messageId was not treated as ID-less",
                     entries, expected=expected, actual=evidence, test=test)
    return Issue("MID-C-03/merged", f"the {e1.label()} and the {e2.label()} are shown as one "
                 "message", entries, expected=expected, actual=evidence, outcome=c03)


def _separates_unrelated(reducer: Reducer, exp: list[Expected],
                         where: dict[str, list[tuple[int, int]]]) -> bool:
    """Evidence that the client does group by ID: two adjacent same-kind messages with
    unrelated IDs were shown apart (so a merge of related IDs is the IDs' doing)."""
    def place(e: Expected) -> set[int]:
        return {j for b in e.blocks for j, _ in where.get(b.text, ())}

    for a, b in itertools.pairwise(exp):
        if (a.kind == b.kind and a.mid is not None and b.mid is not None and a.last < b.first
                and not reducer.between(a, b) and not related(a.mid, b.mid)):
            pa, pb = place(a), place(b)
            if pa and pb and not pa & pb:
                return True
    return False


def _split(reducer: Reducer, e: Expected, places: list[int],
           where: dict[str, list[tuple[int, int]]], shown: list[Shown], c03: Outcome) -> Issue:
    first_place = {b.text: min(j for j, _ in where[b.text]) for b in e.blocks if b.text in where}
    boundary = None
    present = [b for b in e.blocks if b.text in first_place]
    for a, b in itertools.pairwise(present):
        if first_place[a.text] != first_place[b.text]:
            boundary = (a, b)
            break
    entries: tuple[int, ...] = tuple(e.entries[:4])
    why = ""
    if boundary is not None:
        a, b = boundary
        entries = (a.seq, b.seq)
        keys = [k for s, k in reducer.positions if a.seq < s < b.seq]
        if "other" in keys:
            why = " across a tool call or other update"
        elif keys:
            why = " where another message's chunks came in between"
        if e.mid is None and a.form != b.form and {a.form, b.form} <= {model.ABSENT, model.NULL}:
            return Issue("MID-C-04", f"the {e.label()} is split where the chunks switch between "
                         "an omitted and a null messageId", entries, expected=e.text(),
                         actual=_shown_text(shown, places), test=("split", e.blocks[0].text))
    if hazardous(e.mid):
        return Issue("MID-C-02/split", f"the {e.label()} is shown as {len(places)} messages{why}",
                     entries, expected=e.text(), actual=_shown_text(shown, places),
                     test=("split", e.blocks[0].text))
    return Issue("MID-C-03/split", f"the {e.label()} is shown as {len(places)} messages{why}",
                 entries, expected=e.text(), actual=_shown_text(shown, places), outcome=c03)


def _order(exp: list[Expected], where: dict[str, list[tuple[int, int]]]) -> list[Issue]:
    firsts: list[tuple[tuple[int, int], Expected]] = []
    for e in exp:
        spots = [p for b in e.blocks for p in where.get(b.text, ())]
        if spots:
            firsts.append((min(spots), e))
    placed = [e for _, e in sorted(firsts, key=lambda x: x[0])]
    by_order = sorted(placed, key=lambda e: e.order)
    if placed == by_order:
        return []
    # Messages that share a rendered message were already reported as merges.
    keyed = [e for e in placed if e.mid is not None]
    mids = [e.mid or "" for e in keyed]
    entries = tuple(e.entries[0] for e in placed[:6])
    evidence = {"expected": [_short(e.mid) for e in by_order][:10],
                "shown": [_short(e.mid) for e in placed][:10]}
    if len(keyed) >= 2 and (mids == sorted(mids) or mids == sorted(mids, key=_natural)):
        return [Issue("MID-C-02/order", "messages are shown sorted by messageId instead of in "
                      "order of first appearance", entries, expected=evidence["expected"],
                      actual=evidence["shown"], test=("order",))]
    return [Issue("MID-C-03/order", "messages are shown in another order than first appearance "
                  "(display order is not normative)", entries, expected=evidence["expected"],
                  actual=evidence["shown"])]


# ---------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------


def _rule(rid: str, title: str, outcome: Outcome, versions: tuple[int, ...] = (1, 2)) -> Rule:
    return Rule(rid, title, outcome, versions=versions, role="client", untested=NO_PROFILE)


# Rules a turn exercises, by the features of what the double sent.
_FEATURE_RULES: dict[str, tuple[str, ...]] = {
    "v1-absent": ("MID-C-04", "MID-S-02/client"),
    "v1-null": ("MID-C-04", "MID-S-02/client"),
    "v1-wrong-type": ("MID-C-05", "MID-S-03/client"),
    "empty-id": ("MID-C-06",),
    "upsert": ("MID-V2-02/client", "MID-V2-03"),
    "v2-invalid-chunk": ("MID-V2-07",),
    "malformed-content": ("MID-V2-08",),
}


@register
class ShownMessages(Checker):
    rules = (
        _rule("MID-C-02/merged", "distinct IDs (case, whitespace, normalisation, numbers) are "
              "never shown as one message", F),
        _rule("MID-C-02/split", "a message with an unusual ID is never split", F),
        _rule("MID-C-02/order", "messages are not ordered by parsing or sorting their IDs", F),
        _rule("MID-C-03/merged", "consecutive messages with different IDs are shown apart "
              "(warn in v1, fail in v2)", W),
        _rule("MID-C-03/split", "chunks of one ID stay one message, even across a tool call "
              "(warn in v1, fail in v2)", W),
        _rule("MID-C-03/content", "each message shows exactly its chunks, in order, once", F),
        _rule("MID-C-03/order", "messages are shown in order of first appearance "
              "(not normative)", I),
        _rule("MID-C-04", "a null messageId and an omitted one render the same (v1)", F,
              versions=(1,)),
        _rule("MID-S-02/client", "the client gives null and omitted messageId one meaning (v1)",
              F, versions=(1,)),
        _rule("MID-C-05", "a v1 chunk with a wrongly typed messageId is kept as ID-less", W,
              versions=(1,)),
        _rule("MID-S-03/client", "a wrongly typed v1 messageId reads as absent, the update is "
              "kept", W, versions=(1,)),
        _rule("MID-C-06", "the empty string is a real ID, not \"no ID\"", W),
        _rule("MID-C-07", "after a reload, each message of the replayed history is shown once, "
              "whether the replay keeps the IDs or regenerates them", W),
        _rule("MID-V2-02/client", "whole-message updates are upserts keyed by messageId "
              "(omitted keeps, null and [] clear, a value replaces)", F, versions=(2,)),
        _rule("MID-V2-03", "chunks append to and updates replace one message's content, "
              "in arrival order", F, versions=(2,)),
        _rule("MID-V2-04", "a chunk's _meta never patches the message's _meta", F,
              versions=(2,)),
        _rule("MID-V2-07", "a v2 chunk without a string ID is rejected or ignored, never "
              "attached to a message", F, versions=(2,)),
        _rule("MID-V2-08", "a whole-message update with malformed content changes nothing", W,
              versions=(2,)),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.reducers: dict[int, Reducer] = {}
        self.protocols: dict[int, int] = {}
        self.diff = Differential(self)

    def _reducer(self, conn: int) -> Reducer:
        r = self.reducers.get(conn)
        if r is None:
            r = self.reducers[conn] = Reducer()
        return r

    def on_message(self, ev: MessageEvent) -> None:
        self.protocols[ev.conn] = ev.protocol
        self._reducer(ev.conn).message(ev)

    def on_other(self, ev: OtherUpdate) -> None:
        self.protocols[ev.conn] = ev.protocol
        if ev.update_type != "state_update":
            self._reducer(ev.conn).other(ev.seq)

    def on_replay_start(self, ev: ReplayStart) -> None:
        # After a reload the display is the replayed history (and what follows), whatever
        # the client showed before: the expectation starts afresh (MID-C-07).
        if ev.requested:
            self.reducers[ev.conn] = Reducer()

    def on_turn_start(self, ev: TurnStart) -> None:
        self.protocols[ev.conn] = ev.protocol
        prompt = ev.params.get("prompt")
        text = model.blocks_text(prompt) if isinstance(prompt, list) else ""
        if text:
            self._reducer(ev.conn).prompts.add(text)

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.stream != "harness" or e.event != OBSERVED or not isinstance(e.data, dict):
            return
        data = e.data
        protocol = int(data.get("protocol") or self.protocols.get(e.conn, ev.protocol))
        reducer = self._reducer(e.conn)
        touched = reducer.take_touched()
        expected = touched if data.get("render") == "incremental" else list(reducer.order)
        rules = {"MID-C-03/merged", "MID-C-03/split", "MID-C-03/content", "MID-C-03/order"}
        specific: set[str] = set()
        for feat in reducer.features:
            if feat.startswith("v1-") and protocol >= 2:
                continue
            specific.update(_FEATURE_RULES.get(feat, ()))
        if any(hazardous(x.mid) for x in expected) or any(
                related(a.mid, b.mid) for a in expected for b in expected
                if a.mid is not None and b.mid is not None and a.kind == b.kind):
            specific.update(("MID-C-02/merged", "MID-C-02/split", "MID-C-02/order"))
        keyed = [x for x in expected if x.mid is not None and x.blocks]
        if len(keyed) >= 2:
            rules.add("MID-C-02/order")
        shown = shown_from(data.get("shown") or [])
        if "chunk-meta" in reducer.features and any(s.meta is not UNSET for s in shown):
            specific.add("MID-V2-04")
        control_of, control = str(data.get("control_of") or ""), str(data.get("control") or "")
        if data.get("exited"):
            why = str(data.get("why") or "the client exited")
            if control_of:
                self.diff.control(control_of, None, f"{why} during the control stream")
            for rule in sorted(specific - {"MID-C-02/order", "MID-C-02/split"}
                               or {"MID-C-03/content"}):
                self.found(rule, f"{why} after this stream (the catalogue grades a crash as "
                           "fail)", entries=[e.seq], expected="the client alive, showing the turn",
                           actual=data.get("tail", ""), outcome=F)
            return
        kinds = data.get("kinds") or ("user", "agent", "thought")
        if control_of:  # evidence for its probe's findings, not graded on its own
            visible = [x for x in expected if x.kind in kinds and x.blocks]
            self.diff.control(control_of, control_view(visible, locate(reducer, shown)[0]))
            return
        for rule in rules | specific:
            if control and has_cause(rule):
                self.diff.exercise(rule, protocol)
            else:
                self.exercised(rule, protocol)
        reload = bool(data.get("reload"))
        if reload:
            self.exercised("MID-C-07", protocol)
        for issue in compare(reducer, expected, shown, protocol=protocol, kinds=kinds,
                             controlled=bool(control)):
            if reload and issue.rule == "MID-C-03/content":  # lost or shown twice
                issue = Issue("MID-C-07", f"after the reload, {issue.message}", issue.entries,
                              issue.expected, issue.actual, W)
            if control and issue.test and has_cause(issue.rule):
                self.diff.hold(str(data.get("turn")), issue, (*issue.entries, e.seq), protocol)
                continue
            self.found(issue.rule, issue.message, key=(e.conn, issue.entries),
                       entries=[*issue.entries, e.seq],
                       expected=issue.expected, actual=issue.actual, outcome=issue.outcome)

    def finish(self) -> None:
        self.diff.finish()
