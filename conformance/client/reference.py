"""A conformant ACP client, written as a model to read: the client suite's reference target.

:class:`ReferenceClient` is the client without I/O. It negotiates v1 or v2,
creates a session, sends prompts without any message ID of its own (MID-C-01),
answers every agent request (permission: the first allow option; anything
else: -32601), and keeps the conversation the way the catalogue says
(Appendix G):

* chunks are grouped by ``(kind, messageId)``; IDs are opaque strings, compared
  exactly (no trimming, case folding, normalisation or parsing, MID-C-02), and
  ``""`` is a real ID (MID-C-06);
* v1 chunks without a usable ID (missing, ``null`` or of the wrong type,
  MID-C-04/MID-C-05) fall back to the old rule: they continue the previous
  update if it was an ID-less chunk of the same kind, else start a new message;
* v2 chunks without a string ID are rejected (MID-V2-07); v2 whole-message
  updates replace content (``null`` and ``[]`` clear it, an omitted key or a
  malformed value changes nothing) and patch ``_meta`` (MID-V2-02/-03/-08);
  a chunk's own ``_meta`` never touches the message (MID-V2-04);
* messages are shown in order of first appearance.

Every step is a small method, so a deliberately broken client
(``fixtures/clients/*.py``) overrides exactly one behaviour.

As a program (``python -m conformance.client.reference --agent-cmd CMD``) it
is an interactive terminal client: it shows ``> `` when it waits for input,
sends each line as a prompt, and prints the conversation as ``role: text``
lines, all of it after each turn (``--render cumulative``, after clearing the
screen) or only what the turn added or changed (``--render incremental``).
With ``--prompt TEXT`` it is a one-shot client: one turn, print, exit
(``--resume SESSION`` loads that session first). ``/load SESSION`` reloads a
session (v1 ``session/load``: the replay becomes the conversation), ``/quit``
ends it. As a library it is an in-process client for
``--client-adapter conformance.client.reference:make_client``.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from conformance import __version__, model

CLIENT_NAME = "acp-conformance-reference-client"
CHUNKS = {"user_message_chunk": "user", "agent_message_chunk": "agent",
          "agent_thought_chunk": "thought"}
UPSERTS = {"user_message": "user", "agent_message": "agent", "agent_thought": "thought"}
UNSET: Any = object()  # a message whose _meta was never set
JsonObject = dict[str, Any]

# The profile that drives this client through a pty (the demo uses it).
PROFILE_YAML = r"""# Client profile of the acp-conformance reference client
ready: '^> $'
submit: "{prompt}\r"
message: '^(?P<role>user|agent|thought): (?P<text>.*)$'
render: cumulative
quit: "/quit\r"
load: "/load {session}\r"
"""


class Rejected(Exception):
    """An update the client ignores (a v2 message update without a string ID)."""


@dataclass
class Message:
    kind: str  # user | agent | thought
    message_id: str | None  # None: an ID-less v1 message (or a local prompt)
    content: list[Any] = field(default_factory=list)
    meta: Any = UNSET

    def text(self) -> str:
        parts = []
        for block in self.content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'block')}]")
        return "".join(parts)

    def shown(self) -> JsonObject:
        d: JsonObject = {"role": self.kind, "text": self.text()}
        if self.meta is not UNSET:
            d["meta"] = self.meta
        return d


class ReferenceClient:
    """The conformant client state machine: feed agent messages, it sends through ``send``."""

    def __init__(self, send: Callable[[JsonObject], None], *, max_protocol: int = 2,
                 cwd: str | None = None) -> None:
        self.send = send
        self.max_protocol = max_protocol
        self.protocol = max_protocol
        self.cwd = cwd or os.getcwd()
        self.session_id: str | None = None
        self.resume: str | None = None  # a session to load instead of creating one
        self.failed: str | None = None  # why the connection is unusable
        self.turn_open = False
        self._prompt_id: Any = None
        self._accepted = False
        self._idle = False
        self._ids = 0
        self._pending: dict[int, str] = {}
        self.messages: list[Message] = []
        self.by_key: dict[Hashable, Message] = {}
        self._previous: tuple[str, Message | None] | None = None  # (update type, ID-less msg)
        self._local_prompt: Message | None = None
        self.touched: list[Message] = []  # messages created or changed in the current turn

    # -- connection ---------------------------------------------------------
    def start(self) -> None:
        if self.max_protocol >= 2:
            params: JsonObject = {"protocolVersion": 2, "capabilities": {},
                                  "info": {"name": CLIENT_NAME, "version": __version__}}
        else:
            params = {"protocolVersion": 1, "clientInfo": {"name": CLIENT_NAME,
                                                           "version": __version__},
                      "clientCapabilities": {"fs": {"readTextFile": False,
                                                    "writeTextFile": False}, "terminal": False}}
        self._request("initialize", params)

    @property
    def ready(self) -> bool:
        return self.session_id is not None and not self.turn_open and self.failed is None

    def _request(self, method: str, params: JsonObject) -> int:
        rid = self._ids
        self._ids += 1
        self._pending[rid] = method
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def prompt(self, text: str) -> None:
        if self.session_id is None:
            raise RuntimeError("no session yet")
        self.touched = []
        local = Message("user", None, [{"type": "text", "text": text}])
        self._local_prompt = local
        self._add(local)
        self.turn_open, self._accepted, self._idle = True, False, False
        self._prompt_id = self._request("session/prompt", self.prompt_params(text))

    def load(self, session_id: str) -> None:
        """Reload a session (v1 session/load): the replayed history becomes the whole
        conversation, whatever IDs it carries (MID-C-07)."""
        self.forget()
        self.session_id = session_id
        self.turn_open = True  # busy until the load is answered
        self._request("session/load", {"sessionId": session_id, "cwd": self.cwd,
                                       "mcpServers": []})

    def forget(self) -> None:
        """Drop what is shown: a reload replays it."""
        self.messages, self.by_key, self.touched = [], {}, []
        self._previous = self._local_prompt = None

    def prompt_params(self, text: str) -> JsonObject:
        """The prompt request carries no message ID: IDs are the agent's (MID-C-01)."""
        return {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}

    # -- input ----------------------------------------------------------------
    def receive(self, msg: Any) -> None:
        if isinstance(msg, list):  # v2 batch: in array order
            for m in msg:
                self.receive(m)
            return
        if not isinstance(msg, dict):
            return
        method = msg.get("method")
        if method is None and "id" in msg:
            self._on_response(msg)
        elif isinstance(method, str) and "id" in msg:
            self._on_request(msg["id"], method, msg.get("params"))
        elif method == "session/update":
            params = msg.get("params")
            update = params.get("update") if isinstance(params, dict) else None
            if isinstance(update, dict):
                self.on_update(update)

    def _on_response(self, msg: JsonObject) -> None:
        rid = msg.get("id")
        method = self._pending.pop(rid, None) if isinstance(rid, int) else None
        result = msg.get("result")
        if method is None:
            return
        if "error" in msg:
            if method == "session/prompt":
                self.turn_open = False
            else:
                self.failed = f"{method} failed: {msg['error']}"
            return
        if method == "initialize":
            pv = result.get("protocolVersion") if isinstance(result, dict) else None
            if pv not in (1, 2) or pv > self.max_protocol:
                self.failed = f"the agent answered protocolVersion {pv!r}"
                return
            self.protocol = pv
            if self.resume is not None and pv < 2:
                self.load(self.resume)
                return
            params: JsonObject = {"cwd": self.cwd}
            if pv < 2:
                params["mcpServers"] = []
            self._request("session/new", params)
        elif method == "session/new":
            sid = result.get("sessionId") if isinstance(result, dict) else None
            if isinstance(sid, str):
                self.session_id = sid
            else:
                self.failed = "session/new returned no sessionId"
        elif method == "session/load":
            self.turn_open = False
        elif method == "session/prompt":
            if self.protocol >= 2:
                self._accepted = True
                if self._idle:
                    self.turn_open = False
            else:
                self.turn_open = False

    def _on_request(self, rid: Any, method: str, params: Any) -> None:
        if method == "session/request_permission" and isinstance(params, dict):
            options = model.as_array(params.get("options"))
            allow = [o for o in options if isinstance(o, dict)
                     and str(o.get("kind", "")).startswith("allow")]
            if allow:
                result: JsonObject = {"outcome": {"outcome": "selected",
                                                  "optionId": allow[0].get("optionId")}}
            else:
                result = {"outcome": {"outcome": "cancelled"}}
            self.send({"jsonrpc": "2.0", "id": rid, "result": result})
            return
        self.send({"jsonrpc": "2.0", "id": rid,
                   "error": {"code": -32601, "message": "Method not found"}})

    # -- the conversation ---------------------------------------------------------
    def on_update(self, update: JsonObject) -> None:
        utype = update.get("sessionUpdate")
        try:
            if utype in CHUNKS:
                self.on_chunk(CHUNKS[utype], update)
            elif utype in UPSERTS:
                self.on_upsert(UPSERTS[utype], update)
            elif utype == "state_update" and update.get("state") == "idle":
                self._idle = True
                if self._accepted:
                    self.turn_open = False
        except Rejected:
            pass
        if utype not in CHUNKS:
            self._previous = (str(utype), None)

    def message_id(self, update: JsonObject) -> str | None:
        """The update's ID as an opaque string, or None when it has none (v1 only).

        v1: a missing, null or wrongly typed ID means "no ID" (MID-S-02, MID-S-03).
        v2: message updates must carry a string ID; anything else is rejected.
        """
        value = update.get("messageId")
        if isinstance(value, str):
            return value
        if self.protocol >= 2:
            raise Rejected("v2 message update without a string messageId")
        return None

    def key(self, kind: str, message_id: str) -> Hashable:
        """State is keyed by kind and the exact ID string (MID-C-02)."""
        return (kind, message_id)

    def on_chunk(self, kind: str, update: JsonObject) -> None:
        block = update.get("content")
        mid = self.message_id(update)
        utype = str(update.get("sessionUpdate"))
        if mid is None:
            msg = self.without_id(kind, utype)
        else:
            msg = self.find_or_create(kind, mid, [block])
        self.append(msg, block)
        self._changed(msg)
        self._previous = (utype, msg if mid is None else None)

    def without_id(self, kind: str, utype: str) -> Message:
        """The legacy rule, for v1 chunks without an ID only: continue the previous
        update if it was an ID-less chunk of the same kind, else a new message."""
        prev = self._previous
        if prev is not None and prev[0] == utype and prev[1] is not None:
            return prev[1]
        msg = Message(kind, None)
        self._add(msg)
        return msg

    def find_or_create(self, kind: str, mid: str, content: Any = None) -> Message:
        key = self.key(kind, mid)
        msg = self.by_key.get(key)
        if msg is None:
            local = self._local_prompt
            if kind == "user" and local is not None and self._is_echo(local, content):
                # The agent's echo of the prompt we showed: it takes over the local message.
                self._local_prompt = None
                local.message_id, local.content = mid, []
                msg = local
            else:
                msg = Message(kind, mid)
                self._add(msg)
            self.by_key[key] = msg
        return msg

    @staticmethod
    def _is_echo(local: Message, content: Any) -> bool:
        if not isinstance(content, list) or not content:
            return False
        return Message("user", None, list(content)).text() == local.text()

    def append(self, msg: Message, block: Any) -> None:
        """A chunk appends its one content block (MID-C-03)."""
        msg.content.append(block)

    def on_upsert(self, kind: str, update: JsonObject) -> None:
        mid = self.message_id(update)
        if mid is None:
            raise Rejected("whole-message update without a string messageId")
        msg = self.find_or_create(kind, mid, update.get("content"))
        self.apply_upsert(msg, update)
        self._changed(msg)

    def apply_upsert(self, msg: Message, update: JsonObject) -> None:
        """Three-state patch: omitted = unchanged, null = cleared, a value replaces.
        A malformed value counts as omitted (MID-V2-08)."""
        if "content" in update:
            content = update["content"]
            if content is None:
                msg.content = []
            elif isinstance(content, list):
                msg.content = list(content)
        if "_meta" in update:
            meta = update["_meta"]
            if meta is None:
                msg.meta = None
            elif isinstance(meta, dict):
                msg.meta = dict(meta)

    def _add(self, msg: Message) -> None:
        self.messages.append(msg)

    def _changed(self, msg: Message) -> None:
        if all(m is not msg for m in self.touched):
            self.touched.append(msg)

    def display(self) -> list[Message]:
        """Display order: first appearance."""
        return list(self.messages)

    def shown(self) -> list[JsonObject]:
        return [m.shown() for m in self.display()]


# ---------------------------------------------------------------------------
# In-process adapter (conformance.client.adapter.ClientAdapter)
# ---------------------------------------------------------------------------


class ReferenceAdapter:
    """The reference client as an in-process adapter."""

    client_class: type[ReferenceClient] = ReferenceClient

    def __init__(self, max_protocol: int = 2) -> None:
        self.max_protocol = max_protocol
        self.client: ReferenceClient | None = None

    def start(self, send: Callable[[JsonObject], None]) -> None:
        self.client = self.client_class(send, max_protocol=self.max_protocol, cwd=os.getcwd())
        self.client.start()

    def receive(self, message: JsonObject) -> None:
        assert self.client is not None
        self.client.receive(message)

    def prompt(self, text: str) -> None:
        assert self.client is not None
        self.client.prompt(text)

    def messages(self) -> list[JsonObject]:
        assert self.client is not None
        return self.client.shown()

    def load(self, session_id: str) -> None:
        assert self.client is not None
        self.client.load(session_id)

    def close(self) -> None:
        self.client = None


def make_client() -> ReferenceAdapter:
    """Factory for ``--client-adapter conformance.client.reference:make_client``."""
    return ReferenceAdapter()


# ---------------------------------------------------------------------------
# The terminal program
# ---------------------------------------------------------------------------


def escape(text: str) -> str:
    """One line: control characters shown as escapes, so output stays line-shaped."""
    return "".join(ch if ch.isprintable() or ch == " " else f"\\u{ord(ch):04x}" for ch in text)


class Terminal:
    """Runs a ReferenceClient against an agent process, for a person at a terminal."""

    def __init__(self, client_class: type[ReferenceClient], agent_cmd: str, *, render: str,
                 max_protocol: int, resume: str | None = None) -> None:
        argv = shlex.split(agent_cmd)
        if not argv:
            raise SystemExit("reference client: --agent-cmd is empty")
        self.agent = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, bufsize=0)
        self.client = client_class(self._send, max_protocol=max_protocol)
        self.client.resume = resume
        self.render_mode = render
        self.out = sys.stdout
        self.sel = selectors.DefaultSelector()
        assert self.agent.stdout is not None
        self.agent_fd = self.agent.stdout.fileno()
        self.sel.register(self.agent_fd, selectors.EVENT_READ, "agent")
        self.buf = bytearray()

    def _send(self, msg: JsonObject) -> None:
        assert self.agent.stdin is not None
        try:
            self.agent.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
            self.agent.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def pump(self, until: Callable[[], bool], *, stdin: bool = False) -> str | None:
        """Handle agent lines until ``until()``; with ``stdin``, return the next input line."""
        if stdin:
            self.sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
        try:
            while not until():
                for key, _ in self.sel.select():
                    if key.data == "stdin":
                        line = sys.stdin.readline()
                        return line if line else None
                    data = os.read(self.agent_fd, 65536)
                    if not data:
                        raise SystemExit("reference client: the agent exited")
                    self.buf += data
                    while b"\n" in self.buf:
                        raw, _, rest = bytes(self.buf).partition(b"\n")
                        self.buf = bytearray(rest)
                        try:
                            msg = json.loads(raw)
                        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                            continue
                        self.client.receive(msg)
                if self.client.failed:
                    raise SystemExit(f"reference client: {self.client.failed}")
            return ""
        finally:
            if stdin:
                self.sel.unregister(sys.stdin.fileno())

    def render(self) -> None:
        if self.render_mode == "cumulative":
            self.out.write("\x1b[2J\x1b[H")
            shown = self.client.display()
        else:
            shown = [m for m in self.client.display() if any(m is t for t in self.client.touched)]
        for m in shown:
            self.out.write(f"{m.kind}: {escape(m.text())}\n")
        self.out.flush()

    def turn(self, text: str) -> None:
        self.client.prompt(text)
        self.pump(lambda: not self.client.turn_open)
        self.render()

    def run(self, once: str | None) -> int:
        self.client.start()
        self.pump(lambda: self.client.ready)
        if once is not None:
            self.turn(once)
            return 0
        while True:
            self.out.write("> ")
            self.out.flush()
            line = self.pump(lambda: False, stdin=True)
            if line is None or line.strip() == "/quit":
                return 0
            if line.startswith("/load "):
                self.client.load(line[len("/load "):].strip())
                self.pump(lambda: not self.client.turn_open)
                self.render()
            elif line.strip():
                self.turn(line.rstrip("\r\n"))

    def close(self) -> None:
        """Close the agent's input and give it 2 s to exit (then kill it). The end of its
        output tells when it has gone; Popen.wait(timeout) would poll in steps of up to
        50 ms."""
        try:
            if self.agent.stdin is not None:
                self.agent.stdin.close()
        except OSError:
            pass
        deadline = time.monotonic() + 2.0
        while (left := deadline - time.monotonic()) > 0 and self.sel.select(left):
            try:
                if not os.read(self.agent_fd, 65536):
                    break
            except OSError:
                break
        try:
            self.agent.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.agent.kill()
            self.agent.wait()


def main(argv: list[str] | None = None,
         client_class: type[ReferenceClient] = ReferenceClient) -> int:
    p = argparse.ArgumentParser(description="The acp-conformance reference ACP client.")
    p.add_argument("--agent-cmd", required=True, help="the agent command to start")
    p.add_argument("--render", choices=["cumulative", "incremental"], default="cumulative")
    p.add_argument("--prompt", help="one-shot: send this prompt, print the turn, exit")
    p.add_argument("--resume", metavar="SESSION",
                   help="load this session (v1 session/load) instead of creating one")
    p.add_argument("--protocol", type=int, choices=[1, 2], default=2,
                   help="newest protocol version to ask for (default 2)")
    args = p.parse_args(argv)
    term = Terminal(client_class, args.agent_cmd, render=args.render, max_protocol=args.protocol,
                    resume=args.resume)
    try:
        return term.run(args.prompt)
    except KeyboardInterrupt:
        return 130
    finally:
        term.close()


if __name__ == "__main__":
    sys.exit(main())
