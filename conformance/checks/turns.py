"""Turn rules: MID-A-09 (cancellation), MID-A-01 (one ID source), MID-V2-05 (the v2 echo)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.events import (
    AFTER_CANCEL,
    LIVE,
    OUT_OF_TURN,
    MessageEvent,
    PromptAccepted,
    RepeatRun,
    TurnEnd,
    TurnStart,
)
from conformance.checks.wire import short
from conformance.model import with_article
from conformance.results import Reason

ECHOES_KEPT = 4  # ID-less echo chunks kept per turn as evidence (findings show four)


@register
class Cancellation(Checker):
    quiet_repeats = True  # same phase, same verdict
    rules = (
        Rule("MID-A-09/after-cancel"),
        Rule("MID-A-09/out-of-turn"),
    )

    def on_turn_end(self, ev: TurnEnd) -> None:
        self.exercised("MID-A-09/out-of-turn")
        if ev.stop_reason == "cancelled":
            self.exercised("MID-A-09/after-cancel")

    def on_message(self, ev: MessageEvent) -> None:
        if ev.phase == AFTER_CANCEL:
            self.found("MID-A-09/after-cancel",
                       f"{with_article(ev.update_type)} arrives after the turn ended as cancelled",
                       key=(ev.session, ev.epoch.index, ev.turn), entries=[ev.seq],
                       expected="every update before the cancelled response",
                       actual=ev.update_type)
        elif ev.phase == OUT_OF_TURN:
            self.found("MID-A-09/out-of-turn",
                       f"{with_article(ev.update_type)} arrives after the turn ended",
                       key=(ev.session, ev.epoch.index, ev.turn), entries=[ev.seq],
                       actual=ev.update_type)


@dataclass
class _TurnState:
    start: TurnStart
    legacy_id: Any = None
    prompt_text: str = ""
    echoes: list[MessageEvent] = field(default_factory=list)
    echo_ids: list[str] = field(default_factory=list)
    agent_output_seen: bool = False
    accepted: PromptAccepted | None = None
    echo_text: list[str] = field(default_factory=list)  # the first echo, reduced (App. G)
    response_id: str | None = None  # the messageId the v2 prompt response named
    in_flight: bool = False  # v2: open at the same time as another prompt of the session


def _meta_ids(meta: Any, legacy: Any, what: str) -> list[str]:
    """The ``_meta`` keys naming a message ID (``messageId``, ``userMessageId``, any key
    ending so) whose value is the client's legacy ID."""
    if not isinstance(meta, dict):
        return []
    return [f"{what} _meta.{k}" for k, v in meta.items()
            if isinstance(k, str) and k.lower().endswith("messageid") and v == legacy]


def _adoptions(st: _TurnState, ev: TurnEnd) -> list[tuple[str, int]]:
    """Where the agent returned the client's legacy ID as a message ID, in any shape: the
    user echo's messageId or its ``_meta``, the prompt response's ``userMessageId`` (the
    legacy shape), its ``messageId`` or its ``_meta``; each with the entry it is in."""
    legacy = st.legacy_id
    out: list[tuple[str, int]] = []
    for e in st.echoes:
        if e.mid is not None and e.mid == legacy:
            out.append(("the user echo", e.seq))
            break
    for e in st.echoes:
        keys = _meta_ids(e.update.get("_meta"), legacy, "the user echo's")
        if keys:
            out.append((keys[0], e.seq))
            break
    responses: list[tuple[Any, int]] = []
    if st.accepted is not None:
        responses.append((st.accepted.result, st.accepted.seq))
    if ev.ended_by == "response" and (st.accepted is None or ev.seq != st.accepted.seq):
        responses.append((ev.response, ev.seq))
    for result, seq in responses:
        if not isinstance(result, dict):
            continue
        for key in ("userMessageId", "messageId"):
            if key in result and result[key] == legacy:
                out.append((f"the prompt response's {key}", seq))
        out.extend((k, seq) for k in _meta_ids(result.get("_meta"), legacy,
                                               "the prompt response's"))
    return out


@register
class Echo(Checker):
    # A repeated user chunk is no new echo, but it adds to the echo's text: runs are
    # handed over in bulk (on_repeats) and only user runs are read.
    rules = (
        Rule("MID-A-01/adopted-client-id"),
        Rule("MID-A-01/rejected-legacy"),
        Rule("MID-A-06/live-echo"),
        Rule("MID-V2-05/no-echo"),
        Rule("MID-V2-05/echo-id-reused"),
        Rule("MID-V2-05/echo-content"),
        Rule("MID-V2-05/echo-before-response"),
        Rule("MID-V2-05/unmatched-echo"),
        Rule("MID-V2-05/response-id"),
        Rule("MID-V2-05/response-id-unrequired"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        # The open turns of each session by turn index, oldest first (v2 prompts may be in
        # flight together: one sent while another runs).
        self.turns: dict[str, dict[int, _TurnState]] = {}
        # v2 turns that ended before any echo of the ID their response named, by (session,
        # epoch, that ID): a later echo under it is theirs (an agent that queues a prompt
        # echoes it when its turn starts); graded at the end, MID-V2-05/no-echo if none came.
        self.late: dict[tuple[str, int, str], tuple[_TurnState, TurnEnd]] = {}
        self.ids: dict[tuple[str, int], dict[str, tuple[str, int]]] = {}

    def on_turn_start(self, ev: TurnStart) -> None:
        st = _TurnState(ev)
        params = ev.params
        raw_meta = params.get("_meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        st.legacy_id = params.get("messageId", meta.get("messageId"))
        st.prompt_text = model.blocks_text(params.get("prompt"))
        open_turns = self.turns.setdefault(ev.session, {})
        if ev.protocol < 2 or any(t.start.epoch is not ev.epoch for t in open_turns.values()):
            open_turns.clear()  # v1 turns never overlap; a new epoch ends the old ones
        if open_turns:  # a prompt sent while another runs: both are in flight
            st.in_flight = True
            for other in open_turns.values():
                other.in_flight = True
        open_turns[ev.turn] = st

    def _echo_turn(self, ev: MessageEvent) -> _TurnState | None:
        """The open turn a live user message belongs to. Under a profile whose prompt
        response names the user message, by that ID first; then the turn whose echo it
        continues; then by order and content: the oldest turn whose prompt the text
        begins, one without an echo first; then the oldest turn with no echo yet whose
        response named no other ID; else the turn the timeline gives."""
        open_turns = self.turns.get(ev.session)
        if not open_turns:
            return None
        if len(open_turns) == 1:
            return open_turns.get(ev.turn)
        mid = ev.mid
        by_id = self.profile.response_message_id
        if mid is not None:
            if by_id:
                for st in open_turns.values():
                    if st.response_id == mid:
                        return st
            for st in open_turns.values():
                if mid in st.echo_ids:
                    return st
        content = ev.update.get("content")
        text = (model.block_text(content) if ev.form == "chunk"
                else model.blocks_text(content))
        if text:
            matching = [st for st in open_turns.values() if st.prompt_text.startswith(text)]
            for st in matching:
                if not st.echoes:
                    return st
            if matching:
                return matching[0]  # a second echo of that prompt
        for st in open_turns.values():
            if not st.echoes and (st.response_id is None or mid is None or not by_id):
                return st
        return open_turns.get(ev.turn)

    def on_message(self, ev: MessageEvent) -> None:
        # The IDs seen, for MID-V2-05/echo-id-reused: v2 only (an epoch has one protocol).
        record = ev.mid if ev.protocol >= 2 else None
        if record is not None:
            known = self.ids.setdefault((ev.session, ev.epoch.index), {})
        open_turns = self.turns.get(ev.session)
        st = None
        late = self.late.get((ev.session, ev.epoch.index, ev.mid)) if (
            ev.kind == "user" and ev.mid is not None and self.late) else None
        if late is not None and ev.phase in (LIVE, OUT_OF_TURN):
            st = late[0]  # the late echo of a turn that ended before it (paired by ID)
        elif open_turns and ev.phase == LIVE:
            st = self._echo_turn(ev) if ev.kind == "user" else open_turns.get(ev.turn)
            if st is not None and st.start.epoch is not ev.epoch:
                st = None
        if st is None:
            if record is not None:
                known.setdefault(record, (ev.kind, ev.seq))
            return
        if ev.kind != "user":
            st.agent_output_seen = True
        else:
            if not st.echoes or ev.mid == st.echoes[0].mid:
                self._add_echo_text(st, ev)
            # Every echo with an ID of its own is kept (few: one a message); of the ID-less
            # chunks only the first few, for evidence: memory must not grow with chunks.
            if (ev.mid is None and len(st.echoes) < ECHOES_KEPT) or (
                    ev.mid is not None and ev.mid not in st.echo_ids):
                first = not st.echoes
                st.echoes.append(ev)
                if ev.mid is not None:
                    st.echo_ids.append(ev.mid)
                if first and record is not None:
                    self._check_echo_id(ev, known)
        if record is not None:
            known.setdefault(record, (ev.kind, ev.seq))

    def _check_echo_id(self, ev: MessageEvent, known: dict[str, tuple[str, int]]) -> None:
        self.exercised("MID-V2-05/echo-id-reused")
        prior = known.get(ev.mid or "")
        if prior is None:
            return
        kind, seq = prior
        if kind == "user":
            return  # graded under MID-A-02/user-message-reuse
        if self.profile.id_space == "per-kind":
            return  # separate ID spaces per kind: allowed
        self.found("MID-V2-05/echo-id-reused",
                   f"the echo's ID {short(ev.mid)!r} already names {with_article(kind)} message",
                   key=(ev.session, ev.mid), entries=[seq, ev.seq], expected="a fresh ID",
                   actual=short(ev.mid))

    def on_accepted(self, ev: PromptAccepted) -> None:
        st = self.turns.get(ev.session, {}).get(ev.turn)
        if st is not None and st.start.epoch is ev.epoch:
            st.accepted = ev
            result = ev.result if isinstance(ev.result, dict) else {}
            rid = result.get("messageId")
            st.response_id = rid if isinstance(rid, str) else None

    def on_turn_end(self, ev: TurnEnd) -> None:
        st = self.turns.get(ev.session, {}).pop(ev.turn, None)
        if st is None or st.start.epoch is not ev.epoch:
            return
        v2 = ev.protocol >= 2
        self._legacy(st, ev)
        if not v2:
            self.exercised("MID-A-06/live-echo")
            if ev.ended_by != "response":
                return
            if st.echoes:
                before = "before" if not st.agent_output_seen or st.echoes[0].seq < self._first_agent(
                    st) else "after"
                self.found("MID-A-06/live-echo",
                           f"the agent echoed the prompt as user_message_chunk ({before} its "
                           f"first output)", key=before, entries=[st.echoes[0].seq],
                           actual="echo")
            else:
                self.found("MID-A-06/live-echo", "the agent did not echo the prompt (allowed)",
                           key="no echo", entries=[st.start.seq], actual="no echo")
            return
        if ev.ended_by == "connection-closed" and self._never_echoed(st, ev.seq,
                                                                      "the connection closed"):
            return
        if ev.ended_by in ("error", "connection-closed"):
            return
        rid = st.response_id
        if rid is not None and not st.echoes and self.profile.response_message_id:
            self.late[(ev.session, ev.epoch.index, rid)] = (st, ev)  # its echo may come later
            return
        self._v2_turn(st, ev)

    def _never_echoed(self, st: _TurnState, seq: int | None, ending: str) -> bool:
        """An accepted prompt whose turn ended (``ending``) without the user message its
        response named: MID-V2-05/no-echo. False when it does not apply."""
        rid = st.response_id
        if rid is None or not self.profile.response_message_id or rid in st.echo_ids:
            return False
        self.exercised("MID-V2-05/no-echo")
        self.found("MID-V2-05/no-echo",
                   f"{ending} before any echo of ID {short(rid)!r}, which the session/prompt "
                   "response named", entries=[st.start.seq] + (
                       [st.accepted.seq] if st.accepted else []) + ([seq] if seq else []),
                   expected=f"a user message with ID {short(rid)!r}", actual="no echo")
        return True

    def finish(self) -> None:
        """Turns whose echo could still come, and prompts in flight whose turns never ended:
        what is missing is graded as such."""
        for st, end in self.late.values():
            self._v2_turn(st, end)
        for open_turns in self.turns.values():
            for st in open_turns.values():
                if st.in_flight:
                    self._never_echoed(st, None, "the transcript ends")

    def _first_agent(self, st: _TurnState) -> int:
        return st.echoes[0].seq  # output order is only recorded, not graded

    def _legacy(self, st: _TurnState, ev: TurnEnd) -> None:
        if st.legacy_id is None:
            return
        self.exercised("MID-A-01/adopted-client-id")
        self.exercised("MID-A-01/rejected-legacy")
        if ev.ended_by == "error":
            self.found("MID-A-01/rejected-legacy",
                       "the agent rejected a prompt carrying a client messageId",
                       entries=[st.start.seq, ev.seq], actual="error")
            return
        shown = _adoptions(st, ev)
        if shown:
            where, seq = shown[0]
            also = f" (also {', '.join(w for w, _ in shown[1:3])})" if len(shown) > 1 else ""
            self.found("MID-A-01/adopted-client-id",
                       f"{where} adopts the client-supplied ID {short(st.legacy_id)!r}{also}",
                       entries=[st.start.seq, seq], expected="an agent-generated ID",
                       actual={"id": short(st.legacy_id), "where": [w for w, _ in shown]})

    def _v2_turn(self, st: _TurnState, ev: TurnEnd) -> None:
        self.exercised("MID-V2-05/no-echo")
        self.exercised("MID-V2-05/response-id")
        if self.profile.response_message_id:
            self.not_applicable("MID-V2-05/response-id-unrequired",
                                f"not testable: profile {self.profile.name} requires the ID "
                                "(graded under MID-V2-05/response-id)", Reason.NOT_TESTABLE)
        else:
            self.exercised("MID-V2-05/response-id-unrequired")
        if not st.echoes:
            named = (f" (the ID its response named: {short(st.response_id)!r})"
                     if st.response_id is not None else "")
            self.found("MID-V2-05/no-echo",
                       f"the accepted prompt was never echoed as a user message before idle"
                       f"{named}", entries=[st.start.seq, ev.seq],
                       expected="user_message or user_message_chunk with a messageId",
                       actual="no echo")
        else:
            for rule in ("MID-V2-05/echo-content", "MID-V2-05/echo-before-response",
                         "MID-V2-05/unmatched-echo"):
                self.exercised(rule)
            echo_text = self._echo_text(st)
            if echo_text != st.prompt_text:
                self.found("MID-V2-05/echo-content", "the echo's text differs from the prompt",
                           entries=[st.start.seq, st.echoes[0].seq],
                           expected=short(st.prompt_text), actual=short(echo_text))
            if st.accepted is not None and st.echoes[0].seq < st.accepted.seq:
                self.found("MID-V2-05/echo-before-response",
                           "the echo arrives before the session/prompt response (allowed)",
                           key="before", entries=[st.echoes[0].seq, st.accepted.seq],
                           actual="before")
            if len(set(st.echo_ids)) > 1:
                self.found("MID-V2-05/unmatched-echo",
                           f"one prompt produced {len(set(st.echo_ids))} user messages",
                           entries=[e.seq for e in st.echoes[:4]], expected="one echo",
                           actual=[short(i, 40) for i in st.echo_ids[:4]])
        self._response_id(st)

    @staticmethod
    def _add_echo_text(st: _TurnState, ev: MessageEvent) -> None:
        """Chunks append, an upsert with content replaces (catalogue Appendix G)."""
        if ev.form == "chunk":
            st.echo_text.append(model.block_text(ev.update.get("content")))
            if len(st.echo_text) >= ECHOES_KEPT * 16:
                st.echo_text[:] = ["".join(st.echo_text)]
        elif "content" in ev.update:
            st.echo_text[:] = [model.blocks_text(ev.update.get("content"))]

    def on_repeats(self, run: RepeatRun) -> None:
        if run.first.kind != "user":
            return  # more chunks of a message already seen: nothing new for these rules
        for ev in run.events():
            self.on_message(ev)

    def _echo_text(self, st: _TurnState) -> str:
        return "".join(st.echo_text)

    def _response_id(self, st: _TurnState) -> None:
        acc = st.accepted
        if acc is None:
            return
        result = acc.result if isinstance(acc.result, dict) else {}
        rid = result.get("messageId")
        echo_id = st.echo_ids[0] if st.echo_ids else None
        required = self.profile.response_message_id
        if rid is None:
            if required:
                self.found("MID-V2-05/response-id",
                           "the session/prompt response carries no messageId (required by "
                           f"profile {self.profile.name})", entries=[acc.seq],
                           expected=echo_id or "the user message's ID", actual=short(result))
            return
        if not isinstance(rid, str) or (echo_id is not None and rid != echo_id):
            self.found("MID-V2-05/response-id",
                       "the session/prompt response's messageId is not the echo's ID",
                       entries=[acc.seq] + ([st.echoes[0].seq] if st.echoes else []),
                       expected=echo_id, actual=short(rid))
        elif not required:
            self.found("MID-V2-05/response-id-unrequired",
                       "the prompt response carries the user messageId (newer draft shape)",
                       entries=[acc.seq], actual=short(rid))
