"""A one-shot ACP v2 client on the official Python SDK's v2 API (agent-client-protocol
1.0.0rc3, ``acp.experimental.v2``).

    python py_v2_client.py --prompt TEXT [--resume SESSION] AGENT_COMMAND

It spawns the agent, initialises with protocol version 2 (it stops if the agent answers
another version or does not advertise ``capabilities.session``, as a v2-only client
must), opens a session (or, with ``--resume``, resumes SESSION with ``replayFrom:
{"type": "start"}``), sends one prompt and, when the session reports ``state_update``
idle after the prompt was accepted, prints the conversation it holds: one line per
message in the order each message first appeared, ``user: TEXT``, ``agent: TEXT`` or
``thought: TEXT``. Messages are kept by their kind and ``messageId`` as the v2 draft
says: a chunk appends its content to its message, a whole-message upsert
(``user_message``, ``agent_message``, ``agent_thought``) replaces the message's content
(``content: []`` or ``null`` clears it; an upsert without ``content`` keeps it). Permission
requests are allowed once; other agent requests get the SDK's "method not found".

Every update reaches it already parsed by the SDK into its v2 schema types (the
``session_update`` handler of the SDK's ``Client`` protocol); what the SDK rejects or
drops never reaches it. Runs in the SDK's own virtualenv (the interop matrix installs
it); the suite reads its output through ``interop/profiles/py-v2-client.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from typing import Any

from acp.experimental.v2 import PROTOCOL_VERSION, connect_to_agent, schema
from acp.transports import spawn_stdio_transport

CHUNKS = {"user_message_chunk": "user", "agent_message_chunk": "agent",
          "agent_thought_chunk": "thought"}
UPSERTS = {"user_message": "user", "agent_message": "agent", "agent_thought": "thought"}


def text_of(block: Any) -> str:
    return str(getattr(block, "text", "") or "")


class ShowingClient:
    """The SDK's v2 ``Client`` protocol: only the handlers this client supports."""

    def __init__(self) -> None:
        self.messages: dict[tuple[str, str], list[str]] = {}  # in first-seen order
        self.accepted = False  # the prompt is sent: the next idle state ends the turn
        self.done = asyncio.Event()

    async def request_permission(self, session_id: str, title: str,
                                 options: list[schema.PermissionOption],
                                 **kwargs: Any) -> schema.RequestPermissionResponse:
        allow = [o for o in options if str(o.kind).startswith("allow")] or options
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcomeVariant(option_id=allow[0].option_id))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        kind = getattr(update, "session_update", None)
        if kind in CHUNKS:
            key = (CHUNKS[kind], update.message_id)
            self.messages.setdefault(key, []).append(text_of(update.content))
        elif kind in UPSERTS:
            key = (UPSERTS[kind], update.message_id)
            parts = self.messages.setdefault(key, [])
            if "content" in update.model_fields_set:  # null clears, like []
                parts[:] = [text_of(b) for b in update.content or []]
        elif kind == "state_update" and getattr(update, "state", None) == "idle" \
                and self.accepted:
            self.done.set()


async def run(prompt: str, resume: str | None, agent: list[str]) -> int:
    client = ShowingClient()
    async with spawn_stdio_transport(agent[0], *agent[1:], env=dict(os.environ),
                                     stderr=None) as (reader, writer, _process):
        conn = connect_to_agent(client, writer, reader)
        init = await conn.initialize(protocol_version=PROTOCOL_VERSION,
                                     info=schema.Implementation(name="py-v2-client",
                                                                version="0.1.0"))
        if init.protocol_version != PROTOCOL_VERSION:
            print(f"the agent answered protocol version {init.protocol_version}; this client "
                  f"speaks only {PROTOCOL_VERSION}", file=sys.stderr)
            return 2
        if init.capabilities is None or init.capabilities.session is None:
            print("the agent does not advertise capabilities.session", file=sys.stderr)
            return 2
        if resume:
            await conn.resume_session(session_id=resume, cwd=os.getcwd(),
                                      replay_from=schema.ReplayFromStartVariant())
            session_id = resume
        else:
            session_id = (await conn.new_session(cwd=os.getcwd())).session_id
        client.accepted = True  # from now on an idle state ends the turn
        await conn.prompt(session_id=session_id, prompt=[schema.TextContentBlock(text=prompt)])
        await client.done.wait()
        for (kind, _message_id), parts in client.messages.items():
            print(f"{kind}: {''.join(parts)}".replace("\n", " "), flush=True)
        await conn.close()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt", required=True)
    p.add_argument("--resume", metavar="SESSION")
    p.add_argument("agent", help="the agent command (one string, split like a shell would)")
    ns = p.parse_args()
    return asyncio.run(run(ns.prompt, ns.resume, shlex.split(ns.agent)))


if __name__ == "__main__":
    sys.exit(main())
