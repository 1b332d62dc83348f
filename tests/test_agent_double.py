"""The agent double's process: the end of a turn is reported before the turn's last line
is written, and arguments a client appends to the agent command are accepted and
recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.client import double
from conformance.client.script import TurnScript
from conformance.transcript import load

REPO = Path(__file__).resolve().parents[1]
TURN = TurnScript("t1", "Hello", True, ({"update": {
    "sessionUpdate": "agent_message_chunk", "messageId": "m1",
    "content": {"type": "text", "text": "Hi"}}},), await_probe=False)


class _Log:
    """What the double did, in order: reports to the suite and writes to the client."""

    def __init__(self) -> None:
        self.items: list[tuple[str, Any]] = []
        self.config = {"protocol": 1}

    # the control channel's side
    def line(self, direction: str, raw: bytes) -> None:
        self.items.append(("report-line", json.loads(raw)))

    def event(self, name: str, data: dict[str, Any]) -> None:
        self.items.append(("report-event", name))

    def next_turn(self) -> TurnScript:
        return TURN

    # the client's side of stdout
    def write(self, raw: bytes) -> None:
        self.items.append(("write", json.loads(raw)))

    def flush(self) -> None:
        pass


class _Stream:
    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer


class _Stdin:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def _messages(protocol: int) -> bytes:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": protocol}}
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/",
                                                                          "mcpServers": []}}
    prompt = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {
        "sessionId": "sess-1", "prompt": [{"type": "text", "text": "Hello"}]}}
    return b"".join(json.dumps(m).encode() + b"\n" for m in (init, new, prompt))


@pytest.mark.parametrize("protocol", [1, 2])
def test_the_end_of_a_turn_is_reported_before_its_last_line_is_written(
        protocol: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that ends its agent the moment the response (v1) or the idle (v2)
    arrives must find the suite already told that the turn ended."""
    log = _Log()
    log.config = {"protocol": protocol}
    read, write = os.pipe()
    os.write(write, _messages(protocol))
    os.close(write)
    monkeypatch.setattr(sys, "stdin", _Stream(_Stdin(read)))
    monkeypatch.setattr(sys, "stdout", _Stream(log))
    try:
        double.run(protocol, log, [], None, 1.0, True)
    finally:
        os.close(read)
    writes = [i for i, (kind, _) in enumerate(log.items) if kind == "write"]
    last = writes[-1]  # the turn's last line: the v1 response or the v2 idle
    msg = log.items[last][1]
    assert (msg.get("result") == {"stopReason": "end_turn"} if protocol == 1 else
            msg["params"]["update"]["state"] == "idle"), msg
    turn_end = log.items.index(("report-event", "turn-end"))
    assert log.items[turn_end - 1] == ("report-line", msg)  # recorded first, then ended
    assert turn_end < last, log.items


def test_arguments_a_client_appends_are_accepted_and_recorded(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([TURN.to_json()]), encoding="utf-8")
    transcript = tmp_path / "double.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.client.double", "--protocol", "1", "--script",
         str(script), "--transcript", str(transcript), "--acp", "--stdio"],
        input=_messages(1), capture_output=True, timeout=60, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert answers[0]["result"]["protocolVersion"] == 1
    assert answers[-1]["result"] == {"stopReason": "end_turn"}
    notes = [e.data for e in load(transcript)[1] if e.event == "note"]
    assert {"note": "extra-arguments", "arguments": ["--acp", "--stdio"]} in notes
