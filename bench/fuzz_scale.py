"""The cost of one generated run against its floor, and what a second worker brings.

Two parts, each against a baseline measured in the same run:

* **One generated run vs its floor.** The subject: ``acp-conformance fuzz --agent
  <reference agent> --max-examples N --seed S --no-save`` from start to exit (all of
  it: start-up, generation, grading, the reports), divided by the runs it made. The
  floor: the same runs' exchanges played by the raw driver of bench/live_overhead.py
  (the agent processes they start, the client lines they send, waiting for the same
  answers, the pings included, but none of its grace windows: the fuzz driver waits
  for a ping's answer instead; plain pipes and ``json``, no recording, no grading, no
  Hypothesis). The runs are recorded once, in this process, with the same seed and
  effort (each generated run's transcript kept at its end). Target: at most 1.5x.
* **``--workers 2`` vs ``--workers 1``.** Runs per second of the whole command (the
  JSON report's ``fuzz.runs`` over the command's wall time, workers' start-up
  included), the same budget and seed. Target: at least 1.6x on 2 idle cores.

    python3 -m bench.fuzz_scale                      # N=24, best of 2 (about two minutes)
    python3 -m bench.fuzz_scale --runs 6 --repeats 1 # a smoke run

It prints lines and ratios only; it writes nothing. On a shared machine the
ratios move with the load: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench.common import Sample, alternate, conformance_cli, ratio_line, run
from bench.live_overhead import agent_command

TARGET_FLOOR = 1.5
TARGET_WORKERS = 1.6


def record(directory: Path, runs: int, seed: int) -> int:
    """The generated runs of ``fuzz --max-examples runs --seed seed``, one transcript
    each, as the fuzz command makes them (in this process, the same engine)."""
    from conformance.fuzz import agent_machine
    from conformance.fuzz.agent_machine import AgentFuzzConfig, run_agent_fuzz
    from conformance.fuzz.player import AgentTarget
    from conformance.fuzz.settings import get_effort

    saved: list[int] = []
    teardown = agent_machine.AgentMachine.teardown

    def keep(self: agent_machine.AgentMachine) -> None:
        teardown(self)
        if self.transcript is not None:
            self.transcript.save(directory / f"run{len(saved):04d}.jsonl")
            saved.append(1)

    agent_machine.AgentMachine.teardown = keep  # type: ignore[method-assign]
    try:
        target = AgentTarget(agent_command(), "reference agent", {}, 10.0)
        run_agent_fuzz(AgentFuzzConfig(target), get_effort("dev", max_examples=runs), seed)
    finally:
        agent_machine.AgentMachine.teardown = teardown  # type: ignore[method-assign]
    return len(saved)


def fuzz(out: Path, runs: int, seed: int, workers: int) -> Sample:
    report = out / f"fuzz-w{workers}.json"
    sample = run(conformance_cli() + [
        "fuzz", "--agent", " ".join(agent_command()), "--max-examples", str(runs),
        "--seed", str(seed), "--no-save", "--workers", str(workers), "--out", str(out),
        "--json", str(report)])
    data = json.loads(report.read_text("utf-8")) if report.exists() else {}
    return Sample(sample.wall, sample.cpu, sample.max_rss_mb, sample.returncode,
                  json.dumps(data.get("fuzz", {})))


def _raw_main(args: list[str]) -> int:
    """``python -m bench.fuzz_scale --raw DIR``: the raw driver of bench/live_overhead.py
    without its grace windows (the fuzz driver waits for the answer to a ping after each
    step instead, and the pings are among the recorded exchanges it plays)."""
    from bench import live_overhead

    live_overhead.RawReplay.settle = lambda self, agent, answers: None  # type: ignore[method-assign]
    return live_overhead._raw_main(args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--raw"]:
        return _raw_main(argv[1:])
    p = argparse.ArgumentParser(prog="python3 -m bench.fuzz_scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=24, help="generated runs per command")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2, help="runs of each side, best kept")
    p.add_argument("--only", choices=["floor", "workers"], help="one part only")
    ns = p.parse_args(argv)
    print(f"fuzz scale: {ns.runs} generated runs against the reference agent, seed "
          f"{ns.seed}, best of {ns.repeats}; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="acp-bench-fuzz-scale-") as tmp:
        work = Path(tmp)
        if ns.only in (None, "floor"):
            recorded = work / "recorded"
            recorded.mkdir()
            count = record(recorded, ns.runs, ns.seed)

            def plain() -> Sample:
                return fuzz(work, ns.runs, ns.seed, 1)

            def floor() -> Sample:
                return run([sys.executable, "-m", "bench.fuzz_scale", "--raw", str(recorded)])

            subject, baseline = alternate(ns.repeats, plain, floor)
            if baseline.returncode != 0 or subject.returncode != 0:
                print(f"a side failed: fuzz exit {subject.returncode}, raw driver exit "
                      f"{baseline.returncode}\n{baseline.stdout[-2000:]}")
                return 1
            info = json.loads(baseline.stdout.strip().splitlines()[-1])
            made = json.loads(subject.stdout or "{}").get("runs", count)
            per_run, per_floor = subject.wall / made, baseline.wall / count
            print(f"  fuzz        {made} runs in {subject.wall:6.2f} s wall, "
                  f"{subject.cpu:6.2f} s cpu: {per_run:.3f} s a run")
            print(f"  raw driver  {count} runs in {baseline.wall:6.2f} s wall, "
                  f"{baseline.cpu:6.2f} s cpu: {per_floor:.3f} s a run ({info['spawns']} "
                  f"agent processes, {info['lines_sent']} lines sent, {info['graces']} grace "
                  "windows)")
            print(ratio_line("fuzz/floor per run (wall)", per_run / per_floor, TARGET_FLOOR))
        if ns.only in (None, "workers"):
            def one() -> Sample:
                return fuzz(work, ns.runs, ns.seed, 1)

            def two() -> Sample:
                return fuzz(work, ns.runs, ns.seed, 2)

            w1, w2 = alternate(ns.repeats, one, two)
            rates = []
            for name, s in (("--workers 1", w1), ("--workers 2", w2)):
                runs = json.loads(s.stdout or "{}").get("runs", 0)
                rates.append(runs / s.wall if s.wall else 0.0)
                print(f"  {name}  {runs} runs in {s.wall:6.2f} s wall, {s.cpu:6.2f} s cpu: "
                      f"{rates[-1]:.2f} runs/s (exit {s.returncode})")
            speedup = rates[1] / rates[0] if rates[0] else 0.0
            # a speed-up: more is better, so the line states its inverse against 1/1.6
            print(ratio_line("workers-1/workers-2 seconds per run", 1 / speedup if speedup
                             else 0.0, round(1 / TARGET_WORKERS, 3),
                             f"--workers 2 makes {speedup:.2f}x the runs per second"))
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
