"""A small ACP v2 agent on the official Python SDK's v2 API (agent-client-protocol
1.0.0rc3, ``acp.experimental.v2``): no model, it answers every prompt itself.

    python py_v2_agent.py

It advertises ``capabilities.session`` (the baseline session methods), answers
``session/prompt`` at once with the ``messageId`` it gives the user message, and
plays each accepted prompt as one turn, in the order received (a prompt sent while
another runs waits for its turn): the user message as one ``user_message`` upsert
under that ID, ``state_update`` running, a thought in chunks, an agent message in
chunks, a tool call, a second agent message in chunks, and ``state_update`` idle. A
prompt with the word "long" gets one long message instead, slowly, which
``session/cancel`` stops. Sessions are kept in a folder (``$PY_V2_AGENT_SESSIONS``,
else ``./.py-v2-agent``), so ``session/resume`` with ``replayFrom: {"type":
"start"}`` replays a session's messages, each as one whole-message upsert under its
own ID, on the same process or a new one. Every message ID is a fresh UUID.

Every object it sends is built from the SDK's own v2 schema types.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from acp.experimental.v2 import PROTOCOL_VERSION, run_agent, schema

NAME, VERSION = "py-v2-agent", "0.1.0"
LONG = re.compile(r"\blong\b", re.IGNORECASE)
UPSERTS = {"user": schema.UserMessageUpdate, "agent": schema.AgentMessageUpdate,
           "thought": schema.AgentThoughtUpdate}
CHUNKS = {"agent": schema.AgentMessageChunk, "thought": schema.AgentThoughtChunk}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def text(t: str) -> schema.TextContentBlock:
    return schema.TextContentBlock(text=t)


class Session:
    def __init__(self, session_id: str, cwd: str, history: list[dict[str, Any]]) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.history = history  # [{"kind", "messageId", "content": [block, ...]}]
        self.queue: asyncio.Queue[tuple[str, list[dict[str, Any]]]] = asyncio.Queue()
        self.cancelled = False
        self.worker: asyncio.Task[None] | None = None


class EchoAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.sessions: dict[str, Session] = {}
        self.folder = Path(os.environ.get("PY_V2_AGENT_SESSIONS") or ".py-v2-agent")

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    # -- storage ---------------------------------------------------------------

    def save(self, s: Session) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {"sessionId": s.session_id, "cwd": s.cwd, "history": s.history}
        tmp = self.folder / f".{s.session_id}.tmp"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, self.folder / f"{s.session_id}.json")

    def stored(self, session_id: str) -> Session | None:
        path = self.folder / f"{session_id}.json"
        if "/" in session_id or not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        return Session(data["sessionId"], data["cwd"], data["history"])

    def session(self, session_id: str) -> Session:
        s = self.sessions.get(session_id)
        if s is None:
            raise_not_found(session_id)
        return s  # type: ignore[return-value]

    # -- the Agent protocol ------------------------------------------------------

    async def initialize(self, protocol_version: int, info: schema.Implementation,
                         capabilities: schema.ClientCapabilities | None = None,
                         **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            info=schema.Implementation(name=NAME, version=VERSION),
            capabilities=schema.AgentCapabilities(session=schema.SessionCapabilities()))

    async def new_session(self, cwd: str, additional_directories: list[str] | None = None,
                          mcp_servers: list[Any] | None = None,
                          **kwargs: Any) -> schema.NewSessionResponse:
        s = Session(new_id("sess"), cwd, [])
        self.sessions[s.session_id] = s
        self.save(s)
        return schema.NewSessionResponse(session_id=s.session_id)

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None,
                            **kwargs: Any) -> schema.ListSessionsResponse:
        found = []
        for path in sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []:
            s = self.stored(path.stem)
            if s is not None and (cwd is None or s.cwd == cwd):
                found.append(schema.SessionInfo(session_id=s.session_id, cwd=s.cwd))
        return schema.ListSessionsResponse(sessions=found)

    async def resume_session(self, session_id: str, cwd: str,
                             additional_directories: list[str] | None = None,
                             mcp_servers: list[Any] | None = None,
                             replay_from: Any = None,
                             **kwargs: Any) -> schema.ResumeSessionResponse:
        s = self.sessions.get(session_id) or self.stored(session_id)
        if s is None:
            raise_not_found(session_id)
        assert s is not None
        self.sessions[session_id] = s
        if replay_from is not None:
            for entry in list(s.history):
                upsert = UPSERTS[entry["kind"]](message_id=entry["messageId"],
                                                content=[text(b["text"]) for b in entry["content"]])
                await self.conn.session_update(session_id=session_id, update=upsert)
        await self.conn.session_update(session_id=session_id,
                                       update=schema.IdleSessionStateUpdate(stop_reason="end_turn"))
        return schema.ResumeSessionResponse()

    async def close_session(self, session_id: str, **kwargs: Any) -> schema.CloseSessionResponse:
        s = self.session(session_id)
        s.cancelled = True
        if s.worker is not None:
            s.worker.cancel()
        del self.sessions[session_id]
        return schema.CloseSessionResponse()

    async def prompt(self, session_id: str, prompt: list[Any],
                     **kwargs: Any) -> schema.PromptResponse:
        s = self.session(session_id)
        message_id = new_id("user")
        blocks = [{"type": "text", "text": getattr(b, "text", "")} for b in prompt]
        s.queue.put_nowait((message_id, blocks))
        if s.worker is None or s.worker.done():
            s.worker = asyncio.create_task(self.work(s))
        return schema.PromptResponse(message_id=message_id)

    async def cancel_session(self, session_id: str, **kwargs: Any) -> None:
        s = self.sessions.get(session_id)
        if s is not None:
            s.cancelled = True

    # -- turns -------------------------------------------------------------------

    async def work(self, s: Session) -> None:
        while not s.queue.empty():
            message_id, blocks = s.queue.get_nowait()
            s.cancelled = False
            await self.turn(s, message_id, blocks)

    async def send(self, s: Session, update: Any) -> None:
        await self.conn.session_update(session_id=s.session_id, update=update)

    async def message(self, s: Session, kind: str, parts: list[str], delay: float = 0.0) -> None:
        message_id = new_id(kind)
        sent = []
        for part in parts:
            if s.cancelled:
                break
            await self.send(s, CHUNKS[kind](message_id=message_id, content=text(part)))
            sent.append(part)
            await asyncio.sleep(delay)
        if sent:
            s.history.append({"kind": kind, "messageId": message_id,
                              "content": [{"type": "text", "text": "".join(sent)}]})

    async def turn(self, s: Session, message_id: str, blocks: list[dict[str, Any]]) -> None:
        s.history.append({"kind": "user", "messageId": message_id, "content": blocks})
        await self.send(s, schema.UserMessageUpdate(
            message_id=message_id, content=[text(b["text"]) for b in blocks]))
        await self.send(s, schema.RunningSessionStateUpdate())
        said = " ".join(b["text"] for b in blocks)
        await self.message(s, "thought", ["Reading the prompt. ", "It is short."])
        if LONG.search(said):
            await self.message(s, "agent", [f"Sentence {n} of a long answer. " for n in range(1, 201)],
                               delay=0.01)
        else:
            await self.message(s, "agent", ["You said: ", said])
            if not s.cancelled:
                tool = new_id("call")
                await self.send(s, schema.SessionToolCallUpdate(
                    tool_call_id=tool, title="Look at the prompt", kind="read",
                    status="in_progress"))
                await self.send(s, schema.SessionToolCallUpdate(tool_call_id=tool,
                                                                status="completed"))
            await self.message(s, "agent", ["That is all. ", "Goodbye."])
        self.save(s)
        await self.send(s, schema.IdleSessionStateUpdate(
            stop_reason="cancelled" if s.cancelled else "end_turn"))


def raise_not_found(session_id: str) -> None:
    from acp import RequestError

    raise RequestError(-32002, "Session not found", {"sessionId": session_id})


def main() -> None:
    asyncio.run(run_agent(EchoAgent()))


if __name__ == "__main__":
    main()
