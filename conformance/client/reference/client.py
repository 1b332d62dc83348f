"""The reference client without I/O: :class:`ReferenceClient`, the conformant state machine
and reducer (Appendix G) every broken client fixture subclasses, and its :class:`Message`."""

from __future__ import annotations

import os
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
        self.connected = True  # False once the agent ended the connection
        self.turn_open = False
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
    def advertised_name(self) -> str:
        """The reference's name, or a fixture's own (``conformance.naming``)."""
        from conformance.naming import advertised_name

        return advertised_name(type(self), ReferenceClient, CLIENT_NAME, "client")

    def start(self) -> None:
        if self.max_protocol >= 2:
            params: JsonObject = {"protocolVersion": 2, "capabilities": {},
                                  "info": {"name": self.advertised_name(), "version": __version__}}
        else:
            params = {"protocolVersion": 1, "clientInfo": {"name": self.advertised_name(),
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
        self._previous = None  # a new turn: an ID-less message never spans turns
        self.turn_open, self._accepted, self._idle = True, False, False
        self._request("session/prompt", self.prompt_params(text))

    def load(self, session_id: str) -> None:
        """Reload a session (v1 session/load, v2 session/resume from the start): the
        replayed history becomes the whole conversation, whatever IDs it carries (MID-C-07)."""
        self.forget()
        self.session_id = session_id
        self.turn_open = True  # busy until the load is answered
        if self.protocol >= 2:
            self._request("session/resume", {"sessionId": session_id, "cwd": self.cwd,
                                             "replayFrom": {"type": "start"}})
        else:
            self._request("session/load", {"sessionId": session_id, "cwd": self.cwd,
                                           "mcpServers": []})

    def connection_lost(self) -> None:
        """The agent ended the connection (in the middle of a replay, say): what the replay
        showed may stay on screen, but it is not the session's history (MID-V2-14); the
        next load starts a fresh connection and replaces it."""
        self.connected = False
        self.turn_open = False
        self._pending.clear()

    def loading(self) -> bool:
        """A reload (or the connection it needs) is under way."""
        pending = set(self._pending.values())
        return bool(pending & {"session/load", "session/resume"}) or (
            self.resume is not None and "initialize" in pending)

    def reconnect(self, session_id: str) -> None:
        """Load ``session_id`` over a fresh connection: initialize, then resume."""
        self.connected, self.failed = True, None
        self.protocol, self._ids = self.max_protocol, 0
        self.resume = session_id
        self.turn_open = True  # busy until the load is answered
        self.start()

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
            if self.resume is not None:
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
        elif method in ("session/load", "session/resume"):
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
