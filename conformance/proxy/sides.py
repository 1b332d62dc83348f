"""The agent side of a proxy: the recording shim's log as a transcript."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from conformance.transcript import Transcript


def agent_side(log: Path, header: dict[str, Any], masker: Any = None) -> Transcript:
    """The transcript of what passed between the proxy and the agent behind it: one
    connection per agent process the proxy started, ``src`` ``client`` for what the
    proxy wrote to the agent and ``agent`` for what the agent wrote. A line the shim
    could not log whole (the proxy killed it mid-write) is skipped."""
    transcript = Transcript(header, masker=masker)
    try:
        text = log.read_text(encoding="ascii", errors="replace")
    except OSError:
        return transcript
    conns: dict[Any, int] = {}
    start: float | None = None
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        conn = conns.setdefault(record.get("pid"), len(conns))
        t = record.get("t")
        if isinstance(t, (int, float)) and start is None:
            start = float(t)
        event, direction = record.get("event"), record.get("dir")
        if event == "start":
            entry = transcript.add(conn, "harness", "harness", event="start",
                                   data={"argv": record.get("argv"), "pid_role": "agent",
                                         "pid": record.get("child")})
        elif event == "start-failed":
            entry = transcript.add(conn, "harness", "harness", event="note",
                                   data={"note": "the agent behind the proxy did not start",
                                         "argv": record.get("argv"),
                                         "error": record.get("error")})
        elif event == "exit":
            rc = record.get("returncode")
            entry = transcript.add(conn, "harness", "harness", event="exit",
                                   data={"returncode": rc, "signal": None,
                                         "ended_by": "stdin" if record.get("stdin_closed")
                                         else "exit"})
        elif direction in ("in", "out"):
            try:
                raw = base64.b64decode(str(record.get("b64", "")), validate=True)
            except (binascii.Error, ValueError):
                continue
            src, stream = ("client", "stdin") if direction == "in" else ("agent", "stdout")
            entry = transcript.add(conn, src, stream, raw)
        else:
            continue
        if isinstance(t, (int, float)) and start is not None:
            entry.t = float(t) - start
    return transcript
