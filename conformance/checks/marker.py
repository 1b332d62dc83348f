"""The replay end marker (MID-V2-13, catalogue K.3), under a profile that has it.

For a v2 ``session/resume`` with a non-null ``replayFrom`` the agent sends one
``{"sessionUpdate": "replay_complete"}`` on the resumed session after its last
replayed update and before the response, even when nothing is replayed; a child
session it announces during the request gets its own marker before the response;
no marker when ``replayFrom`` is omitted or null. Under a profile without the marker
(``Profile.replay_marker``) ``replay_complete`` is an unknown update kind and these
rules are not applicable (allowed by the profile).

The checker follows the wire itself (requests, responses and updates per
connection), so it sees a marker wherever it comes, also one the timeline does not
take as the end of a window (the timeline closes the window at the marker:
``timeline.Timeline.replay_marker``). Which message update in the window is live and
which is replay is the transcript's one reading (``timeline.Carried``), shared with
the replay rules: this checker grades it, never decides it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.base import Rule, register
from conformance.checks.events import LIVE, REPLAY, ConnEnd, MessageEvent
from conformance.checks.frames import FrameChecker
from conformance.checks.wire import short

MARKER = "replay_complete"
MESSAGE_UPDATES = frozenset(model.message_kinds(True))


@dataclass
class _Resume:
    conn: int
    seq: int
    session: str
    requested: bool  # replayFrom set and not null
    markers: dict[str, list[int]] = field(default_factory=dict)  # session -> marker seqs
    children: dict[str, int] = field(default_factory=dict)  # new session -> its first update
    streaming: bool = False  # a turn of the session was streaming when it was sent
    replayed: bool = False  # the reading saw the replay begin (a replayed message update)


def _key(conn: int, request_id: Any) -> tuple[int, str, str]:
    return conn, type(request_id).__name__, repr(request_id)


@register
class ReplayMarker(FrameChecker):
    # A repeat chunk continues a message already seen: it changes nothing here.
    quiet_repeats = True
    rules = (
        Rule("MID-V2-13/missing"),
        Rule("MID-V2-13/truncated"),
        Rule("MID-V2-13/duplicate"),
        Rule("MID-V2-13/after-response"),
        Rule("MID-V2-13/unrequested"),
        Rule("MID-V2-13/child"),
        Rule("MID-V2-13/live-inside"),
        Rule("MID-V2-13/live-before-replay"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        # the register names the profiles that grade these rules; the grader says why the
        # others do not
        self.on = self.rules[0].record.applies_under(self.profile.name)
        self.pending: dict[tuple[int, str, str], _Resume] = {}
        self.known: set[str] = set()  # sessions seen before
        # session -> the chunk IDs of its open prompt, each with its first chunk's text
        self.streaming: dict[str, dict[str, str]] = {}
        self.answered: dict[str, int] = {}  # session -> seq of its last resume response

    def _in_flight(self, conn: int, session: str) -> _Resume | None:
        for r in self.pending.values():
            if r.conn == conn and (r.session == session or session in r.children):
                return r
        return None

    def _client(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        params = model.as_object(msg.get("params"))
        sid = params.get("sessionId")
        if not isinstance(sid, str):
            return
        method = msg.get("method")
        if method == "session/prompt":
            self.streaming[sid] = {}
        elif method == "session/resume" and "id" in msg:
            requested = params.get("replayFrom") is not None
            self.pending[_key(conn, msg["id"])] = _Resume(
                conn, seq, sid, requested, streaming=bool(self.streaming.get(sid)))
        self.known.add(sid)

    def _update(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        params = model.as_object(msg.get("params"))
        sid, update = params.get("sessionId"), model.as_object(params.get("update"))
        if not isinstance(sid, str):
            return
        utype = update.get("sessionUpdate")
        rep = self._in_flight(conn, sid)
        if rep is None and utype != MARKER:
            child_of = next((r for r in self.pending.values() if r.conn == conn
                             and r.requested and sid not in self.known), None)
            if child_of is not None and utype in MESSAGE_UPDATES:
                child_of.children.setdefault(sid, seq)
                rep = child_of
        if utype == MARKER:
            self._marker(conn, seq, sid, rep)
            return
        mid = update.get("messageId")
        if utype in MESSAGE_UPDATES and isinstance(mid, str):
            if (rep is None or rep.session != sid) and model.is_chunk(str(utype)) \
                    and sid in self.streaming:
                self.streaming[sid].setdefault(mid, model.block_text(update.get("content")))
        elif utype == "state_update" and update.get("state") == "idle" and self.streaming.get(sid):
            # a turn that streamed ends; an idle before any chunk may be a state report (a
            # real agent reports idle as a prompt arrives, before accepting it)
            self.streaming.pop(sid, None)
        if rep is None:
            self.known.add(sid)

    def on_message(self, ev: MessageEvent) -> None:
        """A message update of the resumed session before its marker, as the transcript's
        one reading (``timeline.Carried``) reads it: live output of the turn in flight, or
        the replay."""
        if not self.on or ev.protocol < 2 or ev.mid is None:
            return
        rep = self._in_flight(ev.conn, ev.session)
        if (rep is None or not rep.requested or rep.session != ev.session
                or rep.markers.get(ev.session)):
            return  # (a resume without replay has no window: MID-V2-06/live-beside-resume)
        if ev.phase == REPLAY:
            rep.replayed = True
            return
        if ev.phase != LIVE or ev.inside != rep.seq:
            return
        if rep.replayed:
            self.found("MID-V2-13/live-inside", f"a chunk of the live message {short(ev.mid)!r} "
                       "arrives after the first replayed update and before the marker: a "
                       "client takes it as history", key=(rep.session, rep.seq, ev.mid),
                       entries=[rep.seq, ev.seq], expected="live updates held back until the "
                       "replay_complete marker", actual=ev.update_type)
            return
        self.found("MID-V2-13/live-before-replay",
                   f"a chunk of the live message {short(ev.mid)!r} arrives after the "
                   f"session/resume request (entry {rep.seq}) and before the first replayed "
                   "update: the agent may have written it before it read the request, so it "
                   "is read as output of the turn in flight, not as replay (benefit of the "
                   "doubt: the suite cannot see which came first)",
                   key=(rep.session, rep.seq, ev.mid), entries=[rep.seq, ev.seq],
                   expected="live updates held back until the replay_complete marker",
                   actual=ev.update_type)

    def _marker(self, conn: int, seq: int, sid: str, rep: _Resume | None) -> None:
        if rep is None:
            after = self.answered.get(sid)
            why = ("after the session/resume response" if after is not None
                   else "for a session with no session/resume in flight")
            self.found("MID-V2-13/after-response", f"a replay_complete arrives {why}",
                       key=(sid, seq), entries=([after] if after is not None else []) + [seq],
                       expected="the marker before the resume response", actual=MARKER)
            return
        if not rep.requested:
            self.found("MID-V2-13/unrequested", "a replay_complete arrives for a session/resume "
                       "without replayFrom (or with null)", key=(rep.session, rep.seq),
                       entries=[rep.seq, seq], expected="no marker: nothing was requested",
                       actual=MARKER)
            return
        seen = rep.markers.setdefault(sid, [])
        seen.append(seq)
        if len(seen) == 2:
            self.found("MID-V2-13/duplicate", f"two replay_complete updates for session "
                       f"{short(sid)!r} in one session/resume", key=(rep.seq, sid),
                       entries=[rep.seq, *seen], expected="one marker", actual="two or more")

    def _response(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        rep = self.pending.pop(_key(conn, msg["id"]), None)
        if rep is None:
            return
        self.answered[rep.session] = seq
        self.streaming.pop(rep.session, None)
        if not rep.requested:
            self.exercised("MID-V2-13/unrequested")
            return
        for rule in ("MID-V2-13/duplicate", "MID-V2-13/after-response"):
            self.exercised(rule)
        if rep.streaming:
            self.exercised("MID-V2-13/live-inside")
            self.exercised("MID-V2-13/live-before-replay")
        if "result" not in msg:
            self._truncated(rep, seq, "the session/resume failed")
            return
        self.exercised("MID-V2-13/missing")
        if not rep.markers.get(rep.session):
            self.found("MID-V2-13/missing", f"the session/resume of {short(rep.session)!r} with "
                       "replayFrom succeeds with no replay_complete before its response",
                       key=(rep.session, rep.seq), entries=[rep.seq, seq],
                       expected="one replay_complete on the resumed session before the response",
                       actual="none")
        for child, first in rep.children.items():
            self.exercised("MID-V2-13/child")
            if not rep.markers.get(child):
                self.found("MID-V2-13/child", f"session {short(child)!r}, first seen during the "
                           "replay, gets message updates but no replay_complete of its own "
                           "before the response", key=(child, rep.seq),
                           entries=[rep.seq, first, seq],
                           expected="a replay_complete on the child's sessionId", actual="none")
        for child in rep.children:
            self.known.add(child)

    def _truncated(self, rep: _Resume, seq: int, why: str) -> None:
        self.exercised("MID-V2-13/truncated")
        if rep.markers.get(rep.session):
            return
        self.found("MID-V2-13/truncated", f"{why} before a replay_complete: the replay of "
                   f"{short(rep.session)!r} is truncated", key=(rep.session, rep.seq),
                   entries=[rep.seq, seq], actual="no marker")

    def on_conn_end(self, ev: ConnEnd) -> None:
        if not self.on:
            return
        for key in [k for k, r in self.pending.items() if r.conn == ev.conn]:
            rep = self.pending.pop(key)
            if rep.requested:
                self._truncated(rep, ev.seq, "the connection ended")
