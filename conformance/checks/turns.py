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
from conformance.results import Outcome, with_article

F, W, I = Outcome.FAIL, Outcome.WARN, Outcome.INFO
ECHOES_KEPT = 4  # ID-less echo chunks kept per turn as evidence (findings show four)


@register
class Cancellation(Checker):
    quiet_repeats = True  # same phase, same verdict
    rules = (
        Rule("MID-A-09/after-cancel", "no message update after the turn ended as cancelled", F,
             untested="no turn was cancelled"),
        Rule("MID-A-09/out-of-turn", "message updates after an ordinary end of turn (recorded)",
             I, untested="no turn completed"),
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


@register
class Echo(Checker):
    # A repeated user chunk is no new echo, but it adds to the echo's text: runs are
    # handed over in bulk (on_repeats) and only user runs are read.
    rules = (
        Rule("MID-A-01/adopted-client-id", "the agent does not adopt a client-supplied ID", W,
             untested="the suite sent no prompt with a legacy client messageId"),
        Rule("MID-A-01/rejected-legacy", "how the agent answers a legacy client messageId", I,
             untested="the suite sent no prompt with a legacy client messageId"),
        Rule("MID-A-06/live-echo", "whether the v1 agent echoes the live prompt (recorded)", I,
             versions=(1,), untested="no prompt turn completed"),
        Rule("MID-V2-05/no-echo", "every accepted v2 prompt is echoed as a user message", F,
             versions=(2,), untested="no v2 prompt turn completed"),
        Rule("MID-V2-05/echo-id-reused", "the echo's ID names no other message", F,
             versions=(2,), untested="no v2 echo with an ID"),
        Rule("MID-V2-05/echo-content", "the echo carries the accepted prompt content", W,
             versions=(2,), untested="no v2 echo"),
        Rule("MID-V2-05/echo-before-response", "echo before the prompt response (recorded)", I,
             versions=(2,), untested="no v2 echo"),
        Rule("MID-V2-05/unmatched-echo", "one echo per prompt", W, versions=(2,),
             untested="no v2 echo"),
        Rule("MID-V2-05/response-id",
             "the v2 prompt response names the echoed user message (profile acp-sdk-2.4.0)", F,
             versions=(2,), untested="no v2 prompt was accepted"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.turns: dict[str, _TurnState] = {}
        self.ids: dict[tuple[str, int], dict[str, tuple[str, int]]] = {}

    def on_turn_start(self, ev: TurnStart) -> None:
        st = _TurnState(ev)
        params = ev.params
        raw_meta = params.get("_meta")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        st.legacy_id = params.get("messageId", meta.get("messageId"))
        st.prompt_text = model.blocks_text(params.get("prompt"))
        self.turns[ev.session] = st

    def on_message(self, ev: MessageEvent) -> None:
        # The IDs seen, for MID-V2-05/echo-id-reused: v2 only (an epoch has one protocol).
        record = ev.mid if ev.protocol >= 2 else None
        if record is not None:
            known = self.ids.setdefault((ev.session, ev.epoch.index), {})
        st = self.turns.get(ev.session)
        if st is None or ev.phase != LIVE or ev.turn != st.start.turn:
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
        st = self.turns.get(ev.session)
        if st is not None and st.start.turn == ev.turn:
            st.accepted = ev

    def on_turn_end(self, ev: TurnEnd) -> None:
        st = self.turns.pop(ev.session, None)
        if st is None or st.start.turn != ev.turn:
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
        if ev.ended_by in ("error", "connection-closed"):
            return
        self._v2_turn(st, ev)

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
        adopted = [e for e in st.echoes if e.mid is not None and e.mid == st.legacy_id]
        if adopted:
            self.found("MID-A-01/adopted-client-id",
                       f"the user echo adopts the client-supplied ID {short(st.legacy_id)!r}",
                       entries=[st.start.seq, adopted[0].seq],
                       expected="an agent-generated ID", actual=short(st.legacy_id))

    def _v2_turn(self, st: _TurnState, ev: TurnEnd) -> None:
        self.exercised("MID-V2-05/no-echo")
        self.exercised("MID-V2-05/response-id")
        if not st.echoes:
            self.found("MID-V2-05/no-echo",
                       "the accepted prompt was never echoed as a user message before idle",
                       entries=[st.start.seq, ev.seq],
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
                       expected=echo_id, actual=short(rid),
                       outcome=F if required else W)
        elif not required:
            self.found("MID-V2-05/response-id",
                       "the prompt response carries the user messageId (newer draft shape)",
                       entries=[acc.seq], actual=short(rid), outcome=I)
