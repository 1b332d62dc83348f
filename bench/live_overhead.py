"""Live suite overhead: the whole agent suite against a raw driver doing the same exchanges.

1. The subject: ``python -m conformance --agent "<python> -m conformance.reference.agent"
   --transcripts DIR`` (every case, both protocol versions), timed from start to exit.
2. The baseline: a minimal raw driver that replays, from those transcripts, the
   same exchanges against the same agent command: one fresh process per
   recorded connection, the recorded client messages (with the live session IDs,
   working directory and request IDs put in), waiting for the same responses,
   sending the cancel on the turn's first output as the suite does, answering
   the agent's requests with the recorded answers, and waiting the same 0.25 s
   of silence after a cancelled turn, a load and a resume. No recording, no
   Entry objects, no grading, no reports: plain pipes and ``json``.

It prints the wall-time ratio (target: at most 2x) and where the rest goes:
start-up and case loading, driving (per-case spans from the transcripts against
the raw driver's), grading (the saved transcripts graded again in-process), and
the fixed grace windows both sides wait.

    python3 -m bench.live_overhead
    python3 -m bench.live_overhead --repeats 1 --case prompt-lifecycle   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, Sample, alternate, conformance_cli, env, ratio_line, run

TARGET_RATIO = 2.0
GRACE = 0.25  # the suite's silence window after a cancelled turn, a load and a resume
TIMEOUT = 30.0  # a raw wait that lasts this long is a bug of the replay, not a slow agent
OUTPUT_KINDS = ("agent_message_chunk", "agent_thought_chunk", "agent_message", "agent_thought")


def agent_command() -> list[str]:
    return [sys.executable, "-m", "conformance.reference.agent"]


# -- the raw driver ------------------------------------------------------------
@dataclass
class Conn:
    """One recorded connection: what the client sent, in order."""

    protocol: int
    sent: list[dict[str, Any]] = field(default_factory=list)  # requests and notifications
    answers: list[dict[str, Any]] = field(default_factory=list)  # replies to agent requests


@dataclass
class Stats:
    spawns: int = 0
    graces: int = 0
    lines_read: int = 0
    lines_sent: int = 0


def load_transcript(path: Path) -> tuple[int, list[Conn]]:
    """The client side of a transcript, per connection."""
    with open(path, encoding="utf-8") as fh:
        header = json.loads(fh.readline())
        entries = [json.loads(line) for line in fh if line.strip()]
    protocol = int(header.get("protocol", 1))
    conns: dict[int, Conn] = {}
    for e in entries:
        conn = conns.setdefault(e["conn"], Conn(protocol))
        if e["src"] != "client" or not isinstance(e.get("msg"), dict):
            continue
        msg = e["msg"]
        (conn.sent if "method" in msg else conn.answers).append(msg)
    return protocol, [conns[k] for k in sorted(conns)]


class RawAgent:
    """The agent process over plain pipes, read line by line with a selector."""

    def __init__(self, argv: list[str], stats: Stats) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=str(REPO_ROOT), env=env(),
                                     start_new_session=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.fd = self.proc.stdin, self.proc.stdout.fileno()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.fd, selectors.EVENT_READ)
        self.buf = b""
        self.stats = stats
        stats.spawns += 1

    def send(self, msg: dict[str, Any]) -> None:
        self.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        self.stdin.flush()
        self.stats.lines_sent += 1

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next message, or None after ``timeout`` seconds of silence."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("the agent closed its output")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        self.stats.lines_read += 1
        msg = json.loads(line)
        return msg if isinstance(msg, dict) else {}

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(timeout=TIMEOUT)
        self.sel.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


class RawReplay:
    """Plays one recorded case against fresh agent processes."""

    def __init__(self, protocol: int, cwd: str, stats: Stats) -> None:
        self.protocol = protocol
        self.cwd = cwd
        self.stats = stats
        self.sessions: dict[str, str] = {}  # recorded sessionId -> live one
        self.recorded_cwd: str | None = None

    def fix(self, value: Any) -> Any:
        """Recorded values that differ live: session IDs and the working directory."""
        if isinstance(value, dict):
            return {k: self.fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fix(v) for v in value]
        if isinstance(value, str):
            if value in self.sessions:
                return self.sessions[value]
            if value == self.recorded_cwd:
                return self.cwd
        return value

    def play(self, conn: Conn) -> None:
        agent = RawAgent(agent_command(), self.stats)
        answers = list(conn.answers)
        try:
            sent = conn.sent
            i = 0
            while i < len(sent):
                msg = sent[i]
                params = msg.get("params")
                if msg.get("method") == "session/new" and isinstance(params, dict):
                    self.recorded_cwd = params.get("cwd")
                cancel = (i + 1 < len(sent) and sent[i + 1].get("method") == "session/cancel"
                          and msg.get("method") == "session/prompt")
                agent.send(self.fix(msg))
                if "id" not in msg:
                    i += 1
                    continue
                result = self.wait(agent, msg, answers, cancel=sent[i + 1] if cancel else None)
                if msg.get("method") == "session/new" and isinstance(result, dict):
                    recorded = self._recorded_session(conn, i)
                    if recorded is not None and isinstance(result.get("sessionId"), str):
                        self.sessions[recorded] = result["sessionId"]
                if cancel or msg.get("method") in ("session/load", "session/resume"):
                    self.settle(agent, answers)
                i += 2 if cancel else 1
        finally:
            agent.close()

    def _recorded_session(self, conn: Conn, index: int) -> str | None:
        """The sessionId the recorded run got from this session/new (first later use)."""
        for later in conn.sent[index + 1:]:
            params = later.get("params")
            if (isinstance(params, dict) and isinstance(params.get("sessionId"), str)
                    and params["sessionId"] not in self.sessions):
                return str(params["sessionId"])
        return None

    def wait(self, agent: RawAgent, request: dict[str, Any], answers: list[dict[str, Any]],
             cancel: dict[str, Any] | None) -> Any:
        """Read until the request's answer (and, for a v2 prompt, the idle state)."""
        rid, method = request["id"], request.get("method")
        result: Any = None
        answered = idle = False
        v2_prompt = self.protocol >= 2 and method == "session/prompt"
        while not (answered and (idle or not v2_prompt)):
            msg = agent.receive(TIMEOUT)
            if msg is None:
                raise TimeoutError(f"raw replay: no answer to {method} within {TIMEOUT} s")
            if "method" in msg and "id" in msg:
                self.answer(agent, msg, answers)
            elif "method" in msg:
                update = (msg.get("params") or {}).get("update") or {}
                if update.get("sessionUpdate") in OUTPUT_KINDS and cancel is not None:
                    agent.send(self.fix(cancel))
                    cancel = None
                if update.get("sessionUpdate") == "state_update" and update.get("state") == "idle":
                    idle = True
            elif msg.get("id") == rid:
                answered = True
                result = msg.get("result")
                if "error" in msg:
                    idle = True
        return result

    def answer(self, agent: RawAgent, request: dict[str, Any],
               answers: list[dict[str, Any]]) -> None:
        reply = answers.pop(0) if answers else {"jsonrpc": "2.0", "error": {
            "code": -32601, "message": "not recorded"}}
        agent.send({**reply, "id": request["id"]})

    def settle(self, agent: RawAgent, answers: list[dict[str, Any]]) -> None:
        """The suite's grace window: read until GRACE seconds pass without a line."""
        self.stats.graces += 1
        while (msg := agent.receive(GRACE)) is not None:
            if "method" in msg and "id" in msg:
                self.answer(agent, msg, answers)


def raw_replay(transcripts: list[Path], stats: Stats) -> dict[str, float]:
    """Play every transcript; the wall time of each case."""
    spans: dict[str, float] = {}
    for path in transcripts:
        protocol, conns = load_transcript(path)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="acp-bench-raw-") as cwd:
            replay = RawReplay(protocol, cwd, stats)
            for conn in conns:
                replay.play(conn)
        spans[path.stem] = time.perf_counter() - t0
    return spans


def _raw_main(args: list[str]) -> int:
    """``python -m bench.live_overhead --raw DIR``: the raw driver as its own process."""
    stats = Stats()
    spans = raw_replay(sorted(Path(args[0]).glob("*.jsonl")), stats)
    print(json.dumps({"spans": spans, "spawns": stats.spawns, "graces": stats.graces,
                      "lines_read": stats.lines_read, "lines_sent": stats.lines_sent}))
    return 0


# -- measurement ------------------------------------------------------------------
def suite_spans(directory: Path) -> dict[str, float]:
    """Per case, the time from the transcript's start to its last entry (driving)."""
    spans = {}
    for path in sorted(directory.glob("*.jsonl")):
        last = None
        with open(path, encoding="utf-8") as fh:
            for last in fh:  # noqa: B007  (the last line is what is read)
                pass
        spans[path.stem] = float(json.loads(last)["t"]) if last else 0.0
    return spans


def grading_seconds(directory: Path) -> float:
    from conformance import transcript as tmod
    from conformance.checks import grade

    total = 0.0
    for path in sorted(directory.glob("*.jsonl")):
        header, entries = tmod.load(path)
        t0 = time.process_time()
        grade(entries, protocol=int(header.get("protocol", 1)))
        total += time.process_time() - t0
    return total


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--raw"]:
        return _raw_main(argv[1:])
    p = argparse.ArgumentParser(prog="python3 -m bench.live_overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="runs of each side, best kept")
    p.add_argument("--case", action="append", default=[], help="only these cases (repeatable)")
    ns = p.parse_args(argv)
    print(f"live overhead: the agent suite vs a raw driver replaying the same exchanges, "
          f"best of {ns.repeats} ({sys.executable})")
    with tempfile.TemporaryDirectory(prefix="acp-bench-live-") as tmp:
        recorded = Path(tmp) / "recorded"
        command = " ".join(agent_command())
        # -j 1: the overhead of one case at a time against a serial raw driver
        # (bench/jobs.py measures what concurrency adds).
        cases = ["-j", "1", *(a for c in ns.case for a in ("--case", c))]

        def suite() -> Sample:
            return run(conformance_cli() + ["--agent", command, *cases])

        # One run records the exchanges the raw driver replays (and the breakdown's spans).
        first = run(conformance_cli() + ["--agent", command, "--transcripts", str(recorded),
                                         *cases])
        if first.returncode != 0:
            print(f"the suite failed on the reference agent (exit {first.returncode}):\n"
                  f"{first.stdout[-3000:]}")
            return 1

        def raw() -> Sample:
            return run([sys.executable, "-m", "bench.live_overhead", "--raw", str(recorded)])

        subject, baseline = alternate(ns.repeats, suite, raw)
        if baseline.returncode != 0:
            print(f"the raw driver failed:\n{baseline.stdout[-3000:]}")
            return 1
        info = json.loads(baseline.stdout.strip().splitlines()[-1])
        spans = suite_spans(recorded)
        drive, raw_drive = sum(spans.values()), sum(info["spans"].values())
        startup = min(run(conformance_cli() + ["list"]).wall for _ in range(3))
        graded = grading_seconds(recorded)
        graces = info["graces"] * GRACE
        print(f"  {len(spans)} cases, {info['spawns']} agent processes, {info['lines_sent']} "
              f"lines sent, {info['lines_read']} lines read, {info['graces']} grace windows")
        print(f"  suite       wall {subject.wall:6.2f} s  cpu {subject.cpu:6.2f} s "
              "(the suite and its agents)")
        print(f"  raw driver  wall {baseline.wall:6.2f} s  cpu {baseline.cpu:6.2f} s")
        print(ratio_line("suite/raw-driver wall", subject.wall / baseline.wall, TARGET_RATIO))
        print(ratio_line("suite/raw-driver cpu", subject.cpu / baseline.cpu, None))
        rest = first.wall - drive - startup - graded
        print(f"where the suite's time goes (the recording run, {first.wall:.2f} s wall):")
        print(f"  driving the cases          {drive:6.2f}  (raw driver: {raw_drive:.2f}; "
              f"both wait {graces:.2f} in grace windows)")
        print(f"  start-up and case loading  {startup:6.2f}  (acp-conformance list)")
        print(f"  grading                    {graded:6.2f}  (the transcripts graded again, CPU)")
        print(f"  the rest                   {rest:6.2f}  (saving transcripts, reports, exit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
