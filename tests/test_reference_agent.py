"""The reference agent and the broken fixture agents, over real pipes.

Every test starts real agent processes and talks JSON-RPC to them line by
line. Waits are driven by lines arriving (a reader thread and a queue with a
timeout), never by sleeps. Every line the reference agent writes is validated
against the official ACP schemas, found at ``$ACP_SHARED_DIR/acp-schema`` or
``<repo>/../shared/acp-schema`` (tests that need them skip if absent).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = REPO_ROOT / "fixtures" / "agents"
REFERENCE = [sys.executable, "-m", "conformance.reference.agent"]
LINE_TIMEOUT = 10.0  # seconds to wait for one line; only reached when broken
CWD = "/home/user/project" if os.name == "posix" else "C:\\Users\\user\\project"  # never read

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------
# Official schemas
# --------------------------------------------------------------------------


def shared_dir() -> Path | None:
    configured = os.environ.get("ACP_SHARED_DIR")
    candidate = Path(configured) if configured else REPO_ROOT.parent / "shared"
    return candidate if (candidate / "acp-schema").is_dir() else None


SHARED = shared_dir()
SCHEMA_REASON = (
    "official ACP schemas not found: set ACP_SHARED_DIR or put shared/ next to the repository"
)

# The result definition for each method we call, and the params definition
# for each message the agent originates.
RESULT_DEFS = {
    "initialize": "InitializeResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/resume": "ResumeSessionResponse",
    "session/close": "CloseSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/prompt": "PromptResponse",
}
PARAMS_DEFS = {
    1: {
        "session/update": "SessionNotification",
        "session/request_permission": "RequestPermissionRequest",
        "$/cancel_request": "CancelRequestNotification",
    },
    2: {
        "session/update": "UpdateSessionNotification",
        "session/request_permission": "RequestPermissionRequest",
        "$/cancel_request": "CancelRequestNotification",
    },
}
# Top-level branches of the schema for batches an agent may send.
AGENT_BATCHES = {"AgentBatchCall", "AgentBatchResponse"}


class Schema:
    """One official schema document, validating agent-side messages.

    The document's top level is an anyOf over message shapes (Agent, Client,
    batches, ProtocolLevel); validators are built for its ``$defs``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.document = json.loads(path.read_text(encoding="utf-8"))
        envelope = dict(self.document)
        envelope["anyOf"] = [b for b in self.document["anyOf"] if b.get("title") in AGENT_BATCHES]
        self.envelope = Draft202012Validator(envelope)
        self._defs: dict[str, Draft202012Validator] = {}

    def definition(self, name: str) -> Draft202012Validator:
        if name not in self._defs:
            assert name in self.document["$defs"], f"{name} not in {self.path}"
            self._defs[name] = Draft202012Validator(
                {"$defs": self.document["$defs"], "$ref": f"#/$defs/{name}"}
            )
        return self._defs[name]


@pytest.fixture(scope="session")
def schemas() -> dict[int, list[Schema]] | None:
    if SHARED is None:
        return None
    root = SHARED / "acp-schema"
    return {
        1: [Schema(root / "v1" / "schema.json")],
        2: [Schema(root / "v2" / "schema.json"),
            Schema(root / "upstream-sdk-2.4.0" / "v2" / "schema.json")],
    }


def validate_agent_message(
    schemas: list[Schema], protocol: int, message: Any, methods: dict[int, str]
) -> None:
    """Check one line an agent wrote against each official schema: its
    message-type definition (AgentRequest, AgentResponse, AgentNotification)
    and the definition of its params or result (``methods`` maps our request
    IDs to their methods, to pick the result definition)."""
    for schema in schemas:
        if isinstance(message, list):
            assert protocol == 2, "v1 has no batches"
            error = next(schema.envelope.iter_errors(message), None)
            assert error is None, f"{schema.path}: not an agent batch: {message}"
        for entry in message if isinstance(message, list) else [message]:
            assert entry.get("jsonrpc") == "2.0", entry
            for target, name in definitions_for(entry, protocol, methods):
                error = next(schema.definition(name).iter_errors(target), None)
                assert error is None, f"{schema.path}: {name}: {error and error.message}\n{entry}"


def definitions_for(
    entry: JsonObject, protocol: int, methods: dict[int, str]
) -> list[tuple[Any, str]]:
    if "method" in entry:
        # Protocol-level `$/...` notifications have only their params definition.
        found = [] if entry["method"].startswith("$/") else [
            (entry, "AgentRequest" if "id" in entry else "AgentNotification")]
        params = PARAMS_DEFS[protocol].get(entry["method"])
        return found + ([(entry.get("params"), params)] if params else [])
    found = [(entry, "AgentResponse")]
    if "error" in entry:
        return found + [(entry["error"], "Error")]
    result = RESULT_DEFS.get(methods.get(entry.get("id"), ""))  # type: ignore[arg-type]
    return found + ([(entry.get("result"), result)] if result else [])


# --------------------------------------------------------------------------
# A tiny line-based client
# --------------------------------------------------------------------------


class AgentProcess:
    """An agent subprocess and the client side of its JSON-RPC stream.

    ``strict``: every line must be one JSON message that validates against
    the schemas (the reference agent). Otherwise (broken fixtures) framing
    faults are tolerated and recorded: a message spread over several lines is
    reassembled and counted in ``multi_line``."""

    def __init__(
        self,
        argv: list[str],
        state_dir: Path,
        protocol: int,
        schemas: dict[int, list[Schema]] | None,
        *,
        strict: bool = True,
    ) -> None:
        env = dict(os.environ, ACP_REFERENCE_STATE_DIR=str(state_dir), PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.protocol = protocol
        self.schemas = schemas[protocol] if (schemas and strict) else []
        self.strict = strict
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr: list[bytes] = []
        self.log: list[Any] = []  # every message received, batches kept as lists
        self.multi_line = 0
        self.methods: dict[int, str] = {}  # our request id -> method
        self._ready: deque[JsonObject] = deque()
        self._next_id = 0
        sinks = ((self.proc.stdout, self.lines.put), (self.proc.stderr, self.stderr.append))
        for stream, sink in sinks:
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream: Any, sink: Callable[[Any], None]) -> None:
        for line in stream:
            sink(line)
        sink(None)

    def stderr_tail(self) -> str:
        return b"".join(x for x in self.stderr if x)[-2000:].decode("utf-8", "replace")

    # -- sending

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode("utf-8"))
        self.proc.stdin.flush()

    def request(self, method: str, params: JsonObject) -> int:
        self._next_id += 1
        self.methods[self._next_id] = method
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def notify(self, method: str, params: JsonObject) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def answer(self, request_id: Any, result: JsonObject) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    # -- receiving

    def _line(self) -> bytes:
        try:
            line = self.lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"no line within {LINE_TIMEOUT}s; stderr:\n{self.stderr_tail()}") from None
        if line is None:
            raise AssertionError(f"agent closed stdout; stderr:\n{self.stderr_tail()}")
        return line

    def next_message(self) -> JsonObject:
        """The next message; a batch line yields its entries in order."""
        while not self._ready:
            line = self._line()
            text = line.decode("utf-8")
            assert text.endswith("\n"), "every line ends with a newline"
            try:
                message = json.loads(text)
            except ValueError:
                if self.strict:
                    raise AssertionError(f"not one JSON message per line: {text!r}") from None
                message = self._reassemble(text)
            self.log.append(message)
            self.validate(message)
            self._ready.extend(message if isinstance(message, list) else [message])
        return self._ready.popleft()

    def _reassemble(self, text: str) -> Any:
        while True:
            text += self._line().decode("utf-8")
            try:
                message = json.loads(text)
            except ValueError:
                continue
            self.multi_line += 1
            return message

    def validate(self, message: Any) -> None:
        validate_agent_message(self.schemas, self.protocol, message, self.methods)

    def read_until(
        self, done: Callable[[JsonObject], bool], *, permission: str | None = "allow_once"
    ) -> list[JsonObject]:
        """Messages up to and including the first for which ``done`` holds.
        Permission requests are answered with ``permission`` on the way
        (None: left unanswered)."""
        seen = []
        while True:
            message = self.next_message()
            seen.append(message)
            if message.get("method") == "session/request_permission" and permission:
                outcome = (
                    {"outcome": "cancelled"} if permission == "cancelled"
                    else {"outcome": "selected", "optionId": permission}
                )
                self.answer(message["id"], {"outcome": outcome})
            if done(message):
                return seen

    def call(
        self, method: str, params: JsonObject, **kw: Any
    ) -> tuple[list[JsonObject], JsonObject]:
        """Send a request; return (messages before the response, the response)."""
        request_id = self.request(method, params)
        seen = self.read_until(lambda m: is_response(m, request_id), **kw)
        return seen[:-1], seen[-1]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=LINE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("agent did not exit after stdin closed") from None
        assert code == 0, f"exit status {code}; stderr:\n{self.stderr_tail()}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def is_response(message: JsonObject, request_id: Any) -> bool:
    return "method" not in message and message.get("id") == request_id


def updates(messages: list[JsonObject]) -> list[JsonObject]:
    return [m["params"]["update"] for m in messages if m.get("method") == "session/update"]


def kinds(messages: list[JsonObject]) -> list[str]:
    """The update kinds and agent requests, in order (for sequence asserts)."""
    out = []
    for m in messages:
        if m.get("method") == "session/update":
            u = m["params"]["update"]
            out.append(u["sessionUpdate"] + (f":{u['state']}" if "state" in u else ""))
        elif "method" in m:
            out.append(m["method"])
    return out


KIND_OF = {
    "user_message_chunk": "user", "agent_message_chunk": "agent", "agent_thought_chunk": "thought",
    "user_message": "user", "agent_message": "agent", "agent_thought": "thought",
}


def message_view(items: list[JsonObject]) -> list[tuple[str, str, str]]:
    """(kind, messageId, text) per message in order of first appearance,
    applying chunks (append) and v2 upserts (replace). Asserts that every
    message update carries a string ID."""
    order: list[tuple[str, str]] = []
    content: dict[tuple[str, str], list[JsonObject]] = {}
    for u in items:
        kind = KIND_OF.get(u["sessionUpdate"])
        if kind is None:
            continue
        assert isinstance(u.get("messageId"), str), f"message update without an ID: {u}"
        key = (kind, u["messageId"])
        if key not in content:
            order.append(key)
            content[key] = []
        if u["sessionUpdate"].endswith("_chunk"):
            content[key].append(u["content"])
        else:
            content[key] = list(u["content"])
    return [(k, i, "".join(b.get("text", "") for b in content[(k, i)])) for k, i in order]


def text(value: str) -> list[JsonObject]:
    return [{"type": "text", "text": value}]


# --------------------------------------------------------------------------
# Driving sessions
# --------------------------------------------------------------------------


@dataclass
class Client:
    """Start agents that share one state directory (one "machine")."""

    state_dir: Path
    schemas: dict[int, list[Schema]] | None
    argv: list[str] = field(default_factory=lambda: list(REFERENCE))
    strict: bool = True
    started: list[AgentProcess] = field(default_factory=list)
    initialized: list[JsonObject] = field(default_factory=list)  # initialize results

    def start(self, protocol: int) -> AgentProcess:
        agent = AgentProcess(self.argv, self.state_dir, protocol, self.schemas, strict=self.strict)
        self.started.append(agent)
        _, response = agent.call("initialize", initialize_params(protocol))
        assert response["result"]["protocolVersion"] == protocol, response
        self.initialized.append(response["result"])
        return agent


def initialize_params(protocol: int) -> JsonObject:
    if protocol == 2:
        return {"protocolVersion": 2, "info": {"name": "acp-conformance-tests", "version": "0"},
                "capabilities": {}}
    return {"protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False},
                                   "terminal": False},
            "clientInfo": {"name": "acp-conformance-tests", "version": "0"}}


@pytest.fixture
def client(tmp_path: Path, schemas: dict[int, list[Schema]] | None) -> Iterator[Client]:
    c = Client(tmp_path / "state", schemas)
    yield c
    for agent in c.started:
        agent.kill()


def new_session(agent: AgentProcess) -> str:
    params: JsonObject = {"cwd": CWD}
    if agent.protocol == 1:
        params["mcpServers"] = []
    _, response = agent.call("session/new", params)
    return str(response["result"]["sessionId"])


def run_turn(
    agent: AgentProcess, session_id: str, prompt: list[JsonObject], **kw: Any
) -> tuple[list[JsonObject], JsonObject]:
    """One prompt turn: (all messages, including the prompt response, up to
    the turn's end, the prompt response). v1 ends with the response, v2 with
    the idle ``state_update``."""
    params = {"sessionId": session_id, "prompt": prompt, **kw.pop("extra", {})}
    request_id = agent.request("session/prompt", params)
    if agent.protocol == 1:
        seen = agent.read_until(lambda m: is_response(m, request_id), **kw)
    else:
        seen = agent.read_until(turn_end(agent, session_id, request_id, accepted=False), **kw)
    response = next(m for m in seen if is_response(m, request_id))
    return seen, response


def is_idle(message: JsonObject, session_id: str) -> bool:
    if message.get("method") != "session/update":
        return False
    update = message["params"]["update"]
    return bool(message["params"]["sessionId"] == session_id
                and update.get("sessionUpdate") == "state_update" and update.get("state") == "idle")


def restore(
    agent: AgentProcess, session_id: str, **extra: Any
) -> tuple[list[JsonObject], JsonObject]:
    """v1 ``session/load``; v2 ``session/resume`` (pass replayFrom in extra)."""
    if agent.protocol == 1:
        return agent.call("session/load", {"sessionId": session_id, "cwd": CWD, "mcpServers": []})
    return agent.call("session/resume", {"sessionId": session_id, "cwd": CWD, **extra})


# --------------------------------------------------------------------------
# Reference agent: v1
# --------------------------------------------------------------------------

V1_TURN = [
    "user_message_chunk", "user_message_chunk",
    "agent_thought_chunk", "agent_thought_chunk",
    "agent_message_chunk", "agent_message_chunk", "agent_message_chunk",
    "session/request_permission",
    "tool_call", "tool_call_update",
    "agent_message_chunk", "agent_message_chunk",
]
TURN_TEXTS = [
    ("thought", "Thinking about how to answer."),
    ("agent", "Here is the first reply to your prompt."),
    ("agent", "And here is the second reply."),
]


def test_schemas_are_available(schemas: dict[int, list[Schema]] | None) -> None:
    if schemas is None:
        pytest.skip(SCHEMA_REASON)
    assert all(s.document["$defs"] for group in schemas.values() for s in group)


def test_schema_validation_catches_bad_messages(schemas: dict[int, list[Schema]] | None) -> None:
    """The validator used on every line can fail (so its silence means something)."""
    if schemas is None:
        pytest.skip(SCHEMA_REASON)
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a"}}
    bad = [
        (2, {"jsonrpc": "2.0", "method": "session/update",
             "params": {"sessionId": "s", "update": chunk}}, {}),  # v2 chunk without an ID
        (1, {"jsonrpc": "2.0", "method": "session/update",
             "params": {"sessionId": "s", "update": {**chunk, "messageId": 7}}}, {}),
        (2, {"jsonrpc": "2.0", "id": 1, "method": "session/request_permission",
             "params": {"sessionId": "s", "options": []}}, {}),  # no title, no option
        (1, {"jsonrpc": "2.0", "id": 3, "result": {}}, {3: "session/prompt"}),  # no stopReason
    ]
    for protocol, message, methods in bad:
        with pytest.raises(AssertionError):
            validate_agent_message(schemas[protocol], protocol, message, methods)


def test_v1_initialize_advertises_load_resume_close(client: Client) -> None:
    agent = AgentProcess(REFERENCE, client.state_dir, 1, client.schemas)
    client.started.append(agent)
    _, response = agent.call("initialize", initialize_params(1))
    result = response["result"]
    assert result["protocolVersion"] == 1
    assert result["agentCapabilities"]["loadSession"] is True
    assert {"resume", "close"} <= set(result["agentCapabilities"]["sessionCapabilities"])
    assert result["agentInfo"]["name"] == "acp-conformance-reference-agent"
    assert result["authMethods"] == []
    agent.close()


def test_v1_turn_has_one_id_per_message_and_ignores_legacy_ids(client: Client) -> None:
    agent = client.start(1)
    session_id = new_session(agent)
    assert (client.state_dir / f"{session_id}.json").is_file()
    prompt = text("Say hello ") + text("twice.")
    legacy = {"messageId": "client-123", "_meta": {"messageId": "client-123"}}
    seen, response = run_turn(agent, session_id, prompt, extra=legacy)

    assert response["result"] == {"stopReason": "end_turn"}
    assert kinds(seen) == V1_TURN
    items = updates(seen)
    assert not any("messageId" in u for u in items if u["sessionUpdate"].startswith("tool_call"))
    view = message_view(items)
    assert [(k, t) for k, _, t in view] == [("user", "Say hello twice.")] + TURN_TEXTS
    ids = [i for _, i, _ in view]
    assert len(set(ids)) == len(ids) == 4
    assert "client-123" not in ids

    permission = next(m for m in seen if m.get("method") == "session/request_permission")
    params = permission["params"]
    assert params["toolCall"]["toolCallId"] == items[7]["toolCallId"]
    assert {o["kind"] for o in params["options"]} == {"allow_once", "reject_once"}

    seen2, _ = run_turn(agent, session_id, text("Again."))
    ids2 = [i for _, i, _ in message_view(updates(seen2))]
    assert len(set(ids2)) == 4 and not set(ids2) & set(ids), "IDs are unique across turns"
    agent.close()


def test_v1_load_on_fresh_process_replays_original_ids_before_response(client: Client) -> None:
    first = client.start(1)
    session_id = new_session(first)
    live: list[JsonObject] = []
    for prompt in ("First prompt.", "Second prompt."):
        seen, _ = run_turn(first, session_id, text(prompt))
        live += updates(seen)
    first.close()

    second = client.start(1)
    before, response = restore(second, session_id)
    assert response["result"] == {}
    assert all(m.get("method") == "session/update" for m in before)
    replayed = updates(before)
    assert message_view(replayed) == message_view(live), "same messages, same original IDs"
    assert [u for u in replayed if u["sessionUpdate"].startswith("tool_call")] == \
        [u for u in live if u["sessionUpdate"].startswith("tool_call")]

    seen, _ = run_turn(second, session_id, text("Third prompt."))
    new_ids = {i for _, i, _ in message_view(updates(seen))}
    assert not new_ids & {i for _, i, _ in message_view(live)}, "no collision after load"

    again, _ = restore(second, session_id)  # same connection: now three turns
    assert message_view(updates(again)) == message_view(live + updates(seen))
    second.close()


def test_v1_resume_does_not_replay_and_unknown_session_is_not_found(client: Client) -> None:
    agent = client.start(1)
    session_id = new_session(agent)
    run_turn(agent, session_id, text("Hello."))
    before, response = agent.call("session/resume", {"sessionId": session_id, "cwd": CWD})
    assert before == [] and response["result"] == {}
    _, missing = agent.call("session/load", {"sessionId": "sess_" + "0" * 32, "cwd": CWD,
                                             "mcpServers": []})
    assert missing["error"]["code"] == -32002
    _, closed = agent.call("session/close", {"sessionId": session_id})
    assert closed["result"] == {}
    _, gone = agent.call("session/prompt", {"sessionId": session_id, "prompt": text("x")})
    assert gone["error"]["code"] == -32002
    agent.close()


@pytest.mark.parametrize("answer", ["reject_once", "cancelled"])
def test_v1_permission_not_granted_skips_the_tool(client: Client, answer: str) -> None:
    agent = client.start(1)
    session_id = new_session(agent)
    seen, response = run_turn(agent, session_id, text("Hi."), permission=answer)
    assert response["result"] == {"stopReason": "end_turn"}
    assert [k for k in kinds(seen) if k.startswith("tool_call")] == []
    assert [t for _, _, t in message_view(updates(seen))][-1] == "And here is the second reply."
    agent.close()


def test_jsonrpc_errors_and_clean_exit(client: Client) -> None:
    agent = client.start(1)
    _, unknown = agent.call("_acp_mid/ping", {})
    assert unknown["error"]["code"] == -32601
    agent.notify("_acp_mid/unknown_notification", {})  # ignored: next line answers the next call
    _, no_mcp = agent.call("session/new", {"cwd": CWD})
    assert no_mcp["error"]["code"] == -32602
    _, relative = agent.call("session/new", {"cwd": "project", "mcpServers": []})
    assert relative["error"]["code"] == -32602
    assert agent.proc.stdin is not None
    agent.proc.stdin.write(b"{not json\n")
    agent.proc.stdin.flush()
    parse_error = agent.next_message()
    assert parse_error["id"] is None and parse_error["error"]["code"] == -32700
    agent.close()


def _raw_line(agent: AgentProcess, data: bytes) -> Any:
    """Write ``data`` as one line and read back the next line the agent writes, as JSON."""
    assert agent.proc.stdin is not None
    agent.proc.stdin.write(data + b"\n")
    agent.proc.stdin.flush()
    message = json.loads(agent._line())
    agent.log.append(message)
    agent.validate(message)
    return message


def test_a_batch_is_answered_with_one_array(client: Client) -> None:
    """JSON-RPC 2.0 section 6, over a real pipe: a batch line is answered by one line, an
    array of its requests' responses; its notifications get none; a batch of
    notifications alone gets nothing; an empty batch one Invalid Request error object."""
    agent = client.start(2)
    agent.schemas = agent.schemas[:1]  # v2/schema.json: the 2.4.0 SDK's schema has no batches
    agent.methods[10] = "session/new"
    batch = [{"jsonrpc": "2.0", "id": 10, "method": "session/new", "params": {"cwd": CWD}},
             {"jsonrpc": "2.0", "method": "_acp_mid/unknown_notification", "params": {}},
             {"jsonrpc": "2.0", "id": 11, "method": "_acp_mid/ping", "params": {}},
             5]
    answer = _raw_line(agent, json.dumps(batch).encode())
    assert isinstance(answer, list), f"a batch answered as separate lines: {answer}"
    by_id = {m["id"]: m for m in answer}
    assert set(by_id) == {10, 11, None} and len(answer) == 3, answer
    assert by_id[10]["result"]["sessionId"]
    assert by_id[11]["error"]["code"] == -32601
    assert by_id[None]["error"]["code"] == -32600

    notes = [{"jsonrpc": "2.0", "method": "_acp_mid/unknown_notification", "params": {}}] * 2
    assert agent.proc.stdin is not None
    agent.proc.stdin.write(json.dumps(notes).encode() + b"\n")
    agent.proc.stdin.flush()
    _, after = agent.call("_acp_mid/ping", {})  # the next line answers this call
    assert after["error"]["code"] == -32601 and agent.log[-1] is after

    empty = _raw_line(agent, b"[]")
    assert isinstance(empty, dict), f"an empty batch answered with an array: {empty}"
    assert empty["id"] is None and empty["error"]["code"] == -32600

    # A prompt in a batch: the turn streams its updates as lines, and the batch's
    # responses come in one array once the turn has answered.
    session_id = by_id[10]["result"]["sessionId"]
    agent.methods.update({12: "session/prompt", 13: "session/new"})
    prompt = [{"jsonrpc": "2.0", "id": 12, "method": "session/prompt",
               "params": {"sessionId": session_id, "prompt": text("Say hello.")}},
              {"jsonrpc": "2.0", "id": 13, "method": "session/new", "params": {"cwd": CWD}}]
    agent.send(prompt)
    seen = agent.read_until(lambda m: "method" not in m)  # permission asked and answered
    lines = [m for m in agent.log if isinstance(m, list)]
    assert len(lines) == 2, "one array for the first batch, one for the prompt's"
    assert sorted(m["id"] for m in lines[-1]) == [12, 13]
    assert "messageId" in next(m for m in lines[-1] if m["id"] == 12)["result"]
    assert "user_message" in [u["sessionUpdate"] for u in updates(seen)]
    agent.close()


def _agent_cli(args: list[str], stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess[bytes]:
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full.get("PYTHONPATH")]))
    return subprocess.run(REFERENCE + args, input=stdin, capture_output=True, env=full,
                          cwd=REPO_ROOT, timeout=30, check=False)


def test_command_line_is_read_by_hand_like_argparse(tmp_path: Path) -> None:
    """--state-dir (both spellings) is where sessions go; --help and a bad argument
    answer the way argparse would (exit 0 / exit 2 with a one-line error)."""
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": 1, "clientCapabilities": {}}},
             {"jsonrpc": "2.0", "id": 1, "method": "session/new",
              "params": {"cwd": CWD, "mcpServers": []}}]
    stdin = b"".join(json.dumps(m).encode() + b"\n" for m in lines)
    for n, args in enumerate([["--state-dir", str(tmp_path / "a")],
                              [f"--state-dir={tmp_path / 'b'}"]]):
        done = _agent_cli(args, stdin, ACP_REFERENCE_STATE_DIR=str(tmp_path / "env"))
        assert done.returncode == 0, done.stderr
        sid = json.loads(done.stdout.splitlines()[1])["result"]["sessionId"]
        assert (tmp_path / "ab"[n] / f"{sid}.json").is_file()
    assert not (tmp_path / "env").exists()
    shown = _agent_cli(["--help"])
    assert shown.returncode == 0 and b"--state-dir DIR" in shown.stdout
    for bad, said in [(["--bogus"], b"unrecognized argument: --bogus"),
                      (["--state-dir"], b"argument --state-dir: expected one argument")]:
        done = _agent_cli(bad)
        assert done.returncode == 2 and done.stdout == b""
        assert done.stderr.splitlines()[-1] == b"acp-reference-agent: error: " + said


def test_log_is_quiet_by_default_and_loads_logging_only_when_due() -> None:
    notification = b'{"jsonrpc":"2.0","method":"_acp_mid/unknown_notification"}\n'
    quiet = _agent_cli([], notification)
    assert quiet.returncode == 0 and quiet.stderr == b""
    told = _agent_cli([], notification, ACP_REFERENCE_LOG_LEVEL="info")
    assert told.stderr.decode().strip() == (
        "ReferenceAgent: INFO ignoring notification _acp_mid/unknown_notification")
    probe = ("import sys; from conformance.reference.agent import ReferenceAgent, main; "
             "main(agent_class=ReferenceAgent); print('logging' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], input=b"", capture_output=True,
                          cwd=REPO_ROOT, timeout=30, check=False,
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert done.stderr.strip() == b"False", done.stderr


def test_the_inbox_reads_lines_as_asked_from_a_descriptor_or_a_thread() -> None:
    """The agent's input (``Inbox``): from a pipe, a line split over two writes is one
    line, a wait with nothing to read says so (``NOTHING``) when its time is up, a last
    line without its newline still counts, and the end is None; a stream with no
    descriptor (in memory) gives the same lines through a reader thread."""
    from conformance.reference.connection import NOTHING, Inbox

    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb", buffering=0) as stream:
        inbox = Inbox(stream)
        assert inbox.get(0) == NOTHING and inbox.get(0.05) == NOTHING
        os.write(write_end, b'{"a":')
        assert inbox.get(0.05) == NOTHING  # half a line is no line
        os.write(write_end, b'1}\n{"b":2}\n{"c"')
        assert [inbox.get(None), inbox.get(0)] == [b'{"a":1}\n', b'{"b":2}\n']
        assert inbox.get(0) == NOTHING
        os.write(write_end, b":3}")
        os.close(write_end)
        assert [inbox.get(None), inbox.get(None), inbox.get(0)] == [b'{"c":3}', None, None]
    import io

    memory = Inbox(io.BytesIO(b"x\ny"))
    assert [memory.get(None), memory.get(5), memory.get(None)] == [b"x\n", b"y", None]


def test_the_agent_serves_without_a_thread_and_names_itself_without_pathlib() -> None:
    """The modules a target process loads are start-up every case pays: the agent reads
    its input with no reader thread (``threading``, ``queue``), a fixture names itself
    (``conformance.naming``) without ``pathlib``, and lines are read and written with
    ``json``'s C codec without ``json``, ``re`` (and the ``enum`` it loads) or ``typing``.
    Over a real pipe, every request is still answered."""
    lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": 1, "clientCapabilities": {}}},
             {"jsonrpc": "2.0", "id": 1, "method": "session/new",
              "params": {"cwd": CWD, "mcpServers": []}}]
    probe = ("import sys; sys.modules['__main__'].__file__ = 'fixtures/agents/quiet_one.py'; "
             "from conformance.reference.agent import ReferenceAgent, main; "
             "main(agent_class=ReferenceAgent); "
             "print(sorted({'threading', 'queue', 'pathlib', 'json', 're', 'enum', 'typing'}"
             " & set(sys.modules)), "
             "file=sys.stderr)")
    # -S: no site-packages, whose .pth files (an editable install's) may load pathlib
    done = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True,
                          cwd=REPO_ROOT, input=b"".join(json.dumps(m).encode() + b"\n"
                                                       for m in lines),
                          timeout=30, check=False, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a.get("id") for a in answers] == [0, 1], done.stdout
    assert answers[0]["result"]["agentInfo"]["name"] == "acp-conformance-fixture-agent-quiet-one"
    assert done.stderr.strip() == b"[]", done.stderr


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


@pytest.mark.parametrize("c_codec", [True, False], ids=["json-c-codec", "json-module"])
@given(value=JSON_VALUES, blank=st.sampled_from(["", " ", "\n", " \t\r\n "]),
       garbage=st.text(max_size=6))
def test_the_agents_codec_reads_and_writes_what_json_does(
        c_codec: bool, value: Any, blank: str, garbage: str) -> None:
    """The agent's lines (``wire.encode``/``decode``, on ``json``'s C codec without
    ``json``, or on ``json`` where that codec is missing) are ``json.dumps``'s compact
    output, ASCII or not, and read as ``json.loads`` reads them; a text that is not one
    strict JSON value raises what ``json.loads`` raises, with its message (the first
    error of a fresh process is ``test_jsonrpc_errors_and_clean_exit``'s)."""
    from conformance.reference import wire

    saved = wire._CODEC
    assert saved is not None  # CPython has _json: the fast road is the one tested
    wire._CODEC = saved if c_codec else None
    try:
        for ascii_only in (True, False):
            text = wire.encode(value, ascii_only=ascii_only)
            assert text == json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
        text = blank + json.dumps(value) + blank
        for bad in (text, text + garbage, garbage, text.replace("1", "NaN", 1)):
            try:
                expected: Any = json.loads(bad, parse_constant=wire._Strict.parse_constant)
            except ValueError as e:
                with pytest.raises(type(e)) as got:
                    wire.decode(bad)
                assert str(got.value) == str(e)
            else:
                assert wire.decode(bad) == expected
    finally:
        wire._CODEC = saved


def test_no_fixture_target_loads_typing_at_run_time() -> None:
    """Every fixture agent and proxy imports ``typing`` for the type checker only (it and
    the ``re`` it loads were a third of a fixture agent's start-up): each module is run
    as a module, not as the program, in one interpreter without site-packages."""
    paths = sorted(str(p) for kind in ("agents", "proxies", "hostile/agents", "harness")
                   for p in (REPO_ROOT / "fixtures" / kind).glob("*.py")
                   # a client's load is the client's; a script with no main guard acts
                   # when imported (exit_at_start, huge_line)
                   if not p.name.endswith("_client.py") and (p.name.startswith("_") or
                       'if __name__ == "__main__":' in p.read_text("utf-8")))
    assert len(paths) > 100, paths
    probe = ("import importlib.util, os, sys\n"  # (runpy would load typing itself)
             "for n, path in enumerate(sys.argv[1:]):\n"
             "    sys.path.insert(0, os.path.dirname(path))\n"
             "    spec = importlib.util.spec_from_file_location(f'fixture{n}', path)\n"
             "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
             "    if 'typing' in sys.modules:\n"
             "        sys.exit('typing: ' + path)\n")
    done = subprocess.run([sys.executable, "-S", "-c", probe, *paths], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=60, check=False,
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert done.returncode == 0, done.stderr[-2000:]


# --------------------------------------------------------------------------
# Reference agent: v2
# --------------------------------------------------------------------------

V2_TURN = [
    "user_message", "state_update:running",
    "agent_thought_chunk", "agent_thought_chunk",
    "agent_message_chunk", "agent_message_chunk", "agent_message_chunk",
    "state_update:requires_action", "session/request_permission", "state_update:running",
    "tool_call_update", "tool_call_update",
    "agent_message_chunk", "agent_message_chunk", "agent_message",
    "state_update:idle",
]


def test_v2_turn_acknowledges_with_user_message_id(client: Client) -> None:
    agent = client.start(2)
    assert agent.log[0]["result"]["info"]["name"] == "acp-conformance-reference-agent"
    assert "session" in agent.log[0]["result"]["capabilities"]
    _, response = agent.call("session/new", {"cwd": CWD})  # v2: mcpServers optional
    session_id = response["result"]["sessionId"]
    seen, ack = run_turn(agent, session_id, text("Say hello."),
                         extra={"messageId": "client-123"})

    assert seen[0] is ack, "the response comes first: it acknowledges acceptance"
    assert kinds(seen[1:]) == V2_TURN
    items = updates(seen)
    echo = items[0]
    assert echo["content"] == text("Say hello.")
    assert ack["result"] == {"messageId": echo["messageId"]} != {"messageId": "client-123"}
    assert items[-1]["stopReason"] == "end_turn"

    view = message_view(items)
    assert [(k, t) for k, _, t in view] == [("user", "Say hello.")] + TURN_TEXTS
    assert len({i for _, i, _ in view}) == 4
    upsert = items[-2]
    assert upsert["messageId"] == items[-4]["messageId"] == items[-3]["messageId"]

    permission = next(m for m in seen if m.get("method") == "session/request_permission")
    params = permission["params"]
    assert params["title"] and params["subject"]["type"] == "tool_call"
    assert params["subject"]["toolCall"]["toolCallId"] == items[9]["toolCallId"]
    assert items[9]["title"] and items[10]["status"] == "completed"
    agent.close()


def test_v2_resume_replays_only_when_asked(client: Client) -> None:
    first = client.start(2)
    session_id = new_session(first)
    live = updates(run_turn(first, session_id, text("First prompt."))[0])
    first.close()

    second = client.start(2)
    for extra in ({}, {"replayFrom": None}):
        before, response = restore(second, session_id, **extra)
        assert before == [] and response["result"] == {}, extra
    before, response = restore(second, session_id, replayFrom={"type": "start"})
    assert response["result"] == {}
    replayed = updates(before)
    assert {u["sessionUpdate"] for u in replayed} == {
        "user_message", "agent_thought", "agent_message", "tool_call_update", "replay_complete"}
    assert replayed[-1] == {"sessionUpdate": "replay_complete"}, "the marker ends the replay"
    replayed = replayed[:-1]
    assert message_view(replayed) == message_view(live), "whole messages, original IDs"
    assert replayed[0]["content"] == text("First prompt.")

    _, bad = restore(second, session_id, replayFrom={"type": "message", "messageId": "x"})
    assert bad["error"]["code"] == -32602
    _, no_load = second.call("session/load", {"sessionId": session_id, "cwd": CWD,
                                              "mcpServers": []})
    assert no_load["error"]["code"] == -32601
    second.close()


# --------------------------------------------------------------------------
# Cancellation
# --------------------------------------------------------------------------


def turn_end(agent: AgentProcess, session_id: str, request_id: int, *,
             accepted: bool = True) -> Callable[[JsonObject], bool]:
    """v1: the prompt response. v2: the idle that follows the prompt's acceptance (its
    response, its echo or running; ``accepted``: already seen); an idle before it is a
    state report."""
    if agent.protocol == 1:
        return lambda m: is_response(m, request_id)
    seen = [accepted]

    def ended(m: JsonObject) -> bool:
        if is_idle(m, session_id):
            return seen[0]
        update = m["params"]["update"] if m.get("method") == "session/update" else {}
        seen[0] = seen[0] or is_response(m, request_id) or update.get(
            "sessionUpdate", "").startswith("user_message") or update.get("state") == "running"
        return False
    return ended


def stop_reason(agent: AgentProcess, last: JsonObject) -> str:
    return str(last["result"]["stopReason"] if agent.protocol == 1
               else last["params"]["update"]["stopReason"])


def assert_quiet_until_next_answer(agent: AgentProcess) -> None:
    """Nothing arrives between the end of the turn and the answer to a new
    request: proves there were no updates after the cancellation ended."""
    _, response = agent.call("session/list", {})
    assert "result" in response, response


@pytest.mark.parametrize("protocol", [1, 2])
def test_cancel_long_prompt_stops_streaming(client: Client, protocol: int) -> None:
    agent = client.start(protocol)
    session_id = new_session(agent)
    request_id = agent.request("session/prompt", {"sessionId": session_id,
                                                  "prompt": text("Give me a long answer.")})
    streamed = agent.read_until(
        lambda m: len([u for u in updates([m]) if u["sessionUpdate"] == "agent_message_chunk"]) > 0
        and m["params"]["update"]["content"]["text"].startswith("Part 3 "))
    agent.notify("session/cancel", {"sessionId": session_id})
    rest = agent.read_until(turn_end(agent, session_id, request_id))
    assert stop_reason(agent, rest[-1]) == "cancelled"
    chunks = [u for u in updates(streamed + rest) if u["sessionUpdate"] == "agent_message_chunk"]
    assert 3 <= len(chunks) < 200
    assert len({u["messageId"] for u in chunks}) == 1
    assert_quiet_until_next_answer(agent)
    agent.close()


@pytest.mark.parametrize("protocol", [1, 2])
def test_cancel_while_permission_pending_abandons_request(client: Client, protocol: int) -> None:
    agent = client.start(protocol)
    session_id = new_session(agent)
    request_id = agent.request("session/prompt", {"sessionId": session_id, "prompt": text("Hi.")})
    seen = agent.read_until(lambda m: m.get("method") == "session/request_permission",
                            permission=None)
    permission_id = seen[-1]["id"]
    agent.notify("session/cancel", {"sessionId": session_id})
    rest = agent.read_until(turn_end(agent, session_id, request_id), permission=None)
    assert stop_reason(agent, rest[-1]) == "cancelled"
    assert {"method": "$/cancel_request", "params": {"requestId": permission_id},
            "jsonrpc": "2.0"} in rest
    assert not [k for k in kinds(rest) if k.startswith("tool_call") or "message" in k]
    agent.answer(permission_id, {"outcome": {"outcome": "cancelled"}})  # late: ignored
    assert_quiet_until_next_answer(agent)
    agent.close()


# --------------------------------------------------------------------------
# Broken fixture agents
# --------------------------------------------------------------------------

MANIFEST = yaml.safe_load((FIXTURE_DIR / "manifest.yaml").read_text(encoding="utf-8"))
FIXTURES = {entry["name"]: entry for entry in MANIFEST["fixtures"]}
OUTCOMES = {"fail", "warn", "info"}


QUIET_WAIT = 0.5  # seconds between a turn's echo and the cancel of the "quiet" phase


@dataclass
class Scenario:
    """What one agent did in the standard scenario: on process A, two turns
    (the second carries a legacy ``messageId``) and a "long" turn cancelled
    after a few chunks; on a fresh process B, (v2) a resume without replay,
    a load/resume with replay, and one more turn."""

    protocol: int
    turns: list[list[JsonObject]] = field(default_factory=list)  # process A, live
    responses: list[JsonObject] = field(default_factory=list)  # prompt responses
    after_cancel: list[JsonObject] = field(default_factory=list)  # turn end .. next answer
    quiet_cancel: list[JsonObject] = field(default_factory=list)  # A: "long" turn, cancelled
    # at its echo, in a session of its own
    same_plain: list[JsonObject] = field(default_factory=list)  # A: resume, no replay asked
    same_replay: list[JsonObject] = field(default_factory=list)  # A (v2): replayFrom start
    same_after: list[JsonObject] = field(default_factory=list)  # A: after the last resume
    plain_resume: list[JsonObject] = field(default_factory=list)  # v2, before the response
    restore_before: list[JsonObject] = field(default_factory=list)  # replay window
    restore_after: list[JsonObject] = field(default_factory=list)  # response .. next answer
    last_turn: list[JsonObject] = field(default_factory=list)  # process B, after replay
    multi_line: int = 0
    batches: list[list[Any]] = field(default_factory=list)
    init: JsonObject = field(default_factory=dict)  # the first initialize result
    flight: list[JsonObject] = field(default_factory=list)  # v2: two prompts in flight
    flight_requests: tuple[int, int] = (0, 0)
    # v2 (catalogue K.4): a keyed prompt, the same text under a second key, then a retry of
    # the first key: the three responses, and what arrived from the retry on
    keyed: list[JsonObject] = field(default_factory=list)
    after_retry: list[JsonObject] = field(default_factory=list)
    # v2: the answer to a prompt with a fresh key, and to the same prompt without one
    key_answers: list[JsonObject] = field(default_factory=list)
    # v2 (catalogue K.3): a resume with replayFrom sent while a "long" prompt streams: the
    # IDs it streamed before, and what came from the request to the resume response
    streaming_ids: set[str] = field(default_factory=set)
    streaming_resume: list[JsonObject] = field(default_factory=list)
    # v2 (catalogue K.8): the answers to session/rewind and session/edit_prompt naming an
    # ID the agent never sent
    rewind_answers: list[JsonObject] = field(default_factory=list)

    @property
    def live(self) -> list[JsonObject]:
        return updates([m for turn in self.turns for m in turn])

    @property
    def replay(self) -> list[JsonObject]:
        return updates(self.restore_before)


def chunk_ids(items: list[JsonObject], update_kind: str) -> list[Any]:
    return [u.get("messageId", "<absent>") for u in items if u["sessionUpdate"] == update_kind]


def echo_id(turn: list[JsonObject]) -> Any:
    return next((u.get("messageId", "<absent>") for u in updates(turn)
                 if u["sessionUpdate"] in ("user_message", "user_message_chunk")), None)


def first_agent_ids_per_turn(items: list[JsonObject]) -> list[Any]:
    """The first agent message ID after each user message."""
    firsts: list[Any] = []
    waiting = False
    for u in items:
        if u["sessionUpdate"].startswith("user_message"):
            waiting = True
        elif u["sessionUpdate"].startswith("agent_message") and waiting:
            firsts.append(u.get("messageId"))
            waiting = False
    return firsts


def run_scenario(argv: list[str], state_dir: Path, protocol: int, *, strict: bool,
                 schemas: dict[int, list[Schema]] | None = None,
                 phases: frozenset[str] = frozenset({"cancel", "quiet", "same", "flight",
                                                     "keys", "refused", "rewind",
                                                     "streaming", "restore"}),
                 ) -> Scenario:
    """Two turns always; then, if in ``phases``, the cancelled "long" turn
    ("cancel"), a "long" turn cancelled at its echo in a second session ("quiet"),
    resumes on the same connection ("same": v1 without replay, v2
    without and with replayFrom), v2 a "long" prompt and a second one sent while it
    runs ("flight"), keyed prompts and a retry ("keys"), a keyed prompt and, when it
    is refused, the same without its key ("refused"), a drafted rewind and prompt edit
    naming an ID never sent ("rewind"), a resume with replayFrom while a
    "long" prompt streams ("streaming"), and the fresh-process replay and last turn
    ("restore")."""
    client = Client(state_dir, schemas, argv=argv, strict=strict)
    sc = Scenario(protocol)
    try:
        a = client.start(protocol)
        session_id = new_session(a)
        for prompt, extra in (("Say hello.", {}), ("Read the notes.", {"messageId": "client-123"})):
            seen, response = run_turn(a, session_id, text(prompt), extra=extra)
            sc.turns.append(seen)
            sc.responses.append(response)
        if "cancel" in phases:
            request_id = a.request("session/prompt", {"sessionId": session_id,
                                                      "prompt": text("Write a long story.")})
            seen = a.read_until(lambda m: any(
                u["sessionUpdate"] == "agent_message_chunk"
                and str(u["content"].get("text", "")).startswith("Part 3 ") for u in updates([m])))
            a.notify("session/cancel", {"sessionId": session_id})
            seen += a.read_until(turn_end(a, session_id, request_id))
            sc.turns.append(seen)
            sc.after_cancel, _ = a.call("session/list", {})
        if "quiet" in phases:  # a cancel sent at the echo, before any agent output
            other = new_session(a)
            request_id = a.request("session/prompt", {"sessionId": other,
                                                      "prompt": text("Write a long story.")})
            seen = a.read_until(lambda m: any(u["sessionUpdate"].startswith("user_message")
                                              for u in updates([m])))
            time.sleep(QUIET_WAIT)  # an agent that streams has started by now
            a.notify("session/cancel", {"sessionId": other})
            seen += a.read_until(turn_end(a, other, request_id))
            sc.quiet_cancel = seen
        if "same" in phases:  # resumes on the connection that holds the session
            resume = {"sessionId": session_id, "cwd": CWD}
            if protocol == 1:
                resume["mcpServers"] = []
            sc.same_plain, _ = a.call("session/resume", resume)
            if protocol == 2:
                sc.same_replay, _ = a.call("session/resume",
                                           {**resume, "replayFrom": {"type": "start"}})
            sc.same_after, _ = a.call("session/list", {})
        if "flight" in phases and protocol == 2:  # a prompt sent while another runs
            first = a.request("session/prompt", {"sessionId": session_id,
                                                 "prompt": text("Write a long story.")})
            seen = a.read_until(lambda m: is_response(m, first))
            second = a.request("session/prompt", {"sessionId": session_id,
                                                  "prompt": text("Say hello again.")})
            idles = [0]

            def both_ended(m: JsonObject) -> bool:
                idles[0] += is_idle(m, session_id)
                return idles[0] == 2

            seen += a.read_until(both_ended)
            sc.flight = seen
            sc.flight_requests = (first, second)
            sc.turns.append(seen)
        if "keys" in phases and protocol == 2:  # idempotencyKey: two submissions, a retry
            keyed = {"sessionId": session_id, "prompt": text(KEYED_TEXT)}
            for key in ("key-one", "key-two"):
                seen, response = run_turn(a, session_id, text(KEYED_TEXT),
                                          extra={"idempotencyKey": key})
                sc.keyed.append(response)
                sc.turns.append(seen)
            before, response = a.call("session/prompt", {**keyed, "idempotencyKey": "key-one"})
            sc.keyed.append(response)
            after, _ = a.call("session/list", {})
            sc.after_retry = before + after
        if "refused" in phases and protocol == 2:  # a fresh key; if refused, no key
            for extra in ({"idempotencyKey": "key-fresh"}, {}):
                seen, answer = a.call("session/prompt", {"sessionId": session_id,
                                                         "prompt": text("Say hi."), **extra})
                sc.key_answers.append(answer)
                if "error" not in answer:
                    sc.turns.append(seen + [answer] + a.read_until(
                        turn_end(a, session_id, answer["id"])))
                    break
        if "rewind" in phases and protocol == 2:  # a drafted rewind to an ID never sent
            for method, params in (("session/rewind", {"toMessageId": "never-sent"}),
                                   ("session/edit_prompt", {"messageId": "never-sent",
                                                            "content": text("An edit.")})):
                _, answer = a.call(method, {"sessionId": session_id, **params})
                sc.rewind_answers.append(answer)
        if "streaming" in phases and protocol == 2:  # a resume while a prompt streams
            request_id = a.request("session/prompt", {"sessionId": session_id,
                                                      "prompt": text("Write a long story.")})
            seen = a.read_until(lambda m: any(u["sessionUpdate"] == "agent_message_chunk"
                                              for u in updates([m])))
            sc.streaming_ids = {u["messageId"] for u in updates(seen)
                                if u["sessionUpdate"].endswith("_chunk")}
            sc.streaming_resume, _ = a.call("session/resume", {
                "sessionId": session_id, "cwd": CWD, "replayFrom": {"type": "start"}})
            # chunks written before the agent read the request are live, the rest history
            early = list(itertools.takewhile(lambda m: any(
                u["sessionUpdate"].endswith("_chunk") and u.get("messageId") in sc.streaming_ids
                for u in updates([m])), sc.streaming_resume))
            sc.turns.append(seen + early + a.read_until(turn_end(a, session_id, request_id)))
        a.close()

        if "restore" in phases:
            b = client.start(protocol)
            if protocol == 2:
                sc.plain_resume, _ = restore(b, session_id)
            replay_extra = {"replayFrom": {"type": "start"}} if protocol == 2 else {}
            sc.restore_before, _ = restore(b, session_id, **replay_extra)
            sc.restore_after, _ = b.call("session/list", {})
            sc.last_turn, _ = run_turn(b, session_id, text("One more."))
            b.close()
    finally:
        for agent in client.started:
            agent.kill()
    sc.multi_line = sum(agent.multi_line for agent in client.started)
    sc.init = client.initialized[0] if client.initialized else {}
    sc.batches = [m for agent in client.started for m in agent.log if isinstance(m, list)]
    return sc


KEYED_TEXT = "A keyed prompt."


def _keyed_ids(sc: Scenario) -> list[Any]:
    """The messageIds of the first keyed prompt, the second key's, and the retry's."""
    return [r.get("result", {}).get("messageId") for r in sc.keyed]


def _retry_echoes(sc: Scenario) -> list[Any]:
    return [u.get("messageId") for u in updates(sc.after_retry)
            if u["sessionUpdate"].startswith("user_message")]


def _live_inside(sc: Scenario) -> bool:
    """A chunk of a message streamed before the resume, after the first replayed update
    (one that is not such a chunk) and before replay_complete."""
    replayed = False
    for u in updates(sc.streaming_resume):
        if u["sessionUpdate"] == "replay_complete":
            return False
        live = u["sessionUpdate"].endswith("_chunk") and u.get("messageId") in sc.streaming_ids
        if live and replayed:
            return True
        replayed = replayed or not live
    return False


def _live_before_replay(sc: Scenario) -> bool:
    """v2_marker_live_before_replay's own live chunk (its text is the fixture's), before
    any replayed update of the resume."""
    for u in updates(sc.streaming_resume):
        if not (u["sessionUpdate"].endswith("_chunk") and u.get("messageId") in sc.streaming_ids):
            return False
        if u["content"].get("text") == "(streamed on as the resume arrived) ":
            return True
    return False


def _new_message_before_replay(sc: Scenario) -> bool:
    """A chunk of a message not streamed before the resume (the turn's next message),
    after the request and before the first replayed message update."""
    for u in updates(sc.streaming_resume):
        kind = u["sessionUpdate"]
        if kind in ("tool_call", "tool_call_update", "state_update"):
            continue  # the turn's own work goes on
        if not kind.endswith("_chunk") or kind == "user_message_chunk":
            return False  # the replay began
        if u.get("messageId") not in sc.streaming_ids:
            return True
    return False


def _same_id_batch(sc: Scenario) -> bool:
    for batch in sc.batches:
        ids = [e["params"]["update"].get("messageId") for e in batch
               if e.get("method") == "session/update"]
        if len(ids) != len(set(ids)):
            return True
    return False


def _gap(sc: Scenario) -> bool:
    ids = chunk_ids(updates(sc.turns[0]), "agent_message_chunk")[:3]
    return bool(ids[0] == ids[2] != "<absent>" and ids[1] == "<absent>")


def _interleaved(sc: Scenario) -> bool:
    ids = chunk_ids(updates(sc.turns[0]), "agent_message_chunk")
    return len(ids) >= 3 and ids[0] == ids[2] != ids[1]


def _agent_chunks(sc: Scenario) -> list[JsonObject]:
    return [u for u in sc.live if u["sessionUpdate"] == "agent_message_chunk"]


def _all_chunks(sc: Scenario) -> list[JsonObject]:
    return [u for u in sc.live if u["sessionUpdate"].endswith("_chunk")]


# The broken behaviour of each fixture, as seen on the wire. Each must hold
# for its fixture and must not hold for the reference agent.
SMOKE: dict[str, Callable[[Scenario], bool]] = {
    "per_turn_counter": lambda sc: echo_id(sc.turns[0]) == echo_id(sc.turns[1]),
    "numeric_id": lambda sc: any(type(u.get("messageId")) is int for u in _agent_chunks(sc)),
    "no_ids": lambda sc: all("messageId" not in u for u in _all_chunks(sc)),
    "null_id": lambda sc: all(u.get("messageId", "") is None for u in _all_chunks(sc)),
    "v2_echo_without_id": lambda sc: echo_id(sc.turns[0]) == "<absent>"
    and echo_id(sc.restore_before) != "<absent>",
    "collision_after_load": lambda sc: echo_id(sc.last_turn)
    in chunk_ids(sc.replay, "user_message" if sc.protocol == 2 else "user_message_chunk"),
    "duplicate_in_replay": lambda sc: len(set(first_agent_ids_per_turn(sc.replay)[:2])) == 1
    and len(set(first_agent_ids_per_turn(sc.live)[:2])) == 2,
    "cross_kind_reuse": lambda sc: chunk_ids(updates(sc.turns[0]), "agent_thought_chunk")[0]
    == chunk_ids(updates(sc.turns[0]), "agent_message_chunk")[0],
    "id_per_chunk": lambda sc: len(set(chunk_ids(updates(sc.turns[0]), "agent_message_chunk")[:8]))
    == 8,
    "id_on_tool_call": lambda sc: any("messageId" in u for u in sc.live
                                      if u["sessionUpdate"].startswith("tool_call")),
    "adopts_client_id": lambda sc: echo_id(sc.turns[1]) == "client-123",
    "adopts_client_id_in_response": lambda sc: echo_id(sc.turns[1]) != "client-123" and (
        sc.responses[1]["result"].get("userMessageId") == "client-123"
        or sc.responses[1]["result"].get("_meta", {}).get("userMessageId") == "client-123"),
    "late_replay": lambda sc: not sc.replay and bool(updates(sc.restore_after)),
    "update_after_cancel": lambda sc: "agent_message_chunk" in kinds(sc.after_cancel),
    "id_gap": _gap,
    "interleave": _interleaved,
    "echo_without_id": lambda sc: echo_id(sc.turns[0]) == "<absent>"
    and "<absent>" not in chunk_ids(sc.live, "agent_message_chunk"),
    "ids_on_user_only": lambda sc: echo_id(sc.turns[0]) != "<absent>"
    and set(chunk_ids(sc.live, "agent_message_chunk")) == {"<absent>"},
    "waits_for_cancel": lambda sc: bool(sc.quiet_cancel) and not any(
        u["sessionUpdate"].startswith(("agent_", "tool_call")) for u in updates(sc.quiet_cancel)),
    "v1_resume_replays": lambda sc: bool(updates(sc.same_plain)),
    "v2_memory_late_replay": lambda sc: not updates(sc.same_replay)
    and bool(updates(sc.same_after)),
    "v2_memory_replay_unrequested": lambda sc: bool(updates(sc.same_plain)),
    "v2_memory_replay_without_id": lambda sc: bool(updates(sc.same_replay)) and all(
        "messageId" not in u for u in updates(sc.same_replay)
        if u["sessionUpdate"] == "agent_message"),
    "v2_no_echo": lambda sc: all(echo_id(turn) is None for turn in sc.turns)
    and "messageId" in sc.responses[0]["result"],
    "v2_bad_upsert_content": lambda sc: any(isinstance(u.get("content"), dict)
                                            for u in sc.live + sc.replay
                                            if u["sessionUpdate"] == "agent_message"),
    "v2_batch_same_id": _same_id_batch,
    "legacy_user_message_id": lambda sc: sc.responses[0]["result"].get("userMessageId")
    == echo_id(sc.turns[0]),
    "near_miss_key": lambda sc: all("message_id" in u and "messageId" not in u
                                    for u in _all_chunks(sc)),
    "v2_response_without_message_id": lambda sc: sc.responses[0]["result"] == {},
    "v2_replay_unrequested": lambda sc: bool(updates(sc.plain_resume)),
    "pretty_printed": lambda sc: sc.multi_line > 0,
    "empty_id": lambda sc: "" in chunk_ids(sc.live, "agent_message_chunk"),
    "long_id": lambda sc: any(len(str(u.get("messageId"))) > 1024 for u in _agent_chunks(sc)),
    "mixed_presence": lambda sc: chunk_ids(updates(sc.turns[0]), "agent_message_chunk")[-2:]
    == ["<absent>"] * 2 and "<absent>" not in chunk_ids(updates(sc.turns[0]),
                                                         "agent_message_chunk")[:3],
    "swapped_replay_ids": lambda sc: [i for k, i, _ in message_view(sc.replay) if k == "agent"][:2]
    == [i for k, i, _ in message_view(sc.live) if k == "agent"][1::-1],
    "unstable_chunk_ids": lambda sc: len(set(chunk_ids(updates(sc.turns[0]),
                                                       "agent_thought_chunk"))) == 2
    and next(t for k, _, t in message_view(sc.replay) if k == "thought")
    == "The user wants two separate replies.",
    "v2_replay_without_id": lambda sc: bool(sc.replay) and all(
        "messageId" not in u for u in sc.replay if u["sessionUpdate"] == "agent_message"),
    "v2_echo_reuses_agent_id": lambda sc: echo_id(sc.turns[1])
    == [i for k, i, _ in message_view(updates(sc.turns[0])) if k == "agent"][-1],
    "v2_echo_rewrites_prompt": lambda sc: next(u for u in updates(sc.turns[0])
                                               if u["sessionUpdate"] == "user_message")["content"]
    == text("SAY HELLO."),
    "v2_double_echo": lambda sc: len(set(chunk_ids(updates(sc.turns[0]), "user_message"))) == 2,
    "replay_regenerates_ids": lambda sc: [(k, t) for k, _, t in message_view(sc.replay)]
    == [(k, t) for k, _, t in message_view(sc.live)]
    and not {i for k, i, _ in message_view(sc.replay) if k != "user" or sc.protocol == 1}
    & {i for _, i, _ in message_view(sc.live)},
    "hash_derived_ids": lambda sc: echo_id(sc.turns[0])
    == "msg_" + hashlib.sha256(b"Say hello.").hexdigest()[:32],
    "v2_replay_fresh_user_ids": lambda sc: bool(_replayed_ids(sc, "user")) and not (
        _replayed_ids(sc, "user") & _live_ids(sc, "user"))
    and _replayed_ids(sc, "agent") <= _live_ids(sc, "agent"),
    "v2_chunk_replay_without_primer": lambda sc: bool(sc.replay)
    and sc.replay[0]["sessionUpdate"] == "user_message_chunk",
    "v2_chunk_replay": lambda sc: len(sc.replay) > 1
    and sc.replay[0]["sessionUpdate"] == "user_message" and sc.replay[0]["content"] == []
    and sc.replay[1]["sessionUpdate"] == "user_message_chunk"
    and sc.replay[1]["messageId"] == sc.replay[0]["messageId"],
    "v2_session_messages": lambda sc: any(u["sessionUpdate"] == "session_message_chunk"
                                          and isinstance(u.get("messageId"), str)
                                          for u in sc.live),
    "v2_no_session_capability": lambda sc: "session" not in sc.init.get("capabilities", {}),
    "v2_idle_before_accepting": lambda sc: _idle_before_response(sc.turns[0]),
    "v2_queued_prompts": lambda sc: _second_accepted_before_first_idle(sc)
    and len({echo_id([m]) for m in sc.flight if echo_id([m]) is not None}) == 2,
    "v2_queued_prompt_wrong_echo": lambda sc: _second_accepted_before_first_idle(sc)
    and len({echo_id([m]) for m in sc.flight if echo_id([m]) is not None}) == 1,
    "restate_new_id": lambda sc: _restated(sc) and _agent_texts(sc)[0] == _agent_texts(sc)[1],
    "restate_after_idless": lambda sc: chunk_ids(updates(sc.turns[0]), "agent_message_chunk")[:4]
    == ["<absent>"] * 3 + [chunk_ids(updates(sc.turns[0]), "agent_message_chunk")[3]] != [
        "<absent>"] * 4,
    "restate_same_id_chunk": lambda sc: _doubled(_agent_texts(sc)[0]),
    "v2_restate_upsert": lambda sc: chunk_ids(updates(sc.turns[0]), "agent_message_chunk")[0]
    in chunk_ids(updates(sc.turns[0]), "agent_message"),
    "v2_marker_missing": lambda sc: bool(sc.replay) and _markers(sc.replay) == 0,
    "v2_marker_duplicate": lambda sc: _markers(sc.replay) == 2,
    "v2_marker_unrequested": lambda sc: _markers(updates(sc.plain_resume)) == 1,
    "v2_marker_child": lambda sc: len({m["params"]["sessionId"] for m in sc.restore_before
                                       if m.get("method") == "session/update"}) == 2,
    "v2_marker_after_response": lambda sc: _markers(sc.replay) == 0
    and _markers(updates(sc.restore_after)) == 1,
    "v2_key_ignored": lambda sc: len(sc.keyed) == 3 and _keyed_ids(sc)[2] != _keyed_ids(sc)[0]
    and _keyed_ids(sc)[2] in _retry_echoes(sc),
    "v2_key_new_id": lambda sc: len(sc.keyed) == 3 and _keyed_ids(sc)[2] != _keyed_ids(sc)[0]
    and not _retry_echoes(sc),
    "v2_key_reinserts": lambda sc: len(sc.keyed) == 3 and _keyed_ids(sc)[2] == _keyed_ids(sc)[0]
    and bool(_retry_echoes(sc)),
    "v2_key_replays_twice": lambda sc: [t for k, _, t in message_view(sc.replay)
                                        if k == "user"].count(KEYED_TEXT) == 3,
    "v2_key_by_text": lambda sc: len(sc.keyed) == 3 and _keyed_ids(sc)[1] == _keyed_ids(sc)[0],
    "v2_key_rejected": lambda sc: [a.get("error", {}).get("code") for a in sc.key_answers]
    == [-32602, None],
    "v2_rewind_accepts_unknown": lambda sc: [("result" in a) for a in sc.rewind_answers]
    == [True, True],
    "v2_rewind_wrong_code": lambda sc: [a.get("error", {}).get("code")
                                        for a in sc.rewind_answers] == [-32602, -32602],
    "v2_marker_live_inside": _live_inside,
    "v2_marker_live_before_replay": _live_before_replay,
    "v2_new_message_before_replay": _new_message_before_replay,
    "v2_pause_before_tool": _new_message_before_replay,
    # the busy racers (issue 39): what each does that the reference agent does not
    "busy_load_while_streaming": lambda sc: _never_echoes_v1(sc),
    "busy_load_replay_duplicate": lambda sc: _never_echoes_v1(sc),
    "v2_busy_resume_without_replay": lambda sc: _streams_to_its_end_first(sc),  # quiet phase
    "v2_busy_queued_echo": lambda sc: any(u["sessionUpdate"] == "user_message_chunk"
                                          for u in updates(sc.flight)),
    "v2_empty_replay_reuses_ids": lambda sc: not [u for u in sc.replay if "messageId" in u]
    and echo_id(sc.last_turn) == echo_id(sc.turns[0]) != "<absent>",
    "replay_drops_ids": lambda sc: sc.protocol == 1 and bool(sc.replay) and all(
        "messageId" not in u for u in sc.replay if u["sessionUpdate"] == "agent_thought_chunk")
    and all("messageId" in u for u in sc.live if u["sessionUpdate"] == "agent_thought_chunk"),
}


def _never_echoes_v1(sc: Scenario) -> bool:
    """v1, and no turn echoes its prompt (allowed in v1; the reference agent echoes)."""
    return sc.protocol == 1 and all(echo_id(turn) is None for turn in sc.turns)


def _streams_to_its_end_first(sc: Scenario) -> bool:
    """The "long" reply streams to its last chunk though the suite cancels it: the agent
    reads no input while it streams (the reference agent reads between chunks and stops)."""
    return sc.protocol == 2 and any(
        u["sessionUpdate"] == "agent_message_chunk"
        and (u.get("content") or {}).get("text") == "and that is the end."
        for u in updates(sc.quiet_cancel))


def _idle_before_response(turn: list[JsonObject]) -> bool:
    """An idle state_update arrives before the prompt response."""
    for m in turn:
        if "result" in m or "error" in m:
            return False
        if m.get("method") == "session/update" and m["params"]["update"].get("state") == "idle":
            return True
    return False


def _agent_texts(sc: Scenario) -> list[str]:
    """The texts of the first turn's agent messages (chunks appended, upserts replacing)."""
    return [t for k, _, t in message_view(updates(sc.turns[0])) if k == "agent"]


def _restated(sc: Scenario) -> bool:
    texts = _agent_texts(sc)
    return len(texts) != len(set(texts))


def _doubled(value: str) -> bool:
    half = len(value) // 2
    return len(value) > 1 and value[:half] == value[half:]


def _markers(items: list[JsonObject]) -> int:
    return sum(1 for u in items if u["sessionUpdate"] == "replay_complete")


def _second_accepted_before_first_idle(sc: Scenario) -> bool:
    """The second prompt in flight is answered before the first one's turn ends."""
    second = sc.flight_requests[1]
    for m in sc.flight:
        if is_response(m, second):
            return True
        if is_idle(m, str(m.get("params", {}).get("sessionId", ""))):
            return False
    return False


def _replayed_ids(sc: Scenario, kind: str) -> set[str]:
    return {i for k, i, _ in message_view(sc.replay) if k == kind}


def _live_ids(sc: Scenario, kind: str) -> set[str]:
    return {i for k, i, _ in message_view(sc.live) if k == kind}


# Fixtures whose fault needs more than the first two turns.
NEEDS = {
    "cancel": {"update_after_cancel"},
    "quiet": {"waits_for_cancel", "v2_busy_resume_without_replay"},
    "same": {"v1_resume_replays", "v2_memory_late_replay", "v2_memory_replay_unrequested",
             "v2_memory_replay_without_id"},
    "flight": {"v2_queued_prompts", "v2_queued_prompt_wrong_echo", "v2_busy_queued_echo"},
    "restore": {"collision_after_load", "duplicate_in_replay", "v2_echo_without_id",
                "late_replay", "v2_replay_unrequested", "replay_regenerates_ids",
                "swapped_replay_ids", "unstable_chunk_ids", "v2_replay_without_id",
                "v2_replay_fresh_user_ids", "v2_chunk_replay_without_primer", "v2_chunk_replay",
                "v2_empty_replay_reuses_ids",
                "v2_marker_missing", "v2_marker_duplicate", "v2_marker_unrequested",
                "v2_marker_child", "v2_marker_after_response", "v2_key_replays_twice",
                "replay_drops_ids"},
    "keys": {"v2_key_ignored", "v2_key_new_id", "v2_key_reinserts", "v2_key_replays_twice",
             "v2_key_by_text"},
    "refused": {"v2_key_rejected"},
    "rewind": {"v2_rewind_accepts_unknown", "v2_rewind_wrong_code"},
    "streaming": {"v2_marker_live_inside", "v2_marker_live_before_replay",
                  "v2_new_message_before_replay", "v2_pause_before_tool"},
}


def test_manifest_lists_every_fixture_once_with_valid_expectations() -> None:
    scripts = {p.stem for p in FIXTURE_DIR.glob("*.py")}
    assert len(FIXTURES) == len(MANIFEST["fixtures"]), "duplicate names"
    assert set(FIXTURES) <= scripts, "every manifest entry has its script"
    assert set(FIXTURES) == set(SMOKE), "every fixture has a smoke check here"
    readme = (FIXTURE_DIR / "README.md").read_text(encoding="utf-8")
    in_table = {line.split("`")[1] for line in readme.splitlines() if line.startswith("| `")}
    assert in_table == set(FIXTURES), "the README table lists the manifest's fixtures"
    profiles = set(MANIFEST["profiles"])
    for name, entry in FIXTURES.items():
        assert entry["breaks"] and set(entry["protocols"]) <= {1, 2}, name
        assert set(entry["expect"]) == {f"v{p}" for p in entry["protocols"]}, name
        for version, graded in entry["expect"].items():
            levels = graded["profiles"].values() if "profiles" in graded else [graded]
            if "profiles" in graded:
                assert version == "v2" and set(graded["profiles"]) == profiles, name
            for level in levels:
                assert set(level) <= OUTCOMES, name
                assert all(i.startswith("MID-") for ids in level.values() for i in ids), name
        for version, ids in entry.get("may_also", {}).items():
            assert version in entry["expect"] and all(i.startswith("MID-") for i in ids), name
        docstring = (FIXTURE_DIR / f"{name}.py").read_text(encoding="utf-8").split('"""')[1]
        assert "MID-" in docstring, f"{name}: the docstring names the requirement it breaks"


FIXTURE_RUNS = [(name, p) for name, entry in FIXTURES.items() for p in entry["protocols"]]


@pytest.mark.parametrize(("name", "protocol"), FIXTURE_RUNS,
                         ids=[f"{n}-v{p}" for n, p in FIXTURE_RUNS])
def test_fixture_shows_its_fault_on_the_wire(tmp_path: Path, name: str, protocol: int) -> None:
    argv = [sys.executable, str(FIXTURE_DIR / f"{name}.py")]
    phases = frozenset(p for p in ("cancel", "quiet", "same", "flight", "keys", "refused",
                                   "rewind", "streaming", "restore") if name in NEEDS[p])
    sc = run_scenario(argv, tmp_path / "state", protocol, strict=False, phases=phases)
    assert SMOKE[name](sc), f"{name} did not show its fault in v{protocol}"


@pytest.mark.parametrize("protocol", [1, 2])
def test_reference_agent_shows_no_fixture_fault(
    tmp_path: Path, protocol: int, schemas: dict[int, list[Schema]] | None
) -> None:
    """The same scenario, strict and schema-checked: none of the faults."""
    sc = run_scenario(REFERENCE, tmp_path / "state", protocol, strict=True, schemas=schemas)
    shown = [name for name, entry in FIXTURES.items()
             if protocol in entry["protocols"] and SMOKE[name](sc)]
    assert shown == []
    assert message_view(sc.replay) == message_view(sc.live), "replay keeps the original IDs"
