"""The agent double: a scripted ACP agent that the client under test spawns.

``python -m conformance.client.double --protocol 1|2 --control SOCKET`` is
started by the client (the suite puts it where the client command says
``{agent}``). It performs the handshake in v1 or v2, answers ``session/new``
(in reload cases also v1 ``session/load``, replaying the history the suite hands
it), and answers each ``session/prompt`` with the turn the suite hands it: the
scripted updates, permission requests, then a liveness probe (an extension
request ``_acp_mid/ping`` that must get an answer), then the end of the turn
(v1 the prompt response, v2 an idle ``state_update``). It reports every line
it reads and writes, and its events, to the suite over the control socket
(:mod:`conformance.client.channel`); with ``--transcript FILE`` it also saves
its own transcript. Without ``--control`` it plays ``--script FILE`` (a JSON
list of turns) in order, for use by hand.

:class:`~conformance.client.double_engine.DoubleEngine` is the agent without any
I/O: the process here and the in-process adapter loop
(:mod:`conformance.client.adapter`) both drive it.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import sys
import time
from collections import deque
from typing import Any

from conformance.client.double_engine import (
    DEFAULT_WAIT,
    DoubleEngine,
    JsonObject,
    encode_line,
)
from conformance.client.script import TurnScript


class _Recorder:
    """Reports to the suite (if connected) and keeps the double's own transcript."""

    def __init__(self, channel: Any, transcript_path: str | None, protocol: int) -> None:
        self.channel = channel
        self.transcript = None
        self.path = transcript_path
        if transcript_path:
            from conformance.transcript import Transcript

            self.transcript = Transcript({"role": "client", "protocol": protocol,
                                          "target": "(the client that started the double)",
                                          "case": "agent-double"})

    def line(self, direction: str, raw: bytes) -> None:
        if self.channel is not None:
            self.channel.line(direction, raw)
        if self.transcript is not None:
            src, stream = ("agent", "stdout") if direction == "out" else ("client", "stdin")
            self.transcript.add(0, src, stream, raw)

    def event(self, event: JsonObject) -> None:
        if self.channel is not None:
            self.channel.event(event["event"], event.get("data") or {})
        if self.transcript is not None:
            self.transcript.add(0, "harness", "harness", event="note",
                                data={"note": event["event"], **(event.get("data") or {})})

    def close(self, reason: str) -> None:
        if self.transcript is not None and self.path:
            self.transcript.add(0, "harness", "harness", event="exit", data={"reason": reason})
            self.transcript.save(self.path)  # type: ignore[arg-type]


def run(protocol: int, channel: Any, script: list[TurnScript], transcript: str | None,
        wait: float, response_message_id: bool, load_session: bool = False,
        extra_args: list[str] | None = None) -> int:
    recorder = _Recorder(channel, transcript, protocol)
    if extra_args:  # what the client appended to the agent command: recorded, not used
        recorder.event({"event": "extra-arguments", "data": {"arguments": list(extra_args)}})
    queued = deque(script)

    def next_turn() -> TurnScript | None:
        if channel is not None:
            return channel.next_turn()  # type: ignore[no-any-return]
        return queued.popleft() if queued else None

    engine = DoubleEngine(protocol=protocol, next_turn=next_turn,
                          response_message_id=response_message_id,
                          load_session=bool(channel.config.get("load_session"))
                          if channel is not None else load_session)
    engine.replay_marker = bool(channel.config.get("replay_marker")) if channel else False
    stdin = sys.stdin.buffer.fileno()
    stdout = sys.stdout.buffer
    sel = selectors.DefaultSelector()
    sel.register(stdin, selectors.EVENT_READ)
    buf = bytearray()
    deadline: float | None = None
    reason = "eof"

    def flush() -> None:
        produced = engine.take()
        for i, (kind, item) in enumerate(produced):
            if kind == "event":
                if not _ends_turn(produced, i):  # else reported with the line it follows
                    recorder.event(item)
                continue
            raw = encode_line(item)
            recorder.line("out", raw[:-1])
            if i + 1 < len(produced) and _ends_turn(produced, i + 1):
                # The end of the turn is reported before its last line (the response, or
                # v2's idle) is written: a client that ends its agent as soon as that line
                # arrives must not leave the suite with an answered turn it never heard end.
                recorder.event(produced[i + 1][1])
            try:
                stdout.write(raw)
                stdout.flush()
            except (BrokenPipeError, OSError):
                pass

    try:
        while True:
            if engine.waiting_for is not None and deadline is None:
                deadline = time.monotonic() + wait
            elif engine.waiting_for is None:
                deadline = None
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not sel.select(timeout):
                engine.timed_out()
                deadline = None
                flush()
                continue
            data = os.read(stdin, 65536)
            if not data:
                break
            buf += data
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                raw = bytes(buf[:nl])
                del buf[: nl + 1]
                recorder.line("in", raw)
                try:
                    msg = json.loads(raw.decode("utf-8").rstrip("\r"))
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    continue  # recorded; the transcript shows it as a line that did not parse
                engine.feed(msg)
                flush()
                if engine.hung_up:  # a truncated replay: the connection ends here
                    reason = "hung up"
                    return 0
    except ConnectionError:
        reason = "control channel closed"
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        recorder.close(reason)
    return 0


def _ends_turn(produced: list[tuple[str, Any]], i: int) -> bool:
    """Whether item ``i`` is a turn-end report right after the turn's last line."""
    kind, item = produced[i]
    return (kind == "event" and item.get("event") == "turn-end" and i > 0
            and produced[i - 1][0] == "line")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.client.double",
                                description="The acp-conformance agent double (an ACP agent "
                                            "scripted by the suite). Arguments it does not "
                                            "know (a client may append its own, such as "
                                            "--acp --stdio) are accepted and recorded.",
                                allow_abbrev=False)
    p.add_argument("--protocol", type=int, choices=[1, 2], default=None,
                   help="protocol version to answer (default: the suite's, else 1)")
    p.add_argument("--control", metavar="SOCKET", help="the suite's control socket")
    p.add_argument("--script", metavar="FILE", help="JSON list of turns (without --control)")
    p.add_argument("--transcript", metavar="FILE", help="also save this double's transcript")
    p.add_argument("--load-session", action="store_true",
                   help="advertise and answer session/load (v1) and session/resume (v2), "
                        "replaying the reload turns of --script")
    p.add_argument("--no-response-message-id", action="store_true",
                   help="v2: answer session/prompt without the user message's messageId (the "
                        "acp-repo-2026-08-22 profile)")
    p.add_argument("--wait", type=float, default=DEFAULT_WAIT,
                   help="seconds to wait for an answer to a probe or permission request")
    args, extra = p.parse_known_args(argv)
    channel = None
    protocol = args.protocol or 1
    response_message_id = not args.no_response_message_id
    if args.control:
        from conformance.client.channel import DoubleSide

        try:
            channel = DoubleSide.connect(args.control, protocol=args.protocol)
        except OSError as exc:
            print(f"agent double: cannot reach the suite at {args.control}: {exc.strerror}",
                  file=sys.stderr)
            return 2
        protocol = int(channel.config.get("protocol", protocol))
        response_message_id = bool(channel.config.get("response_message_id", True))
        args.wait = float(channel.config.get("wait", args.wait))
    script: list[TurnScript] = []
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            script = [TurnScript.from_json(t) for t in json.load(fh)]
    return run(protocol, channel, script, args.transcript, args.wait, response_message_id,
               load_session=args.load_session, extra_args=extra)


if __name__ == "__main__":
    sys.exit(main())
