# long: the reference behaviour, one overridable method per thing a broken fixture changes
"""A conformant ACP agent for protocol v1 and v2, written as a model to read.

This is the suite's reference target: every messageId check must pass on it.
It speaks JSON-RPC 2.0 over stdio, one compact JSON object per line, and logs
only to stderr. It uses the standard library only.

What it does, per protocol version (fixed by ``initialize`` for the
connection):

* v1: a prompt turn echoes the prompt as ``user_message_chunk`` updates, then
  streams a thought, an agent message, a tool call behind a permission
  request, and a second agent message, and answers ``{"stopReason": ...}``.
  ``session/load`` replays the stored history with the original message IDs
  before its response; ``session/resume`` never replays.
* v2: ``session/prompt`` is answered at once with ``{"messageId": <user
  message ID>}``; the echo (``user_message``), ``state_update`` running/idle
  and the output arrive as updates. ``session/resume`` with
  ``replayFrom: {"type": "start"}`` replays the history as whole-message
  upserts, then sends ``replay_complete``, then its response. A prompt that
  repeats an earlier ``idempotencyKey`` of the session is answered with the
  messageId the key's first attempt inserted, and inserts nothing.

Message IDs are opaque ``msg_<32 random hex digits>`` strings, made in one place
(:meth:`ReferenceAgent.new_message_id`), unique within the session, the same
on every chunk of a message, and kept across replays. Legacy client-supplied
IDs in ``session/prompt`` are ignored.

A prompt whose text contains the word "long" streams a 200-chunk agent
message with a small pause between chunks, so a client can cancel it.

Sessions are kept as JSON files under ``$ACP_REFERENCE_STATE_DIR`` (default:
``<tempdir>/acp-reference-agent-<uid>``), so a fresh process can load them.

The class is built from small methods so that a deliberately broken fixture
(``fixtures/agents/*.py``) can override exactly one behaviour. The wire helpers
(``wire.py``), the sessions and their store (``sessions.py``) and the JSON-RPC
connection (``connection.py``) live beside it; this module stays one class of
about 570 lines on purpose: every behaviour a broken fixture overrides is a
method of it, in the order a turn runs, and a reader follows a turn top to
bottom without jumping between mixins.
"""

from __future__ import annotations

import os
import sys

from conformance.reference.connection import Connection
from conformance.reference.sessions import Session, SessionStore, Turn
from conformance.reference.wire import (
    AGENT_NAME,
    AGENT_VERSION,
    CHUNK_UPDATES,
    INVALID_PARAMS,
    MAX_KEY,
    MESSAGE_UPDATES,
    RESOURCE_NOT_FOUND,
    SUPPORTED_VERSIONS,
    JsonObject,
    RequestId,
    RpcError,
    asks_for_long,
    joined_text,
    log,
    random_hex,
    text_block,
)

TYPE_CHECKING = False  # no typing at run time (wire.py says why)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

    from conformance.reference.connection import Handler

# What this module defines; a fixture imports the wire helpers, the sessions and the
# connection from the modules that define them (wire.py, sessions.py, connection.py).
__all__ = ["ReferenceAgent", "main"]

class ReferenceAgent(Connection):
    """A conformant ACP agent. Override one method to break one rule."""

    # The scripted output of a turn. Chunk texts are fragments of sentences,
    # so a message's text is the concatenation of its chunks.
    THOUGHT_TEXTS: tuple[str, ...] = ("Thinking about ", "how to answer.")
    FIRST_REPLY_TEXTS: tuple[str, ...] = ("Here is the ", "first reply", " to your prompt.")
    SECOND_REPLY_TEXTS: tuple[str, ...] = ("And here is the ", "second reply.")
    LONG_REPLY_CHUNKS = 200
    CHUNK_DELAY = 0.005  # seconds between chunks of a long reply (a "model")
    # seconds between the chunks of any other message: a model's pace, so that a cancel
    # or a request sent while a short reply streams can land inside it, as with a real one
    # (half a millisecond: about what each chunk's session-file replacement took before
    # the store journaled chunks, so the suite's orderings stay as they were)
    CHUNK_PAUSE = 0.0005
    TOOL_TITLE = "Read notes.txt"
    TOOL_RESULT = "The notes file says hello."
    PERMISSION_TITLE = "Allow the agent to read notes.txt?"

    def __init__(
        self,
        stdin: BinaryIO | None = None,
        stdout: BinaryIO | None = None,
        store: SessionStore | None = None,
    ) -> None:
        super().__init__(stdin, stdout)
        self.store = store if store is not None else SessionStore()
        self.protocol_version: int | None = None  # fixed by initialize
        self.sessions: dict[str, Session] = {}  # sessions open on this connection

    @property
    def v2(self) -> bool:
        return self.protocol_version == 2

    # ---- request dispatch

    def request_handlers(self) -> dict[str, Handler]:
        """Methods this agent answers. A handler returns the result to send,
        or None when it has answered the request itself."""
        handlers: dict[str, Handler] = {
            "initialize": self.handle_initialize,
            "session/new": self.handle_session_new,
            "session/resume": self.handle_session_resume,
            "session/close": self.handle_session_close,
            "session/list": self.handle_session_list,
            "session/prompt": self.handle_session_prompt,
        }
        if not self.v2:
            handlers["session/load"] = self.handle_session_load  # v2 has no session/load
        return handlers

    # ---- initialize and sessions ------------------------------------------

    def advertised_name(self) -> str:
        """The reference's name, or a fixture's own (``conformance.naming``)."""
        from conformance.naming import advertised_name

        return advertised_name(type(self), ReferenceAgent, AGENT_NAME, "agent")

    def handle_initialize(self, request_id: RequestId, params: JsonObject) -> JsonObject:
        requested = params.get("protocolVersion")
        if self.protocol_version is None:  # the first initialize fixes the version
            if isinstance(requested, int) and not isinstance(requested, bool):
                # The requested version if supported, else the newest we have.
                fits = [v for v in SUPPORTED_VERSIONS if v <= requested]
                self.protocol_version = max(fits) if fits else SUPPORTED_VERSIONS[0]
            else:
                self.protocol_version = SUPPORTED_VERSIONS[0]
        if self.v2:
            return {
                "protocolVersion": 2,
                "info": {"name": self.advertised_name(), "version": AGENT_VERSION},
                # `session: {...}` advertises the baseline session methods:
                # new, list, resume (with replay), close, prompt, cancel, update.
                "capabilities": {"session": {"prompt": {"embeddedContext": {}}}},
                "authMethods": [],
            }
        return {
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
            },
            "agentInfo": {"name": self.advertised_name(), "version": AGENT_VERSION},
            "authMethods": [],
        }

    def require_cwd(self, params: JsonObject) -> str:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise RpcError(INVALID_PARAMS, "Invalid params: cwd must be an absolute path")
        return cwd

    def check_mcp_servers(self, params: JsonObject, *, required: bool) -> None:
        servers = params.get("mcpServers")
        if servers is None and not required:
            return
        if not isinstance(servers, list):
            raise RpcError(INVALID_PARAMS, "Invalid params: mcpServers must be an array")

    def stored_session(self, params: JsonObject) -> Session:
        session_id = params.get("sessionId")
        session = self.store.load(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, "Session not found", {"sessionId": session_id})
        return session

    def open_session(self, params: JsonObject) -> Session:
        session_id = params.get("sessionId")
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, "Session not found", {"sessionId": session_id})
        return session

    def handle_session_new(self, request_id: RequestId, params: JsonObject) -> JsonObject:
        cwd = self.require_cwd(params)
        self.check_mcp_servers(params, required=not self.v2)
        session = Session(
            session_id=f"sess_{random_hex()}",
            cwd=cwd,
            protocol_version=self.protocol_version or 1,
        )
        self.store.save(session)
        self.sessions[session.session_id] = session
        return {"sessionId": session.session_id}

    def handle_session_load(self, request_id: RequestId, params: JsonObject) -> None:
        """v1: replay the whole history, then answer ``{}``."""
        self.require_cwd(params)
        self.check_mcp_servers(params, required=True)
        session = self.stored_session(params)
        self.sessions[session.session_id] = session
        self.finish_restore(request_id, session, {}, replay=True)

    def handle_session_resume(self, request_id: RequestId, params: JsonObject) -> None:
        """v1: never replays. v2: replays only for ``replayFrom: {"type": "start"}``."""
        self.require_cwd(params)
        self.check_mcp_servers(params, required=False)
        replay = False
        if self.v2:
            cursor = params.get("replayFrom")
            if cursor is not None:
                if not isinstance(cursor, dict) or cursor.get("type") != "start":
                    raise RpcError(INVALID_PARAMS, "Invalid params: unsupported replayFrom cursor")
                replay = True
        # a session open on this connection is the one its running turn writes to
        sid = params.get("sessionId")
        session = (self.sessions.get(sid) if isinstance(sid, str) else None) or \
            self.stored_session(params)
        self.sessions[session.session_id] = session
        self.finish_restore(request_id, session, {}, replay=replay)

    def answers_mid_turn(self, method: str, params: object) -> bool:
        """v2: a ``session/resume`` that arrives while a turn streams is answered at once,
        between two chunks: the history so far, ``replay_complete``, the response, and only
        then the turn's next chunk (RFD session-replay-complete: live updates are held back
        until the marker)."""
        return self.v2 and method == "session/resume"

    def finish_restore(
        self, request_id: RequestId, session: Session, result: JsonObject, *, replay: bool
    ) -> None:
        """Replay (if asked) strictly before the load/resume response."""
        if replay:
            self.replay(session)
            if self.v2:
                self.send_replay_complete(session)
        self.respond(request_id, result)

    def send_replay_complete(self, session: Session) -> None:
        """v2: the replay end marker (v2 Preview, RFD session-replay-complete): after the
        last replayed update, before the response."""
        self.send_update(session, {"sessionUpdate": "replay_complete"})

    def handle_session_close(self, request_id: RequestId, params: JsonObject) -> JsonObject:
        session = self.open_session(params)
        del self.sessions[session.session_id]
        return {}

    def handle_session_list(self, request_id: RequestId, params: JsonObject) -> JsonObject:
        cwd = params.get("cwd")
        sessions = []
        for session in self.store.all():
            if cwd is not None and session.cwd != cwd:
                continue
            info: JsonObject = {"sessionId": session.session_id, "cwd": session.cwd}
            if session.title:
                info["title"] = session.title
            if session.updated_at:
                info["updatedAt"] = session.updated_at
            sessions.append(info)
        return {"sessions": sessions}

    # ---- message identity --------------------------------------------------

    def new_message_id(self, kind: str) -> str:
        """The one source of message IDs: opaque, globally unique.

        ``kind`` is "user", "agent" or "thought"; the reference agent does not
        encode it in the ID (clients must not parse IDs)."""
        return f"msg_{random_hex()}"

    def chunk_message_id(
        self, kind: str, message_id: str, index: int, total: int
    ) -> str | None:
        """The ``messageId`` put on chunk ``index`` (of ``total``) of a message.
        None leaves the key out. Every chunk carries the message's ID."""
        return message_id

    def user_message_id(self, params: JsonObject) -> str:
        """The ID of the user message a prompt inserts. The agent alone makes
        IDs: a legacy ``params.messageId`` or ``_meta`` ID is never adopted."""
        return self.new_message_id("user")

    def replay_message_id(self, entry: JsonObject) -> str:
        """The ID a stored message is replayed with: its original one."""
        return str(entry["messageId"])

    def new_tool_call_id(self) -> str:
        return f"call_{random_hex()}"

    # ---- update builders ---------------------------------------------------

    def build_chunk_update(
        self, kind: str, message_id: str | None, block: JsonObject
    ) -> JsonObject:
        update: JsonObject = {"sessionUpdate": CHUNK_UPDATES[kind]}
        if message_id is not None:
            update["messageId"] = message_id
        update["content"] = block
        return update

    def build_message_update(
        self, kind: str, message_id: str, content: list[JsonObject], *, replay: bool = False
    ) -> JsonObject:
        """v2 whole-message upsert: ``content`` replaces the whole message."""
        return {"sessionUpdate": MESSAGE_UPDATES[kind], "messageId": message_id, "content": content}

    def build_state_update(self, state: str, stop_reason: str | None = None) -> JsonObject:
        update: JsonObject = {"sessionUpdate": "state_update", "state": state}
        if stop_reason is not None:
            update["stopReason"] = stop_reason
        return update

    def build_tool_call(self, tool: JsonObject) -> JsonObject:
        """Announce a tool call: v1 ``tool_call``; v2 has no such kind, so a
        ``tool_call_update`` for a new ``toolCallId`` creates it."""
        fields = {k: tool[k] for k in ("toolCallId", "title", "kind", "rawInput")}
        if self.v2:
            return {"sessionUpdate": "tool_call_update", **fields, "status": "in_progress"}
        return {"sessionUpdate": "tool_call", **fields, "status": "pending"}

    def build_tool_call_update(
        self, tool_call_id: str, status: str, content: list[JsonObject]
    ) -> JsonObject:
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": tool_call_id,
            "status": status,
            "content": content,
        }

    # ---- prompt turns --------------------------------------------------------

    def handle_session_prompt(self, request_id: RequestId, params: JsonObject) -> None:
        session = self.open_session(params)
        prompt = params.get("prompt")
        if not isinstance(prompt, list) or not all(isinstance(b, dict) for b in prompt):
            raise RpcError(INVALID_PARAMS, "Invalid params: prompt must be an array of blocks")
        key = params.get("idempotencyKey") if self.v2 else None
        if key is not None and not (isinstance(key, str) and 1 <= len(key) <= MAX_KEY):
            raise RpcError(INVALID_PARAMS, "Invalid params: idempotencyKey must be a string of "
                           f"1 to {MAX_KEY} characters")
        if isinstance(key, str) and key in session.prompt_keys:
            # A retry of a submission: its message's ID again, and nothing inserted.
            self.respond(request_id, {"messageId": session.prompt_keys[key]})
            return
        turn = Turn(session=session, request_id=request_id, prompt=prompt)
        turn.user_message_id = self.user_message_id(params)
        if isinstance(key, str):
            self.remember_prompt_key(session, key, turn.user_message_id)
        if session.title is None:
            session.title = turn.text[:60] or None
        self.turn = turn
        try:
            if self.v2:  # v2: the response only says the prompt was accepted
                self.respond(request_id, self.prompt_response(turn, None))
            stop_reason = "end_turn"
            self.emit_turn(turn)
            if turn.cancelled:
                stop_reason = "cancelled"
        finally:
            self.turn = None
        self.end_turn(turn, stop_reason)

    def remember_prompt_key(self, session: Session, key: str, message_id: str) -> None:
        """v2: the idempotencyKey's message, kept with the session (a retry may come to a
        fresh process after a resume)."""
        session.prompt_keys[key] = message_id
        self.store.save(session)

    def prompt_response(self, turn: Turn, stop_reason: str | None) -> JsonObject:
        """v1: ``{"stopReason"}`` at the end of the turn. v2: on acceptance,
        ``{"messageId"}`` naming the inserted user message (required by the
        newest published schema; the older snapshot allows it)."""
        if self.v2:
            return {"messageId": turn.user_message_id}
        return {"stopReason": stop_reason}

    def end_turn(self, turn: Turn, stop_reason: str) -> None:
        """Close the turn after its last update: v1 answers the prompt,
        v2 reports idle with the stop reason."""
        if self.v2:
            self.send_update(turn.session, self.build_state_update("idle", stop_reason))
        else:
            self.respond(turn.request_id, self.prompt_response(turn, stop_reason))

    def emit_turn(self, turn: Turn) -> None:
        """The scripted turn. Each step checks for cancellation first."""
        self.emit_user_echo(turn)
        if self.v2:
            self.send_update(turn.session, self.build_state_update("running"))
        steps: list[Callable[[Turn], None]]
        if asks_for_long(turn.text):
            steps = [self.emit_thought, self.emit_long_reply]
        else:
            steps = [self.emit_thought, self.emit_first_reply, self.emit_tool_call,
                     self.emit_second_reply]
        for step in steps:
            self.pump()
            if turn.cancelled:
                return
            step(turn)

    def emit_user_echo(self, turn: Turn) -> None:
        """Report the accepted prompt as a user message with an agent-made ID:
        v1 one ``user_message_chunk`` per block, v2 one ``user_message``."""
        message_id = turn.user_message_id
        if self.v2:
            self.record_message(turn, "user", message_id, list(turn.prompt))
            self.send_update(
                turn.session, self.build_message_update("user", message_id, list(turn.prompt))
            )
        else:
            for index, block in enumerate(turn.prompt):
                self.emit_chunk(turn, "user", message_id, index, len(turn.prompt), block)

    def emit_thought(self, turn: Turn) -> None:
        self.emit_message(turn, "thought", list(self.THOUGHT_TEXTS))

    def emit_first_reply(self, turn: Turn) -> None:
        self.emit_message(turn, "agent", list(self.FIRST_REPLY_TEXTS))

    def emit_second_reply(self, turn: Turn) -> None:
        """The last message; in v2 it is then restated as a whole-message
        upsert (same ID) carrying its final content."""
        message_id = self.emit_message(turn, "agent", list(self.SECOND_REPLY_TEXTS))
        if self.v2 and not turn.cancelled:
            record = turn.records[("agent", message_id)]
            final = [text_block(joined_text(record["content"]))]
            self.record_message(turn, "agent", message_id, final)
            self.send_update(turn.session, self.build_message_update("agent", message_id, final))

    def emit_long_reply(self, turn: Turn) -> None:
        texts = [f"Part {n} of a long answer; " for n in range(1, self.LONG_REPLY_CHUNKS)]
        texts.append("and that is the end.")
        self.emit_message(turn, "agent", texts, delay=self.CHUNK_DELAY)

    def emit_message(
        self, turn: Turn, kind: str, texts: list[str], *, delay: float | None = None
    ) -> str:
        """Stream one message as text chunks under one new ID, ``delay`` seconds apart
        (:attr:`CHUNK_PAUSE` unless given). Input is read between chunks, so a cancel
        stops the stream at a chunk boundary."""
        message_id = self.new_message_id(kind)
        for index, text in enumerate(texts):
            if index > 0:
                self.pace(delay)
                if turn.cancelled:
                    break
            self.emit_chunk(turn, kind, message_id, index, len(texts), text_block(text))
        return message_id

    def pace(self, delay: float | None = None) -> None:
        """Between two chunks of a message: read input for ``delay`` seconds
        (:attr:`CHUNK_PAUSE` unless given), so a cancel can land there."""
        self.pump(self.CHUNK_PAUSE if delay is None else delay)

    def emit_chunk(
        self, turn: Turn, kind: str, message_id: str, index: int, total: int, block: JsonObject
    ) -> None:
        """Send one chunk and add its block to the stored message."""
        chunk_id = self.chunk_message_id(kind, message_id, index, total)
        self.send_update(turn.session, self.build_chunk_update(kind, chunk_id, block))
        self.record_block(turn, kind, message_id, block)

    def record_block(self, turn: Turn, kind: str, message_id: str, block: JsonObject) -> None:
        record = turn.records.get((kind, message_id))
        if record is None:
            self.record_message(turn, kind, message_id, [block])
        else:
            record["content"].append(block)
            self.store.save_block(turn.session, record)

    def record_message(
        self, turn: Turn, kind: str, message_id: str, content: list[JsonObject]
    ) -> None:
        """Store a message's content (new message, or an upsert replacing it)."""
        record = turn.records.get((kind, message_id))
        if record is None:
            record = {"type": "message", "kind": kind, "messageId": message_id, "content": []}
            turn.records[(kind, message_id)] = record
            turn.session.history.append(record)
        record["content"] = list(content)
        turn.last_message_id[kind] = message_id
        self.store.save(turn.session)

    def emit_tool_call(self, turn: Turn) -> None:
        """Ask permission, then run a (pretend) read. Skipped unless allowed."""
        tool: JsonObject = {
            "toolCallId": self.new_tool_call_id(),
            "title": self.TOOL_TITLE,
            "kind": "read",
            "rawInput": {"path": os.path.join(turn.session.cwd, "notes.txt")},
        }
        if not self.request_permission(turn, tool) or turn.cancelled:
            return
        self.send_update(turn.session, self.build_tool_call(tool))
        content = [{"type": "content", "content": text_block(self.TOOL_RESULT)}]
        self.send_update(
            turn.session, self.build_tool_call_update(tool["toolCallId"], "completed", content)
        )
        turn.session.history.append(
            {"type": "tool_call", **tool, "status": "completed", "content": content}
        )
        self.store.save(turn.session)

    def permission_request(self, turn: Turn, tool: JsonObject) -> JsonObject:
        options = [
            {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
            {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
        ]
        tool_call = {**tool, "status": "pending"}
        if self.v2:
            return {
                "sessionId": turn.session.session_id,
                "title": self.PERMISSION_TITLE,
                "subject": {"type": "tool_call", "toolCall": tool_call},
                "options": options,
            }
        return {"sessionId": turn.session.session_id, "toolCall": tool_call, "options": options}

    def request_permission(self, turn: Turn, tool: JsonObject) -> bool:
        """True only for an explicit choice of an allow option. A cancelled
        outcome, an error or anything unknown never counts as approval."""
        if self.v2:
            self.send_update(turn.session, self.build_state_update("requires_action"))
        params = self.permission_request(turn, tool)
        answer = self.wait_for_answer(self.request("session/request_permission", params))
        if answer is None or turn.cancelled:
            return False
        if self.v2:
            self.send_update(turn.session, self.build_state_update("running"))
        result = answer.get("result")
        outcome = result.get("outcome") if isinstance(result, dict) else None
        return (
            isinstance(outcome, dict)
            and outcome.get("outcome") == "selected"
            and outcome.get("optionId") == "allow_once"
        )

    # ---- replay ----------------------------------------------------------------

    def replay(self, session: Session) -> None:
        """Send the stored history as ``session/update`` notifications: v1 as
        chunks (one per stored block), v2 as whole-message upserts, with the
        original message IDs."""
        for entry in session.history:
            if entry.get("type") == "message":
                self.replay_message(session, entry)
            elif entry.get("type") == "tool_call":
                self.replay_tool_call(session, entry)

    def replay_message(self, session: Session, entry: JsonObject) -> None:
        kind, content = entry["kind"], entry["content"]
        message_id = self.replay_message_id(entry)
        if self.v2:
            self.send_update(
                session, self.build_message_update(kind, message_id, content, replay=True)
            )
            return
        for index, block in enumerate(content):
            chunk_id = self.chunk_message_id(kind, message_id, index, len(content))
            self.send_update(session, self.build_chunk_update(kind, chunk_id, block))

    def replay_tool_call(self, session: Session, entry: JsonObject) -> None:
        if self.v2:  # one upsert with the final state
            fields = ("toolCallId", "title", "kind", "rawInput", "status", "content")
            self.send_update(
                session, {"sessionUpdate": "tool_call_update", **{k: entry[k] for k in fields}}
            )
            return
        self.send_update(session, self.build_tool_call(entry))
        self.send_update(
            session,
            self.build_tool_call_update(entry["toolCallId"], entry["status"], entry["content"]),
        )


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------


USAGE = """usage: acp-reference-agent [-h] [--state-dir DIR]

A conformant ACP agent for protocol v1 and v2 over stdio.

options:
  -h, --help       show this help message and exit
  --state-dir DIR  where sessions are stored (default: $ACP_REFERENCE_STATE_DIR,
                   else <tempdir>/acp-reference-agent-<uid>)
"""


def parse_args(argv: list[str]) -> str | None:
    """The ``--state-dir`` value (None: the default). Read by hand, not with argparse:
    its help formatter costs a tenth of the agent's start-up, paid by every case."""
    state_dir = None
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        if arg == "--state-dir" and args:
            state_dir = args.pop(0)
        elif arg.startswith("--state-dir=") and arg != "--state-dir=":
            state_dir = arg.split("=", 1)[1]
        else:
            problem = ("argument --state-dir: expected one argument"
                       if arg.startswith("--state-dir") else f"unrecognized argument: {arg}")
            sys.stderr.write(f"{USAGE.splitlines()[0]}\nacp-reference-agent: error: {problem}\n")
            raise SystemExit(2)
    return state_dir


def main(argv: list[str] | None = None, agent_class: type[ReferenceAgent] = ReferenceAgent) -> int:
    state_dir = parse_args(sys.argv[1:] if argv is None else argv)
    log.prefix = agent_class.__name__
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() must never reach the protocol stream
    agent = agent_class(stdout=stdout, store=SessionStore(state_dir))
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
