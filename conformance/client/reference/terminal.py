"""The reference client as an interactive terminal program, and its command line."""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shlex
import subprocess
import sys
import time
from collections.abc import Callable

from conformance.client.reference.client import JsonObject, ReferenceClient


def escape(text: str) -> str:
    """One line: control characters shown as escapes, so output stays line-shaped."""
    return "".join(ch if ch.isprintable() or ch == " " else f"\\u{ord(ch):04x}" for ch in text)


class Terminal:
    """Runs a ReferenceClient against an agent process, for a person at a terminal."""

    def __init__(self, client_class: type[ReferenceClient], agent_cmd: str, *, render: str,
                 max_protocol: int, resume: str | None = None) -> None:
        self.argv = shlex.split(agent_cmd)
        if not self.argv:
            raise SystemExit("reference client: --agent-cmd is empty")
        self.sel = selectors.DefaultSelector()
        self._spawn()
        self.client = client_class(self._send, max_protocol=max_protocol)
        self.client.resume = resume
        self.render_mode = render
        self.out = sys.stdout

    def _spawn(self) -> None:
        self.agent = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, bufsize=0)
        assert self.agent.stdout is not None
        self.agent_fd = self.agent.stdout.fileno()
        self.sel.register(self.agent_fd, selectors.EVENT_READ, "agent")
        self.buf = bytearray()
        self.agent_closed = False

    def _agent_gone(self) -> None:
        """The agent's output ended. In the middle of a reload the replay was cut short: the
        client carries on without an agent, and the next /load starts a fresh one. At any
        other time the client has nothing left to do."""
        if not (self.client.turn_open and self.client.loading()):
            raise SystemExit("reference client: the agent exited")
        self.client.connection_lost()
        self.sel.unregister(self.agent_fd)
        self.agent_closed = True
        for stream in (self.agent.stdin, self.agent.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.agent.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.agent.kill()
            self.agent.wait()

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
                        self._agent_gone()
                        break
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
            if line.startswith("/load ") and not self.client.connected:
                self._spawn()  # the last agent hung up: resume with a fresh one
                self.client.reconnect(line[len("/load "):].strip())
                self.pump(lambda: not self.client.turn_open)
                self.render()
            elif line.startswith("/load "):
                self.client.load(line[len("/load "):].strip())
                self.pump(lambda: not self.client.turn_open)
                self.render()
            elif line.strip():
                self.turn(line.rstrip("\r\n"))

    def close(self) -> None:
        """Close the agent's input and give it 2 s to exit (then kill it). The end of its
        output tells when it has gone; Popen.wait(timeout) would poll in steps of up to
        50 ms."""
        if self.agent_closed:
            return
        self.agent_closed = True
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
                   help="reload this session (v1 session/load, v2 session/resume from the "
                        "start) instead of creating one")
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
