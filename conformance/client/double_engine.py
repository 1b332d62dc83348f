"""The agent double without I/O: :class:`DoubleEngine`, the scripted agent as a state
machine, and :class:`DoubleTally`, what a client driver learns from its events.

The double's process (:mod:`conformance.client.double`) and the in-process adapter
loop (:mod:`conformance.client.adapter`) both drive the engine.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Generator
from typing import Any

from conformance import __version__, model
from conformance.client.script import TurnScript, text_block
from conformance.controlstream import PROBE_ID_PREFIX, PROBE_METHOD

DOUBLE_NAME = "acp-conformance-agent-double"
DEFAULT_WAIT = 5.0
JsonObject = dict[str, Any]
# A turn yields ("send", message) or ("await", request id, what it waits for).
TurnGen = Generator[tuple[Any, ...], JsonObject | None, None]


def encode_line(message: Any) -> bytes:
    """One compact JSON line, raw UTF-8 where possible (ASCII escapes for lone surrogates)."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"


class DoubleTally:
    """What a client driver learns from the double's events: sessions opened, turns
    ended, and the protocol version a client asked for when it was not the double's."""

    def __init__(self) -> None:
        self.sessions = 0
        self.turns_ended = 0
        self.version_asked: Any = None
        self.probe_missed = False  # the client left a liveness probe unanswered
        self.session_id: str | None = None  # the last session the double opened
        self.loads_ended = 0
        self.hangups = 0  # replays the double cut short by ending the connection

    def count(self, name: str, data: JsonObject) -> None:
        if name == "session":
            self.sessions += 1
            self.session_id = str(data.get("sessionId"))
        elif name == "load-end":
            self.loads_ended += 1
        elif name == "hangup":
            self.hangups += 1
        elif name == "turn-end":
            self.turns_ended += 1
        elif name == "version-mismatch":
            self.version_asked = data.get("asked")
        elif name == "wait-timeout" and str(data.get("id", "")).startswith(PROBE_ID_PREFIX):
            self.probe_missed = True


class DoubleEngine:
    """The scripted agent as a state machine: feed it client messages, :meth:`take` what
    it writes to the client and reports to the suite, in the order it did them.

    ``next_turn`` is asked for the turn to play at each ``session/prompt``
    (None: no scripted turn is left, the prompt gets a short plain reply).
    The reports: turn-start, turn-end, probe-answered, probe-unawaited, wait-timeout,
    version-mismatch, session, load, load-end, hangup.

    A client that asks for a lower protocol version than the double's gets the double's
    version (the spec's answer) and may carry on; its probes are then sent but not
    waited for, since the case is not graded on that version's rules.
    """

    def __init__(self, *, protocol: int, next_turn: Callable[[], TurnScript | None],
                 response_message_id: bool = True, load_session: bool = False) -> None:
        self.protocol = protocol
        # Reload cases: v1 advertises loadSession and replays on session/load; v2 advertises
        # the session methods and replays on session/resume with replayFrom.
        self.load_session = load_session
        self._after_load: TurnScript | None = None  # the turn for a resumed one-shot prompt
        self.next_turn = next_turn
        self.response_message_id = response_message_id
        # v2 Preview (profile acp-schema-1.21, catalogue K.3): a replay ends with
        # replay_complete before the resume response
        self.replay_marker = False
        self._produced: list[tuple[str, Any]] = []  # ("line", message) | ("event", report)
        self.sessions = 0
        self.turns = 0
        self.probes = 0
        self.requests = 0
        self.user_ids = 0
        self._user_seen: set[str] = set()
        self._gen: TurnGen | None = None
        self._awaiting: tuple[Any, str] | None = None
        self._prompts: deque[tuple[Any, JsonObject]] = deque()
        self.asked_lower = False  # the client asked for an older protocol version
        # The double hung up in the middle of a replay (a reload with ``hangup``): the I/O
        # layer ends the connection, and nothing more is read or written.
        self.hung_up = False

    # -- what the I/O layer asks ------------------------------------------
    @property
    def waiting_for(self) -> str | None:
        return self._awaiting[1] if self._awaiting else None

    def take(self) -> list[tuple[str, Any]]:
        """What the engine produced since the last call, in the order it happened:
        ``("line", message)`` for a message to write to the client, ``("event", report)``
        for a report to the suite. The order matters: a ``load-end`` reported before the
        replay it ends would let the suite observe the client's screen before the
        transcript holds the lines the client was shown."""
        produced, self._produced = self._produced, []
        return produced

    def _send(self, message: Any) -> None:
        self._produced.append(("line", message))

    def _report(self, event: JsonObject) -> None:
        self._produced.append(("event", event))

    def timed_out(self) -> None:
        """The awaited answer did not come in time: report it and go on with the turn."""
        if self._awaiting is None:
            return
        rid, what = self._awaiting
        self._report({"event": "wait-timeout", "data": {"id": rid, "waiting_for": what}})
        self._awaiting = None
        self._step(None)

    # -- input -------------------------------------------------------------
    def feed(self, msg: Any) -> None:
        if self.hung_up:
            return
        if isinstance(msg, list):  # a v2 batch: entries in array order
            for m in msg:
                self.feed(m)
            return
        if not isinstance(msg, dict):
            return
        method = msg.get("method")
        if method is None:
            if "id" in msg and self._awaiting is not None and msg["id"] == self._awaiting[0]:
                rid = msg["id"]
                self._awaiting = None
                if isinstance(rid, str) and rid.startswith(PROBE_ID_PREFIX):
                    self._report({"event": "probe-answered", "data": {"id": rid}})
                self._step(msg)
            return
        params = model.as_object(msg.get("params"))
        if "id" not in msg:
            return  # notifications (session/cancel, ...) change nothing in a scripted turn
        rid = msg["id"]
        if method == "initialize":
            self._initialize(rid, params)
        elif method == "session/new":
            self.sessions += 1
            sid = f"sess-{self.sessions}"
            self._report({"event": "session", "data": {"sessionId": sid}})
            self._respond(rid, {"sessionId": sid})
        elif method == "session/load" and self.load_session and self.protocol < 2:
            self._load(rid, params)
        elif method == "session/resume" and self.protocol >= 2:
            cursor = params.get("replayFrom")
            if self.load_session and isinstance(cursor, dict) and cursor.get("type") == "start":
                self._load(rid, params)
            else:  # a resume without replay (or with nothing retained): nothing to show again
                self._respond(rid, {})
        elif method == "session/prompt":
            self._prompts.append((rid, params))
            if self._gen is None:
                self._start_next()
        else:
            self._send({"jsonrpc": "2.0", "id": rid,
                             "error": {"code": -32601, "message": "Method not found"}})

    def _initialize(self, rid: Any, params: JsonObject) -> None:
        asked = params.get("protocolVersion")
        if asked != self.protocol:
            self.asked_lower = isinstance(asked, int) and asked < self.protocol
            self._report({"event": "version-mismatch",
                          "data": {"asked": asked, "answered": self.protocol}})
        info = {"name": DOUBLE_NAME, "version": __version__}
        if self.protocol >= 2:
            # `session` advertises the baseline session methods, resume among them (the
            # session methods are opt-in in v2; without a reload case a resume replays nothing).
            caps: JsonObject = {"session": {}}
            result: JsonObject = {"protocolVersion": 2, "info": info, "capabilities": caps,
                                  "authMethods": []}
        else:
            result = {"protocolVersion": 1, "agentInfo": info, "authMethods": [],
                      "agentCapabilities": {"loadSession": self.load_session,
                                            "promptCapabilities": {
                          "image": False, "audio": False, "embeddedContext": False}}}
        self._respond(rid, result)

    def _load(self, rid: Any, params: JsonObject) -> None:
        """v1 session/load, v2 session/resume from the start: replay the history the suite
        hands over, then answer."""
        given = params.get("sessionId")
        sid = given if isinstance(given, str) else "sess-1"
        turn = self.next_turn()
        self._report({"event": "load", "data": {"sessionId": sid}})
        for u in turn.replay if turn else ():
            self._send({"jsonrpc": "2.0", "method": "session/update",
                             "params": {"sessionId": sid, "update": u}})
        if turn is not None and turn.hangup:  # a truncated replay: no marker, no response
            self.hung_up = True
            self._report({"event": "hangup", "data": {"sessionId": sid}})
            return
        if self.replay_marker and self.protocol >= 2:
            self._send({"jsonrpc": "2.0", "method": "session/update",
                        "params": {"sessionId": sid, "update": {"sessionUpdate": "replay_complete"}}})
        self._respond(rid, {})
        self._report({"event": "load-end", "data": {"sessionId": sid}})
        self._after_load = turn if turn and turn.actions else None

    def _respond(self, rid: Any, result: Any) -> None:
        self._send({"jsonrpc": "2.0", "id": rid, "result": result})

    # -- turns -------------------------------------------------------------
    def _start_next(self) -> None:
        while self._gen is None and self._prompts:
            rid, params = self._prompts.popleft()
            given = params.get("sessionId")
            sid = given if isinstance(given, str) else "sess-1"
            turn, self._after_load = self._after_load or self.next_turn(), None
            self._gen = self._turn(rid, sid, params, turn)
            self._step(None, first=True)

    def _step(self, value: JsonObject | None, *, first: bool = False) -> None:
        gen = self._gen
        if gen is None:
            return
        try:
            item = next(gen) if first else gen.send(value)
            while item[0] == "send":
                self._send(item[1])
                item = next(gen)
            self._awaiting = (item[1], item[2])
        except StopIteration:
            self._gen = None
            self._start_next()

    def _turn(self, rid: Any, sid: str, params: JsonObject, turn: TurnScript | None) -> TurnGen:
        index = self.turns
        self.turns += 1
        name = turn.name if turn else None
        self._report({"event": "turn-start", "data": {"turn": index, "name": name}})
        v2 = self.protocol >= 2

        def update(u: JsonObject) -> tuple[str, JsonObject]:
            return ("send", {"jsonrpc": "2.0", "method": "session/update",
                             "params": {"sessionId": sid, "update": u}})

        prompt = model.as_array(params.get("prompt"))
        self.user_ids += 1
        # A scripted turn's user message is "<turn>-user", the ID a reload that keeps the
        # IDs replays it under (script.build_reload); a turn played again gets a new one.
        user_id = f"user-{self.user_ids}"
        if turn is not None and f"{turn.name}-user" not in self._user_seen:
            user_id = f"{turn.name}-user"
        self._user_seen.add(user_id)
        if v2:
            yield ("send", {"jsonrpc": "2.0", "id": rid,
                            "result": {"messageId": user_id} if self.response_message_id else {}})
        if turn is None:
            actions: list[JsonObject] = [{"update": {
                "sessionUpdate": "agent_message_chunk", "messageId": f"unscripted-{index}",
                "content": text_block("(no scripted turn)")}}]
            echo = v2
        else:
            actions, echo = list(turn.actions), turn.echo
        if echo:
            if v2:
                yield update({"sessionUpdate": "user_message", "messageId": user_id,
                              "content": list(prompt)})
            else:
                for block in prompt:
                    yield update({"sessionUpdate": "user_message_chunk", "messageId": user_id,
                                  "content": block})
        if v2:
            yield update({"sessionUpdate": "state_update", "state": "running"})
        for action in actions:
            if "update" in action:
                yield update(action["update"])
            elif "batch" in action:
                yield ("send", [update(u)[1] for u in action["batch"]])
            elif "permission" in action:
                yield from self._permission(sid, action["permission"], update)
        self.probes += 1
        probe_id = f"{PROBE_ID_PREFIX}{self.probes}"
        yield ("send", {"jsonrpc": "2.0", "id": probe_id, "method": PROBE_METHOD, "params": {}})
        if (turn is None or turn.await_probe) and not self.asked_lower:
            yield ("await", probe_id, f"the answer to the liveness probe {probe_id}")
        else:
            self._report({"event": "probe-unawaited", "data": {"id": probe_id}})
        if v2:
            yield update({"sessionUpdate": "state_update", "state": "idle",
                          "stopReason": "end_turn"})
        else:
            yield ("send", {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
        self._report({"event": "turn-end", "data": {"turn": index, "name": name}})

    def _permission(self, sid: str, perm: JsonObject,
                    update: Callable[[JsonObject], tuple[str, JsonObject]]) -> TurnGen:
        self.requests += 1
        rid = f"perm-{self.requests}"
        tool = {"toolCallId": perm["toolCallId"], "title": perm["title"], "kind": "read",
                "status": "pending"}
        options = [{"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
                   {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}]
        if self.protocol >= 2:
            yield update({"sessionUpdate": "state_update", "state": "requires_action"})
            params = {"sessionId": sid, "title": perm["title"],
                      "subject": {"type": "tool_call", "toolCall": tool}, "options": options}
        else:
            params = {"sessionId": sid, "toolCall": tool, "options": options}
        yield ("send", {"jsonrpc": "2.0", "id": rid, "method": "session/request_permission",
                        "params": params})
        yield ("await", rid, f"the answer to session/request_permission {rid}")
        if self.protocol >= 2:
            yield update({"sessionUpdate": "state_update", "state": "running"})
