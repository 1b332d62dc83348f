"""The protocol events the timeline produces and every checker receives.

Each event says which connection, session, epoch, turn and phase a line
belongs to (see ``timeline.py`` for how they are derived from the wire).
:class:`RepeatRun` hands a checker a settled run of chunks of one message at
once (``Checker.on_repeats``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.transcript import Entry

# Phases of a message update.
LIVE = "live"  # inside a prompt turn
REPLAY = "replay"  # between a load/resume(replayFrom) request and its response
AFTER_REPLAY = "after-replay"  # after the load/resume response, before the next prompt
UNREQUESTED = "unrequested-replay"  # during/after a v2 resume without replayFrom
AFTER_CANCEL = "after-cancel"  # after the turn ended as cancelled
OUT_OF_TURN = "out-of-turn"  # after an ordinary end of turn
NO_TURN = "no-turn"  # before any prompt in the epoch


@dataclass(slots=True)
class Epoch:
    session: str
    index: int  # 0, 1, 2 ... per session
    kind: str  # "new", "load", "resume", "unknown"
    conn: int
    start_seq: int
    # A load/resume whose requested replay carried no message update: the client's view of
    # the session is the one before it, so uniqueness goes on across it (set at its end).
    empty: bool = False


@dataclass(slots=True)
class MessageEvent:
    """One message update (a chunk or a v2 whole-message upsert)."""

    seq: int
    conn: int
    session: str
    kind: str  # user | agent | thought | session (inter-session messages, by profile)
    update_type: str
    form: str  # chunk | upsert
    id_state: str
    mid: str | None  # the ID when it is a string
    raw_id: Any
    update: dict[str, Any]
    epoch: Epoch
    turn: int  # turn index in the epoch (-1 before any prompt)
    phase: str
    protocol: int
    batch: int | None = None  # seq of the batch line, v2
    # A chunk line that continues the message of the line just before it: same connection,
    # session, epoch, turn, phase, kind and string ID, in a plain JSON-RPC notification; or,
    # for a run without IDs, the same absent (or null) ID and nothing but the content.
    repeat: bool = False
    text: str = ""  # a repeat's chunk text (model.block_text of its content), read once
    # A live update that arrived inside a replay window (timeline.Carried): the entry of the
    # load/resume request the suite wrote while the turn streamed (the reading's evidence).
    inside: int = -1
    # A live update after the session/cancel the suite wrote during its turn (that entry):
    # the target may have written it before it read the cancel (the benefit of the doubt).
    cancelled: int = -1


@dataclass(slots=True)
class OtherUpdate:
    seq: int
    conn: int
    session: str
    update_type: str
    update: dict[str, Any]
    epoch: Epoch
    turn: int
    phase: str
    protocol: int
    batch: int | None = None


@dataclass(slots=True)
class TurnStart:
    seq: int
    conn: int
    session: str
    epoch: Epoch
    turn: int
    request_id: Any
    params: dict[str, Any]
    protocol: int
    fuzz: bool


@dataclass(slots=True)
class TurnEnd:
    seq: int
    conn: int
    session: str
    epoch: Epoch
    turn: int
    stop_reason: Any
    protocol: int
    response: dict[str, Any] | None  # the v1/v2 prompt response result
    ended_by: str  # "response" | "idle" | "error" | "connection-closed"
    # the session/cancel the suite wrote while the turn ran (its entry; -1: none)
    cancelled: int = -1


@dataclass(slots=True)
class PromptAccepted:
    """v2: the prompt response (``{}`` or ``{messageId}``) of an open turn."""

    seq: int
    conn: int
    session: str
    epoch: Epoch
    turn: int
    result: Any
    protocol: int


@dataclass(slots=True)
class ReplayStart:
    seq: int
    conn: int
    session: str
    epoch: Epoch
    method: str
    requested: bool  # False for a v2 resume without replayFrom / v1 resume
    protocol: int


@dataclass(slots=True)
class ReplayEnd:
    seq: int
    conn: int
    session: str
    epoch: Epoch
    method: str
    requested: bool
    ok: bool
    protocol: int


@dataclass(slots=True)
class Frame:
    """Any line on a protocol stream (for transport and shape checks)."""

    entry: Entry
    protocol: int


@dataclass(slots=True)
class ConnEnd:
    conn: int
    seq: int
    data: Any


Event = Any  # one of the dataclasses above


def repeat_of(first: MessageEvent, seq: int, update: dict[str, Any]) -> MessageEvent:
    return MessageEvent(seq, first.conn, first.session, first.kind, first.update_type, "chunk",
                        first.id_state, first.mid, first.raw_id, update, first.epoch, first.turn,
                        first.phase, first.protocol, None, True,
                        model.block_text(update.get("content")), first.inside,
                        first.cancelled)


@dataclass(slots=True)
class RepeatRun:
    """Repeat lines handed over together (see ``Checker.on_repeats``).

    Each line continued ``first``'s message: the same connection, session, epoch,
    turn, phase, kind and ID; only the sequence number and the update differ.
    """

    first: MessageEvent
    seqs: list[int] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    _texts: list[str] | None = None  # texts(), read once for every checker of the run

    def events(self) -> Iterator[MessageEvent]:
        """The MessageEvents of the lines, as one by one delivery would give them."""
        for seq, update in zip(self.seqs, self.updates, strict=False):
            yield repeat_of(self.first, seq, update)

    def texts(self) -> list[str]:
        """The chunk texts (model.block_text of each content), in order: one list, shared
        by the checkers that take the run (none of them changes it)."""
        texts = self._texts
        if texts is None or len(texts) != len(self.updates):
            block_text = model.block_text
            texts = self._texts = [block_text(u.get("content")) for u in self.updates]
        return texts
