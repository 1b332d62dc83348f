"""What the client showed against what the reference reducer expects: the comparison.

:func:`compare` takes one observation (the messages a client rendered after a
turn) and reports merges, splits, lost, duplicated, stale or re-ordered
content, each as an :class:`Issue` under the requirement the catalogue grades it
by, with the IDs and entries involved as evidence. An issue that names a cause
carries the test its control stream decides (:mod:`conformance.checks.controls`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from conformance import model
from conformance.checks.reducer import (
    UNSET,
    Expected,
    Reducer,
    Shown,
    Spot,
    hazardous,
    locate,
    natural_key,
    related,
    shared,
)
from conformance.checks.wire import short


@dataclass
class Issue:
    rule: str
    message: str
    entries: tuple[int, ...]
    expected: Any = None
    actual: Any = None
    # How a control stream decides this issue's cause (conformance.checks.controls):
    # ("merged", text1, text2), ("split", text), ("order",), ("lost", texts...) or
    # ("attached", text, owner's text); () for an issue that names no cause.
    test: tuple[str, ...] = ()


def compare(reducer: Reducer, expected: list[Expected], shown: list[Shown], *, protocol: int,
            kinds: Iterable[str] = ("user", "agent", "thought"),
            controlled: bool = False) -> list[Issue]:
    """The issues of one observation. ``controlled``: a control stream will decide each
    cause (conformance.checks.controls); without one, a merge of look-alike IDs is put
    down to the IDs only when the client kept unrelated adjacent IDs apart."""
    v2 = protocol >= 2
    visible = set(kinds)
    exp = [e for e in expected if e.kind in visible and e.blocks]
    owner: dict[str, Expected] = {b.text: e for e in exp for b in e.blocks}
    issues: list[Issue] = []
    where, per_shown = locate(reducer, shown)
    # Texts several messages hold are counted, not taken as names (catalogue K.6).
    share = shared(exp, where)

    def at(e: Expected, t: str) -> Sequence[Spot]:
        return share.at(e, t, where)

    tokens = [sorted((pos, t) for t, spots in where.items() for jj, pos in spots if jj == j)
              for j in range(len(shown))]

    def ids(*es: Expected) -> list[Any]:
        return [short(e.mid, 60) if e.mid is not None else None for e in es]

    def v2_rule(e: Expected) -> str:
        return "MID-V2-03" if e.chunks else "MID-V2-02/client"

    # -- what each rendered message holds ------------------------------------------
    for j, toks in enumerate(per_shown):
        owners: list[Expected] = []
        for pos, t in tokens[j]:
            e = share.owner(t, (j, pos), owner)
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
                        "MID-V2-07/shown-alone", "a v2 chunk without a string messageId is shown as a "
                        "message of its own", (st.seq,), expected="the chunk rejected or ignored",
                        actual=shown[j].text[:200]))
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
            issues.append(_merge(reducer, e1, e2, shown[j].text, exp, at, controlled))

    # -- where each expected message went ---------------------------------------------
    for e in exp:
        texts = [b.text for b in e.blocks]
        mine = {t: list(at(e, t)) for t in texts if at(e, t)}  # where e's texts are shown
        places = sorted({j for spots in mine.values() for j, _ in spots})
        if not v2 and _prompt_twice(reducer, e, places, mine, shown):
            issues.append(Issue(
                "MID-C-03/prompt-twice", f"the prompt is shown twice: the client's own copy and "
                f"the agent's live echo of it (the {e.label()})"
                f"{', joined in one message' if len(places) == 1 else ''}", tuple(e.entries[:3]),
                expected=e.text(), actual=_shown_text(shown, places)))
            continue
        missing = [b for b in e.blocks if b.text not in mine
                   and (e.key, b.text) not in share.excused]
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
            elif v2 and e.mid == "":  # a v2 chunk's "" is a string ID: it must be kept
                issues.append(Issue("MID-C-06", f"the {e.label()} {what}: its messageId is the "
                                    "empty string, dropped as if \"\" were no ID", ev,
                                    expected=e.text(), actual=_shown_text(shown, places),
                                    test=("lost", *(b.text for b in missing))))
            else:
                issues.append(Issue("MID-C-03/content", f"the {e.label()} {what}", ev,
                                    expected=e.text(), actual=_shown_text(shown, places)))
        dup = [t for t in texts if len(mine.get(t, ())) > 1]
        if dup:
            issues.append(Issue(v2_rule(e) if e.upserts else "MID-C-03/content",
                                f"text {dup[0]!r} of the {e.label()} is shown "
                                f"{len(mine[dup[0]])} times", tuple(e.entries[:3]),
                                expected=e.text(), actual=_shown_text(shown, places)))
        if len(places) >= 2:
            issues.append(_split(reducer, e, places, mine, shown))
        elif len(places) == 1 and not dup:
            seen = [t for pos, t in tokens[places[0]]
                    if share.owner(t, (places[0], pos), owner) is e]
            if seen != [t for t in texts if t in mine]:
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
                    issues.append(Issue("MID-V2-04/meta",
                                        f"the {e.label()} has _meta {got!r}", tuple(e.entries[-2:]),
                                        expected=want, actual=got))
    extra: dict[tuple[Any, ...], list[str]] = {}  # one issue per set of holders
    for t in share.extra:
        extra.setdefault(tuple(e.key for e in share.holders[t]), []).append(t)
    for texts in extra.values():
        holders, t = share.holders[texts[0]], texts[0]
        more = f" (and {len(texts) - 1} more of their texts)" if len(texts) > 1 else ""
        places = sorted({j for x in texts for j, _ in where[x]})
        issues.append(Issue(
            next((v2_rule(e) for e in holders if e.upserts), "MID-C-03/content"),
            f"text {t!r}{more}, sent in {len(holders)} messages "
            f"({', '.join(e.label() for e in holders[:3])}), is shown {len(where[t])} times",
            tuple(e.entries[0] for e in holders[:4]),
            expected=[e.text() for e in holders[:4]], actual=_shown_text(shown, places)))
    issues.extend(_order(exp, at))
    # The catalogue grades null-vs-omitted under both names (S-02 / C-04).
    issues += [Issue("MID-S-02/client", i.message, i.entries, i.expected, i.actual, i.test)
               for i in issues if i.rule == "MID-C-04"]
    return issues


def _prompt_twice(reducer: Reducer, e: Expected, places: list[int],
                  where: dict[str, list[tuple[int, int]]], shown: list[Shown]) -> bool:
    """A v1 live echo of the prompt (a user message whose text is the prompt's) shown
    beside the client's own copy of the prompt (catalogue Part C, C-7: the client
    reconciles the two; showing both is a warning, however it lays them out): the
    prompt twice in all, in user messages that hold nothing else, as two messages or
    joined in one ("...answer.Echo my prompt, then answer.")."""
    text = e.text().strip()
    if not (text and e.kind == "user" and e.text() in reducer.prompts
            and 1 <= len(places) <= 2
            and all(len(where.get(b.text, ())) == 2 for b in e.blocks)
            and all(shown[j].role == "user" for j in places)):
        return False
    texts = [shown[j].text for j in places]
    return (sum(t.count(text) for t in texts) == 2
            and all(t.strip() and not t.replace(text, "").strip() for t in texts))


def _shown_text(shown: list[Shown], places: list[int]) -> Any:
    if not places:
        return "(not shown)"
    return [f"{shown[j].role}: {shown[j].text[:120]}" for j in places[:4]]


At = Callable[[Expected, str], Sequence[Spot]]  # the occurrences of a text that are e's


def _merge(reducer: Reducer, e1: Expected, e2: Expected, text: str,
           exp: list[Expected], at: At, controlled: bool = False) -> Issue:
    entries = (e1.entries[0], e2.entries[0])
    evidence = {"ids": [short(e1.mid, 60), short(e2.mid, 60)], "shown": text[:200]}
    test = ("merged", e1.blocks[0].text, e2.blocks[0].text)
    expected = [e1.text(), e2.text()]
    if e1.kind != e2.kind:
        return Issue("MID-C-03/content", f"one rendered message mixes the {e1.label()} and the "
                     f"{e2.label()}", entries, expected=expected, actual=evidence)
    if e1.mid is not None and e2.mid is not None:
        how = related(e1.mid, e2.mid)
        adjacent = not reducer.between(e1, e2) if e1.last < e2.first else \
            not reducer.between(e2, e1)
        if how and (controlled or not adjacent or _separates_unrelated(reducer, exp, at)):
            return Issue("MID-C-02/merged", f"distinct IDs {short(e1.mid, 60)!r} and "
                         f"{short(e2.mid, 60)!r} (equal only after {how}) are shown as one message",
                         entries, expected=expected, actual=evidence, test=test)
        extra = f" (the IDs also differ only by {how})" if how else ""
        return Issue("MID-C-03/merged", f"the {e1.label()} and the {e2.label()} are shown as one "
                     f"message{extra}", entries, expected=expected, actual=evidence)
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
                 "message", entries, expected=expected, actual=evidence)


def _separates_unrelated(reducer: Reducer, exp: list[Expected], at: At) -> bool:
    """Evidence that the client does group by ID: two adjacent same-kind messages with
    unrelated IDs were shown apart (so a merge of related IDs is the IDs' doing)."""
    def place(e: Expected) -> set[int]:
        return {j for b in e.blocks for j, _ in at(e, b.text)}

    for a, b in itertools.pairwise(exp):
        if (a.kind == b.kind and a.mid is not None and b.mid is not None and a.last < b.first
                and not reducer.between(a, b) and not related(a.mid, b.mid)):
            pa, pb = place(a), place(b)
            if pa and pb and not pa & pb:
                return True
    return False


def _split(reducer: Reducer, e: Expected, places: list[int],
           where: dict[str, list[tuple[int, int]]], shown: list[Shown]) -> Issue:
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
                 entries, expected=e.text(), actual=_shown_text(shown, places))


def _order(exp: list[Expected], at: At) -> list[Issue]:
    firsts: list[tuple[tuple[int, int], Expected]] = []
    for e in exp:
        spots = [p for b in e.blocks for p in at(e, b.text)]
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
    evidence = {"expected": [short(e.mid, 60) for e in by_order][:10],
                "shown": [short(e.mid, 60) for e in placed][:10]}
    if len(keyed) >= 2 and (mids == sorted(mids) or mids == sorted(mids, key=natural_key)):
        return [Issue("MID-C-02/order", "messages are shown sorted by messageId instead of in "
                      "order of first appearance", entries, expected=evidence["expected"],
                      actual=evidence["shown"], test=("order",))]
    return [Issue("MID-C-03/order", "messages are shown in another order than first appearance "
                  "(display order is not normative)", entries, expected=evidence["expected"],
                  actual=evidence["shown"])]


