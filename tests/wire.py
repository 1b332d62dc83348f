"""Hand-written ACP wire lines for transcript-level tests: the client's requests, the
agent's updates and responses, as (source, message) pairs, and a Transcript of them.
Shared by the test modules that grade small transcripts (no test module imports another)."""

from __future__ import annotations

import json
from typing import Any

from conformance.checks import Options
from conformance.profiles import get as get_profile
from conformance.transcript import Transcript

PREVIEW = Options(profile=get_profile("acp-schema-1.21"))
Line = tuple[str, dict[str, Any]]


def transcript(protocol: int, lines: list[Line]) -> Transcript:
    t = Transcript({"protocol": protocol})
    for src, msg in lines:
        t.add(0, src, "stdin" if src == "client" else "stdout", json.dumps(msg).encode())
    return t


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def upd(kind: str, mid: str | None = None, sid: str = "s", **rest: Any) -> Line:
    u: dict[str, Any] = {"sessionUpdate": kind, **rest}
    if mid is not None:
        u["messageId"] = mid
    return ("agent", {"jsonrpc": "2.0", "method": "session/update",
                      "params": {"sessionId": sid, "update": u}})


def req(rid: int, method: str, **params: Any) -> Line:
    return ("client", {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def res(rid: int, result: Any = None, error: bool = False) -> Line:
    if error:
        return ("agent", {"jsonrpc": "2.0", "id": rid,
                          "error": {"code": -32603, "message": "boom"}})
    return ("agent", {"jsonrpc": "2.0", "id": rid, "result": {} if result is None else result})


def start(protocol: int) -> list[Line]:
    return [req(0, "initialize", protocolVersion=protocol),
            res(0, {"protocolVersion": protocol}), req(1, "session/new"),
            res(1, {"sessionId": "s"})]


def resume(rid: int, *, replay: str | None = "start", omit: bool = False) -> Line:
    params: dict[str, Any] = {"sessionId": "s", "cwd": "/"}
    if not omit:
        params["replayFrom"] = None if replay is None else {"type": replay}
    return req(rid, "session/resume", **params)
