"""A one-shot ACP client written on the official Python SDK (agent-client-protocol 0.12.1).

    python sdk_client.py --prompt TEXT AGENT_COMMAND

It spawns the agent with ``acp.spawn_agent_process``, initialises (v1; it stops
if the agent answers another version, as a v1-only client must), opens a
session, sends one prompt, feeds every ``session/update`` to the SDK's
``acp.contrib.SessionAccumulator`` and, when the turn ends, prints what the
accumulator holds the way a UI built on it shows it: one line per message,
``thought: TEXT`` or ``agent: TEXT``. The snapshot keeps one flat list of
chunks per kind and does not group them by message, so the display groups
them the only way the accumulator allows: in arrival order (taken from its
``subscribe`` callback), a new message whenever the kind changes or a tool
call comes in between (its lines are not printed). Permission
requests are allowed once; other agent requests get "method not found".

Runs in the SDK's own virtualenv (the interop matrix installs it); the suite
reads its output through the profile ``interop/profiles/python-sdk-client.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from typing import Any

from acp import PROTOCOL_VERSION, Client, RequestError, spawn_agent_process, text_block
from acp.contrib import SessionAccumulator
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    Implementation,
    PermissionOption,
    RequestPermissionResponse,
    SessionNotification,
    ToolCallUpdate,
)


class AccumulatingClient(Client):
    def __init__(self) -> None:
        self.accumulator = SessionAccumulator()

    async def request_permission(self, session_id: str, tool_call: ToolCallUpdate,
                                 options: list[PermissionOption], **kwargs: Any
                                 ) -> RequestPermissionResponse:
        allow = [o for o in options if str(o.kind).startswith("allow")] or options
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=allow[0].option_id))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.accumulator.apply(SessionNotification(session_id=session_id, update=update))

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


def text_of(chunks: Any) -> str:
    return "".join(getattr(c.content, "text", "") for c in chunks).replace("\n", " ")


async def run(prompt: str, agent: list[str]) -> int:
    client = AccumulatingClient()
    order: list[str] = []  # the kind of each chunk, in arrival order; "tool" separates
    kinds = {"agent_message_chunk": "agent", "agent_thought_chunk": "thought",
             "tool_call": "tool", "tool_call_update": "tool"}

    def arrived(_snapshot: Any, notification: SessionNotification) -> None:
        kind = kinds.get(getattr(notification.update, "session_update", ""))
        if kind:
            order.append(kind)

    client.accumulator.subscribe(arrived)
    async with spawn_agent_process(client, agent[0], *agent[1:], env=dict(os.environ)) \
            as (conn, _process):
        init = await conn.initialize(protocol_version=PROTOCOL_VERSION,
                                     client_capabilities=ClientCapabilities(),
                                     client_info=Implementation(name="sdk-accumulator-client",
                                                                version="0.1.0"))
        if init.protocol_version != PROTOCOL_VERSION:
            print(f"the agent answered protocol version {init.protocol_version}; this client "
                  f"speaks only {PROTOCOL_VERSION}", file=sys.stderr)
            return 2
        session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
        await conn.prompt(session_id=session.session_id, prompt=[text_block(prompt)])
        if not any(k != "tool" for k in order):
            return 0
        snap = client.accumulator.snapshot()
        chunks = {"agent": iter(snap.agent_messages), "thought": iter(snap.agent_thoughts)}
        shown: list[tuple[str, str]] = []
        for kind in order:
            if kind == "tool":
                shown.append((kind, ""))
                continue
            text = text_of([next(chunks[kind])])
            if shown and shown[-1][0] == kind:
                shown[-1] = (kind, shown[-1][1] + text)
            else:
                shown.append((kind, text))
        for kind, text in shown:
            if kind != "tool":
                print(f"{kind}: {text}", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt", required=True)
    p.add_argument("agent", help="the agent command (one string, split like a shell would)")
    ns = p.parse_args()
    return asyncio.run(run(ns.prompt, shlex.split(ns.agent)))


if __name__ == "__main__":
    sys.exit(main())
