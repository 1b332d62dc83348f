"""The catalogue's reference reducer (Appendix G) and the recognition of sent texts.

:class:`Reducer`: v1 chunks grouped by ``(kind, messageId)`` with the legacy
fallback for ID-less chunks, v2 chunks appended and whole-message updates applied
as three-state patches, all keyed by ``(kind, id)``; display order is first
appearance. Every block remembers the transcript entry that sent it.

:func:`locate` reads a client's rendered messages (role and text, from a pty
profile or an in-process adapter) and finds the sent texts in them
(:func:`tokenize`); where several expected messages hold one text, :func:`shared`
hands its occurrences out to them by count. :func:`related` and :func:`hazardous`
say which IDs a parsing or normalising client is likely to confuse (MID-C-02).
Pure: the observation checker (:mod:`conformance.checks.observe`) feeds it from
the timeline.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.events import MessageEvent
from conformance.checks.wire import short

UNSET: Any = object()
JS_NAMES = {"__proto__", "constructor", "toString", "hasOwnProperty", "valueOf", "prototype",
            "null", "undefined"}


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
        return f"{self.kind} message {short(self.mid, 60)!r}"

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

    def turn(self) -> None:
        """A turn starts or ends: an ID-less v1 message never spans it (the next turn's
        ID-less chunks answer another prompt, so they are another message)."""
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


def text_index(texts: Iterable[str]) -> dict[str, list[str]]:
    idx: dict[str, list[str]] = {}
    for t in texts:
        if t:
            idx.setdefault(t[0], []).append(t)
    for v in idx.values():
        v.sort(key=len, reverse=True)
    return idx


def natural_key(s: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def locate(reducer: Reducer, shown: list[Shown]
           ) -> tuple[dict[str, list[tuple[int, int]]], list[list[str]]]:
    """Where each sent text shows up (text -> [(shown index, position)]), and the sent
    texts each shown message holds, in order."""
    known = text_index(set(reducer.sent) | reducer.prompts)
    where: dict[str, list[tuple[int, int]]] = {}
    per_shown: list[list[str]] = []
    for j, s in enumerate(shown):
        located = tokenize(s.text, known)
        per_shown.append([t for _, t in located])
        for pos, t in located:
            where.setdefault(t, []).append((j, pos))
    return where, per_shown


Spot = tuple[int, int]  # (shown index, position in that shown message's text)


@dataclass
class Shares:
    """Texts that several expected messages hold, and whose copy each shown occurrence is.

    Equal text is no identity: two messages with distinct IDs may say the same thing
    (catalogue K.6), so such a text does not name its message. Its occurrences, in display
    order, go to the messages that hold it in order of first appearance, one per block:
    a text sent k times and shown fewer is lost for the last holders, shown more is
    duplicated (``extra``). Without IDs equal texts are ambiguous (a v1 client cannot tell
    a restatement from a second message), so an ID-less holder that got no copy is
    ``excused``, not lost."""

    texts: set[str] = field(default_factory=set)
    spots: dict[tuple[Hashable, str], list[Spot]] = field(default_factory=dict)
    owners: dict[tuple[str, Spot], Expected] = field(default_factory=dict)
    holders: dict[str, list[Expected]] = field(default_factory=dict)  # distinct, in order
    extra: dict[str, list[Spot]] = field(default_factory=dict)
    excused: set[tuple[Hashable, str]] = field(default_factory=set)

    def at(self, e: Expected, text: str, where: dict[str, list[Spot]]) -> Sequence[Spot]:
        """The occurrences of ``text`` that belong to ``e``."""
        if text in self.texts:
            return self.spots.get((e.key, text), ())
        return where.get(text, ())

    def owner(self, text: str, spot: Spot, owner: dict[str, Expected]) -> Expected | None:
        """The message an occurrence of ``text`` belongs to (None: a copy too many)."""
        if text in self.texts:
            return self.owners.get((text, spot))
        return owner.get(text)


def shared(expected: list[Expected], where: dict[str, list[Spot]]) -> Shares:
    """:class:`Shares` of the expected messages (in order of first appearance) in ``where``
    (:func:`locate`)."""
    holders: dict[str, list[Expected]] = {}
    for e in expected:
        for b in e.blocks:
            holders.setdefault(b.text, []).append(e)
    out = Shares()
    for text, es in holders.items():
        if all(e is es[0] for e in es):
            continue  # one message: its text names it
        out.texts.add(text)
        out.holders[text] = list({id(e): e for e in es}.values())
        spots = sorted(where.get(text, ()))
        for e, spot in zip(es, spots, strict=False):  # fewer shown: the last are lost
            out.spots.setdefault((e.key, text), []).append(spot)
            out.owners[(text, spot)] = e
        if len(spots) > len(es):
            out.extra[text] = spots[len(es):]
        if any(e.mid is None for e in es):
            out.excused.update((e.key, text) for e in es[len(spots):])
    return out
