"""Restated messages (MID-A-10, catalogue K.6): one message's text is sent once, under one ID.

After streaming a message as chunks, an agent that sends the whole text again, as a
chunk or a message under another ``messageId`` (or with an ID after ID-less chunks,
or the reverse), makes a client show it twice: chunks append and a new ID is a new
message. In v2 the one correct restatement is a whole-message upsert with the run's
ID, which replaces the content.

Equal text alone proves nothing (two real messages may say the same thing), so a
restatement R of kind K is a chunk or upsert whose text (text blocks joined,
trimmed) equals the joined text of the run of K chunks just before it: those since
the previous K message update (or the previous user message), under one ID,
ID-less, or a new ID each, with other updates allowed in between (outside a live
turn a user run ends at the reply: a replay holds many turns under one turn index,
and the next user message is the next turn's). The run needs at
least two chunks and ``MIN_TEXT`` characters, so a repeated one-chunk "Done." is
never flagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.events import LIVE, MessageEvent, RepeatRun, ReplayStart
from conformance.checks.wire import short

MIN_CHUNKS = 2
MIN_TEXT = 20
MAX_TRACKED = 4096  # chunks of an ID-per-chunk run kept for matching (the newest)
COMPACT_PARTS = 64  # chunk texts kept apart before they are joined into one


@dataclass(slots=True)
class _Run:
    """The trailing chunks of one kind that can still form one message's run."""

    mode: str = ""  # "one-id" | "no-id" | "id-each" ("" while empty)
    mid: str | None = None  # one-id: the run's ID
    count: int = 0
    length: int = 0  # characters of the run's texts
    first_seq: int = -1
    last_seq: int = -1
    parts: list[str] = field(default_factory=list)  # one-id, no-id: the texts
    chunks: list[tuple[str, str, int]] = field(default_factory=list)  # id-each: (ID, text, seq)
    ids: set[str] = field(default_factory=set)  # id-each: the IDs seen
    idless: bool = False  # a chunk carried no valid ID (see _no_valid_id)

    def text(self) -> str:
        return "".join(self.parts)

    def add(self, mid: str | None, text: str, seq: int) -> None:
        if self.count and not self._continues(mid):
            self._restart_with_last(mid)
        if not self.count:
            self.mode, self.mid, self.first_seq = ("no-id" if mid is None else "one-id"), mid, seq
        elif self.mode == "one-id" and mid != self.mid:  # the second chunk, another ID
            self.mode = "id-each"
            self.chunks = [(self.mid or "", self.text(), self.first_seq)]
            self.ids = {self.mid or ""}
            self.parts = []
        self.count += 1
        self.length += len(text)
        self.last_seq = seq
        if self.mode == "id-each":
            assert mid is not None
            self.chunks.append((mid, text, seq))
            self.ids.add(mid)
            if len(self.chunks) > MAX_TRACKED:
                del self.chunks[0]
            return
        self.parts.append(text)
        if len(self.parts) >= COMPACT_PARTS:
            self.parts[:] = ["".join(self.parts)]

    def _continues(self, mid: str | None) -> bool:
        if self.mode == "no-id":
            return mid is None
        if mid is None:
            return False
        if self.mode == "one-id":
            return mid == self.mid or self.count == 1
        return mid not in self.ids  # id-each: every chunk a new ID

    def _restart_with_last(self, mid: str | None) -> None:
        """The run breaks: it restarts at the chunk just before (when that can begin a run
        with ``mid``: an ID-per-chunk run ends in a one-chunk run of its last ID)."""
        last = self.chunks[-1] if self.mode == "id-each" and mid is not None else None
        self.mode, self.mid, self.count, self.first_seq, self.last_seq = "", None, 0, -1, -1
        self.length = 0
        self.parts, self.chunks, self.ids = [], [], set()
        if last is not None:
            self.mode, self.mid, self.count = "one-id", last[0], 1
            self.first_seq = self.last_seq = last[2]
            self.parts = [last[1]]
            self.length = len(last[1])

    def match(self, text: str) -> tuple[int, int, set[str | None]] | None:
        """(first seq, chunk count, IDs) of the run (an ID-per-chunk run: of a suffix of
        it) whose joined text equals ``text``, trimmed; None when there is none."""
        if self.count < MIN_CHUNKS:
            return None
        if self.mode != "id-each":
            # Trimming only shortens: a run with fewer characters than ``text`` cannot
            # match, and is not joined (a join per chunk is quadratic in a long run).
            if self.length < len(text):
                return None
            joined = self.text()
            if len(self.parts) > 1:
                self.parts[:] = [joined]
            if joined.strip() == text:
                return self.first_seq, self.count, {self.mid}
            return None
        acc = ""
        for n, (_mid, part, seq) in enumerate(reversed(self.chunks), 1):
            acc = part + acc
            if len(acc.strip()) > len(text):
                return None
            if n >= MIN_CHUNKS and acc.strip() == text:
                return seq, n, {m for m, _, _ in self.chunks[-n:]}
        return None


def _no_valid_id(ev: MessageEvent) -> bool:
    """The update carried no valid ``messageId``: one that is neither a string nor null
    (MID-S-01/type's fault), or none at all in v2, where every message update must carry
    one (MID-V2-01's): no ID to compare a restatement by, and that fault is one finding."""
    raw = ev.update.get("messageId")
    return (raw is not None and not isinstance(raw, str)) or (raw is None and ev.protocol >= 2)


@register
class Restatement(Checker):
    rules = (
        Rule("MID-A-10/new-id"),
        Rule("MID-A-10/id-flip"),
        Rule("MID-A-10/same-id-chunk"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        # (conn, session, epoch, turn, phase) -> kind -> its run of chunks
        self.runs: dict[tuple[Any, ...], dict[str, _Run]] = {}
        self.last: tuple[Any, ...] | None = None  # the scope _runs gave last, with its runs
        self.streamed = False  # a run long enough to be restated was seen (exercised)
        # A message of another kind came after the scope's user run: outside a live turn
        # (a replay holds many turns under one turn index) the next user message is then
        # the next turn's, never a restatement of the one before (catalogue K.6: one turn).
        self.answered = False

    def on_replay_start(self, ev: ReplayStart) -> None:
        for key in [k for k in self.runs if k[1] == ev.session]:
            del self.runs[key]
        self.last = None

    def _runs(self, ev: MessageEvent) -> dict[str, _Run]:
        last = self.last  # the last event's scope (an Epoch's index does not change)
        if (last is not None and ev.epoch is last[0] and ev.turn == last[1]
                and ev.phase == last[2] and ev.conn == last[3] and ev.session == last[4]):
            kept: dict[str, _Run] = last[5]
            return kept
        scope = (ev.conn, ev.session, ev.epoch.index, ev.turn, ev.phase)
        runs = self.runs.get(scope)
        if runs is None:
            self.runs.clear()  # one scope at a time: a new turn or phase ends the old runs
            runs = self.runs[scope] = {}
            self.answered = False
        self.last = (ev.epoch, ev.turn, ev.phase, ev.conn, ev.session, runs)
        return runs

    def _next_turn(self, runs: dict[str, _Run], ev: MessageEvent) -> None:
        """Outside a live turn, a user message after the reply to the one before starts the
        next (replayed) turn: the previous user message's run is over."""
        if ev.kind != "user":
            self.answered = True
            return
        if self.answered and ev.phase != LIVE:
            runs.pop("user", None)
        self.answered = False

    def on_message(self, ev: MessageEvent) -> None:
        runs = self._runs(ev)
        self._next_turn(runs, ev)
        if ev.kind == "user":  # a user message starts a turn (in replay too)
            for kind in [k for k in runs if k != "user"]:
                del runs[kind]
        if ev.form == "chunk":
            text = ev.text if ev.repeat else model.block_text(ev.update.get("content"))
            self._chunk(runs, ev, ev.seq, text)
            return
        if "content" not in ev.update:
            return  # an upsert without content changes no text
        run = runs.pop(ev.kind, None)  # a message update ends the run
        if run is not None:
            self._judge(ev, ev.seq, run, model.blocks_text(ev.update.get("content")).strip())

    def on_repeats(self, rr: RepeatRun) -> None:
        """A settled run of chunks of one message: what on_message does for each."""
        first = rr.first
        runs = self._runs(first)
        self._next_turn(runs, first)
        run = runs.get(first.kind)
        mid = first.mid
        if (run is None or run.count < MIN_CHUNKS or not self.streamed
                or run.mode != ("no-id" if mid is None else "one-id") or run.mid != mid):
            for seq, text in zip(rr.seqs, rr.texts(), strict=False):
                self._chunk(runs, first, seq, text)
            return
        # The run goes on under its one ID (or none): each chunk continues it, and only a
        # chunk of MIN_TEXT characters or more can restate it (what _chunk does, in bulk).
        texts = rr.texts()
        if max(map(len, texts), default=0) < MIN_TEXT:  # no chunk can restate: in bulk
            run.parts.extend(texts)
            run.length += sum(map(len, texts))
            run.count += len(texts)
            run.last_seq = rr.seqs[-1]
            if len(run.parts) >= COMPACT_PARTS:
                run.parts[:] = ["".join(run.parts)]
            return
        parts, length, last = run.parts, run.length, run.last_seq
        for seq, text in zip(rr.seqs, texts, strict=False):
            if len(text) >= MIN_TEXT:
                run.length, run.last_seq = length, last
                self._judge(first, seq, run, text.strip())
            parts.append(text)  # match() joins in place: still the run's list
            length += len(text)
            last = seq
            run.count += 1
            if len(parts) >= COMPACT_PARTS:
                parts[:] = ["".join(parts)]
        run.length, run.last_seq = length, last

    def _chunk(self, runs: dict[str, _Run], ev: MessageEvent, seq: int, text: str) -> None:
        run = runs.get(ev.kind)
        if run is None:
            run = runs[ev.kind] = _Run()
        elif run.count >= MIN_CHUNKS:
            self._judge(ev, seq, run, text.strip())
        run.add(ev.mid, text, seq)
        if _no_valid_id(ev):
            run.idless = True
        if not self.streamed and run.count >= MIN_CHUNKS and run.length >= MIN_TEXT:
            self.streamed = True  # a message was streamed: a restatement could follow
            for rule in ("MID-A-10/new-id", "MID-A-10/id-flip", "MID-A-10/same-id-chunk"):
                self.exercised(rule)

    def _judge(self, ev: MessageEvent, seq: int, run: _Run, text: str) -> None:
        """``text`` (of ``ev``'s kind, ID and form, at ``seq``) against the run before it."""
        if run.count < MIN_CHUNKS or len(text) < MIN_TEXT:
            return
        if run.idless or _no_valid_id(ev):
            return  # an ID that is not a string is no ID to compare: MID-S-01/type's fault
        got = run.match(text)
        if got is None:
            return
        first, count, ids = got
        entries = [first, run.last_seq, seq]
        key = (ev.session, ev.kind, seq)
        what = f"{ev.kind} {ev.form} {ev.update_type}"
        run_ids = "ID-less" if ids == {None} else (
            f"under ID {short(next(iter(ids)) or '')!r}" if len(ids) == 1
            else f"under {len(ids)} IDs, one a chunk")
        said = f"{count} {ev.kind} chunks {run_ids} are then sent again whole as the {what}"
        if (ev.mid is None) != (None in ids):
            how = "without an ID" if ev.mid is None else f"with ID {short(ev.mid)!r}"
            self.found("MID-A-10/id-flip", f"{said} {how}: a client shows the text twice",
                       key=key, entries=entries, expected="the text once, under one ID",
                       actual=short(ev.mid) if ev.mid is not None else "no messageId")
            return
        if ev.mid is not None and len(ids) > 1 and ev.mid in ids:
            return  # one ID of an ID-per-chunk run: that fault is MID-A-03/id-per-chunk's
        if ev.mid is not None and len(ids) == 1 and ev.mid in ids:
            if ev.form == "upsert":
                return  # v2: an upsert with the run's ID replaces the content (MID-V2-03)
            advice = (": send a whole-message upsert with the same ID instead"
                      if ev.protocol >= 2 else "")
            self.found("MID-A-10/same-id-chunk", f"{said}, doubling the message's content"
                       f"{advice}", key=key, entries=entries,
                       expected="each text appended once", actual=short(text, 60))
            return
        self.found("MID-A-10/new-id", f"{said} under another ID {short(ev.mid or '')!r}: a "
                   "client shows it as a second message", key=key, entries=entries,
                   expected="the text once, under one ID (v2: an upsert with the same ID)",
                   actual=short(ev.mid))
