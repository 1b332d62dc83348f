"""Random transcripts of both protocols (tests/test_grading_repeats.py,
tests/test_grading_compact.py): many turns, chunks with and without IDs, repeats, tool
calls and permission requests, each built from a seed."""

from __future__ import annotations

import json
import random
from typing import Any

from conformance.transcript import Entry, Transcript

KINDS = {1: ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk"),
         2: ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk",
             "user_message", "agent_message", "agent_thought")}
TEXTS = ("Hello", " world", ".", "and then ", "some more", "! ", "end.\n", "", "x")


class _Builder:
    """Random traffic of one agent connection, shaped like what the suite records."""

    def __init__(self, rng: random.Random, protocol: int) -> None:
        self.rng = rng
        self.protocol = protocol
        self.t = Transcript({"role": "agent", "protocol": protocol})
        self.rid = 0
        self.pending: list[tuple[int, str, str]] = []  # (id, method, session)
        self.ids: list[Any] = ["m1", "m2"]
        self.sessions: list[str] = []

    def line(self, src: str, msg: Any, *, fuzz: bool = False) -> None:
        stream = "stdin" if src == "client" else "stdout"
        self.t.add(0, src, stream, json.dumps(msg).encode(), fuzz=fuzz)

    def request(self, method: str, params: dict[str, Any]) -> int:
        self.rid += 1
        self.line("client", {"jsonrpc": "2.0", "id": self.rid, "method": method,
                             "params": params})
        self.pending.append((self.rid, method, params.get("sessionId", "")))
        return self.rid

    def respond(self, index: int = 0) -> None:
        rid, method, sid = self.pending.pop(index)
        if method == "session/new":
            sid = f"s{len(self.sessions)}"
            self.sessions.append(sid)
            result: Any = {"sessionId": sid}
        elif method == "session/prompt":
            result = {"stopReason": self.rng.choice(["end_turn", "cancelled"])}
            if self.protocol >= 2:
                result = self.rng.choice([{}, {"messageId": self.pick_id()}])
        elif method == "initialize":
            result = {"protocolVersion": self.protocol, "agentCapabilities": {"loadSession": True}}
        else:
            result = {}
        if self.rng.random() < 0.05:
            self.line("agent", {"jsonrpc": "2.0", "id": rid, "error": {"code": -1,
                                                                       "message": "no"}})
        else:
            self.line("agent", {"jsonrpc": "2.0", "id": rid, "result": result})

    def pick_id(self) -> Any:
        r = self.rng.random()
        if r < 0.45:
            return self.rng.choice(self.ids[-3:])
        if r < 0.75:
            new = f"m{len(self.ids) + 1}"
            self.ids.append(new)
            return new
        return self.rng.choice([None, 7, "", "x" * 1100, "ABSENT", self.rng.choice(self.ids)])

    def update(self, sid: str, update: dict[str, Any], *, jsonrpc: str = "2.0") -> dict[str, Any]:
        return {"jsonrpc": jsonrpc, "method": "session/update",
                "params": {"sessionId": sid, "update": update}}

    def chunk(self, sid: str, kind: str, mid: Any) -> dict[str, Any]:
        u: dict[str, Any] = {"sessionUpdate": kind}
        if mid != "ABSENT":
            u["messageId"] = mid
        text = self.rng.choice(TEXTS)
        if kind.endswith("_chunk"):
            u["content"] = {"type": "text", "text": text}
        else:
            u["content"] = self.rng.choice([[{"type": "text", "text": text}], None, "bad"])
        if self.rng.random() < 0.03:
            u["_meta"] = {"messageId": "meta"}
        if self.rng.random() < 0.03:
            u["message_id"] = "near"
        return self.update(sid, u)

    def run(self) -> None:
        """A run of chunks, mostly of one ID, with a little noise in between."""
        rng = self.rng
        sid = rng.choice(self.sessions)
        kind = rng.choice(KINDS[self.protocol])
        mid = self.pick_id()
        style = rng.choice(["one-id", "one-id", "id-per-chunk", "gap", "no-id", "null-id"])
        if style in ("no-id", "null-id"):  # a run without IDs: omitted or null throughout
            mid = "ABSENT" if style == "no-id" else None
        for i in range(rng.randint(1, 12)):
            if style == "id-per-chunk":
                mid = f"p{len(self.ids)}"
                self.ids.append(mid)
            elif style == "gap" and i % 3 == 1:
                self.line("agent", self.chunk(sid, kind, "ABSENT"))
                continue
            r = rng.random()
            if r < 0.04:
                self.t.add(0, "agent", "stderr", b"log line")
            elif r < 0.06:
                self.line("agent", self.chunk(sid, kind, mid) | {"jsonrpc": "1.0"})
                continue
            elif r < 0.08:
                self.line("agent", self.chunk(sid, kind, mid) | {"id": 99})
                continue
            elif r < 0.10:
                mid = self.pick_id()
            elif r < 0.12:
                kind = rng.choice(KINDS[self.protocol])
            elif r < 0.13:
                sid = rng.choice(self.sessions)
            elif r < 0.14 and self.protocol >= 2:
                self.line("agent", [self.chunk(sid, kind, mid), self.chunk(sid, kind, mid)])
                continue
            elif r < 0.15:
                self.t.add(0, "agent", "stdout", b"not json")
                continue
            self.line("agent", self.chunk(sid, kind, mid))

    def build(self, steps: int) -> list[Entry]:
        rng = self.rng
        self.t.add(0, "harness", "harness", event="start", data={"pid_role": "agent"})
        self.request("initialize", {"protocolVersion": self.protocol})
        self.respond()
        for _ in range(rng.randint(1, 2)):
            self.request("session/new", {"cwd": "/", "mcpServers": []})
            self.respond()
        for _ in range(steps):
            sid = rng.choice(self.sessions)
            r = rng.random()
            if r < 0.15:
                params: dict[str, Any] = {"sessionId": sid,
                                          "prompt": [{"type": "text", "text": "Hello world."}]}
                if rng.random() < 0.1:
                    params["messageId"] = "client-id"
                self.request("session/prompt", params)
            elif r < 0.55:
                self.run()
            elif r < 0.65 and self.pending:
                self.respond(rng.randrange(len(self.pending)))
            elif r < 0.70:
                self.line("client", {"jsonrpc": "2.0", "method": "session/cancel",
                                     "params": {"sessionId": sid}})
            elif r < 0.76:
                if self.protocol >= 2:
                    params = {"sessionId": sid}
                    if rng.random() < 0.7:
                        params["replayFrom"] = {"type": "start"}
                    self.request("session/resume", params)
                else:
                    self.request("session/load", {"sessionId": sid, "cwd": "/",
                                                  "mcpServers": []})
            elif r < 0.80:
                self.line("agent", self.update(sid, {"sessionUpdate": "tool_call",
                                                     "toolCallId": "c1", "title": "t",
                                                     **({"messageId": "m1"}
                                                        if rng.random() < 0.2 else {})}))
            elif r < 0.84 and self.protocol >= 2:
                self.line("agent", self.update(sid, {"sessionUpdate": "state_update",
                                                     "state": rng.choice(["idle", "running"]),
                                                     "stopReason": "end_turn"}))
            elif r < 0.86:
                self.t.add(0, "harness", "harness", event="note", data={"note": "n"})
            elif r < 0.88:
                self.line("agent", {"jsonrpc": "2.0", "id": 500 + self.rid,
                                    "method": "session/request_permission",
                                    "params": {"sessionId": sid, "options": []}})
        while self.pending:
            self.respond()
        self.t.add(0, "harness", "harness", event="exit",
                   data={"returncode": 0, "ended_by": "stdin-eof"})
        return list(self.t.entries)


def random_entries(seed: int, protocol: int, steps: int = 60) -> list[Entry]:
    return _Builder(random.Random(seed), protocol).build(steps)
