"""Checkers on small hand-written transcripts: the cases a live agent rarely shows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.checks import Options, grade
from conformance.transcript import Transcript


def transcript(protocol: int, lines: list[tuple[str, dict[str, Any]]]) -> Transcript:
    t = Transcript({"protocol": protocol})
    for src, msg in lines:
        t.add(0, src, "stdin" if src == "client" else "stdout", json.dumps(msg).encode())
    return t


def update(kind: str, mid: str, **rest: Any) -> tuple[str, dict[str, Any]]:
    return ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": kind, "messageId": mid, **rest}}})


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def v2_turn(echo: list[tuple[str, dict[str, Any]]]) -> Transcript:
    return transcript(2, [
        ("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": 2}}),
        ("agent", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 2}}),
        ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}),
        ("agent", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}),
        ("client", {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                    "params": {"sessionId": "s", "prompt": [text("Hello")]}}),
        ("agent", {"jsonrpc": "2.0", "id": 2, "result": {"messageId": "u1"}}),
        *echo,
        update("agent_message_chunk", "a1", content=text("Hi")),
        ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "idle",
                                         "stopReason": "end_turn"}}}),
    ])


@pytest.mark.parametrize("echo,warned", [
    ([update("user_message_chunk", "u1", content=text("Hel")),
      update("user_message_chunk", "u1", content=text("lo"))], False),
    ([update("user_message", "u1", content=[text("Hello")])], False),
    ([update("user_message", "u1", content=[text("Bye")]),
      update("user_message", "u1", content=[text("Hello")])], False),
    ([update("user_message_chunk", "u1", content=text("Hel")),
      update("user_message_chunk", "u1", content=text("p"))], True),
])
def test_v2_echo_content_is_the_reduced_message(echo: list[Any], warned: bool) -> None:
    findings = grade(v2_turn(echo).entries, protocol=2, options=Options(),
                     select=["MID-V2-05/echo-content"])
    outcomes = {f.outcome.value for f in findings}
    assert ("warn" in outcomes) is warned, findings
    assert outcomes <= {"warn", "pass"}
