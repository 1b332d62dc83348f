"""The recording shim: what the suite puts where a proxy command says ``{agent}``.

``python -m conformance.proxy.shim --log FILE -- AGENT ARGS...`` starts the agent
behind the proxy (the suite's agent double, or a real agent given with
``--agent``) and passes its stdio through unchanged, logging every line in both
directions as it goes, so the agent's side of the proxy is recorded at the wire,
outside both the agent and the proxy. It grades nothing and changes nothing: one
JSON record per line of ``FILE`` (appended and flushed at once, so a proxy that
kills it loses nothing already passed on):

- ``{"pid": P, "t": T, "event": "start", "argv": [...]}``
- ``{"pid": P, "t": T, "dir": "in"|"out", "b64": RAW}`` (``in``: proxy to agent)
- ``{"pid": P, "t": T, "event": "exit", "returncode": RC}``

``conformance.proxy.sides`` turns the log into the agent-side transcript.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

MAX_LINE = 16 * 1024 * 1024  # longer lines are passed on in pieces and logged as pieces


class _Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.pid = os.getpid()
        self.lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        record = {"pid": self.pid, "t": time.time(), **record}
        data = (json.dumps(record) + "\n").encode("ascii")
        with self.lock:
            os.write(self.fd, data)


def _pump(src: IO[bytes], dst: IO[bytes], log: _Log, direction: str,
          on_eof: Any = None) -> None:
    try:
        while True:
            line = src.readline(MAX_LINE)
            if not line:
                break
            body = line[:-1] if line.endswith(b"\n") else line
            log.write({"dir": direction, "b64": base64.b64encode(body).decode("ascii")})
            try:
                dst.write(line)
                dst.flush()
            except (BrokenPipeError, OSError):
                break
    except (OSError, ValueError):
        pass
    finally:
        if on_eof is not None:
            on_eof()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] != "--log" or args[2] != "--":
        print("usage: python -m conformance.proxy.shim --log FILE -- AGENT [ARGS...]",
              file=sys.stderr)
        return 2
    log = _Log(args[1])
    command = args[3:]
    try:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        log.write({"event": "start-failed", "argv": command, "error": exc.strerror})
        print(f"acp-conformance shim: cannot start {command[0]}: {exc.strerror}",
              file=sys.stderr)
        return 127
    log.write({"event": "start", "argv": command, "child": child.pid})

    def forward(sig: int, frame: Any) -> None:  # a proxy that ends us ends the agent too
        try:
            child.send_signal(sig)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    assert child.stdin is not None and child.stdout is not None
    stdin_eof = threading.Event()

    def close_child_stdin() -> None:
        stdin_eof.set()
        try:
            child.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    to_agent = threading.Thread(target=_pump, daemon=True, args=(
        sys.stdin.buffer, child.stdin, log, "in", close_child_stdin))
    to_agent.start()
    _pump(child.stdout, sys.stdout.buffer, log, "out")
    rc = child.wait()
    log.write({"event": "exit", "returncode": rc, "stdin_closed": stdin_eof.is_set()})
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
