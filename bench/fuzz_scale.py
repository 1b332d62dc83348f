"""The cost of one generated run against its floor, and what a second worker brings.

Three parts, each against a baseline measured in the same run:

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
* **Persistent mode vs ``--fresh-process``.** Runs per second of the whole command,
  one agent process serving many generated runs (the default) against a fresh
  process per run, the same budget and seed, alternated. Target: at least 3x on
  the reference agent, at least 5x on gemini-cli behind the model server
  (``--persistent-target``).

Every ``fuzz`` command's CPU is split between its own processes (the run's
process and its workers: generation, driving, grading) and the agents it
starts (bench/cpu_split.py); each figure is printed with the load average.

``--agent CMD`` (with ``--agent-env K=V`` and ``--model-server``, as ``fuzz`` takes
them) measures another agent, e.g. a real one behind the scripted model server;
the floor part needs the reference agent's recorded runs and is left out then.

    python3 -m bench.fuzz_scale                      # N=24, best of 2 (about two minutes)
    python3 -m bench.fuzz_scale --only workers --runs 100 --repeats 2
    python3 -m bench.fuzz_scale --only workers --agent "node .../gemini.js --experimental-acp" \
        --model-server --agent-env GEMINI_API_KEY=test --runs 20
    python3 -m bench.fuzz_scale --only persistent --runs 100 --repeats 2
    python3 -m bench.fuzz_scale --only persistent --reference-client --runs 60   # a client
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

from bench.common import Sample, conformance_cli, ratio_line, run
from bench.cpu_split import Split, run_split
from bench.live_overhead import agent_command

TARGET_FLOOR = 1.5
TARGET_WORKERS = 1.6
TARGET_PERSISTENT = 3.0  # the reference agent; 5.0 for gemini-cli (--persistent-target)


def record(directory: Path, runs: int, seed: int) -> int:
    """The generated runs of ``fuzz --max-examples runs --seed seed``, one transcript
    each, as the fuzz command makes them (in this process, the same engine)."""
    from conformance.fuzz import agent_machine
    from conformance.fuzz.agent_fuzz import run_agent_fuzz
    from conformance.fuzz.agent_machine import AgentFuzzConfig
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
        # a fresh process per run: the raw driver plays each recorded run on its own
        run_agent_fuzz(AgentFuzzConfig(target, runs_per_process=1),
                       get_effort("dev", max_examples=runs), seed)
    finally:
        agent_machine.AgentMachine.teardown = teardown  # type: ignore[method-assign]
    return len(saved)


def fuzz(out: Path, runs: int, seed: int, workers: int, agent: list[str] | None = None,
         extra: tuple[str, ...] = ()) -> tuple[Sample, Split]:
    """``fuzz`` to its end: its sample (stdout: the JSON report's ``fuzz`` part) and the
    split of its CPU. ``agent``: more ``fuzz`` options naming another agent; ``extra``:
    more options (``--fresh-process``)."""
    report = out / f"fuzz-w{workers}.json"
    target = agent or ["--agent", " ".join(agent_command())]
    # Shrinking is left out (a budget too short for a second replay): it runs in one
    # process after generation, whatever the workers, and is not what is measured here.
    sample, split = run_split(conformance_cli() + [
        "fuzz", *target, "--max-examples", str(runs), "--shrink-budget", "0.01",
        "--seed", str(seed), "--no-save", "--workers", str(workers), "--out", str(out),
        "--json", str(report), *extra])
    data = json.loads(report.read_text("utf-8")) if report.exists() else {}
    return Sample(sample.wall, sample.cpu, sample.max_rss_mb, sample.returncode,
                  json.dumps(data.get("fuzz", {}))), split


def _rate(sample: Sample) -> float:
    runs = json.loads(sample.stdout or "{}").get("runs", 0)
    return runs / sample.wall if sample.wall else 0.0


def workers_part(work: Path, runs: int, seed: int, repeats: int,
                 agent: list[str] | None) -> None:
    """``--workers 1`` and ``--workers 2`` alternated; each pass printed with its load
    average and CPU split, then the best rate of each and their ratio."""
    best: dict[int, tuple[Sample, Split]] = {}
    for i in range(max(1, repeats)):
        for workers in (1, 2):
            load = os.getloadavg()[0]
            sample, split = fuzz(work, runs, seed, workers, agent)
            made = json.loads(sample.stdout or "{}").get("runs", 0)
            print(f"  pass {i + 1} --workers {workers}  {made} runs in {sample.wall:6.2f} s wall, "
                  f"{sample.cpu:6.2f} s cpu: {_rate(sample):.2f} runs/s, "
                  f"{sample.cpu / made if made else 0.0:.3f} s cpu a run (exit "
                  f"{sample.returncode}, load {load:.1f})", flush=True)
            print(f"      {split.line()}", flush=True)
            if workers not in best or _rate(sample) > _rate(best[workers][0]):
                best[workers] = (sample, split)
    rates = []
    for workers in (1, 2):
        sample, split = best[workers]
        runs_made = json.loads(sample.stdout or "{}").get("runs", 0)
        rates.append(_rate(sample))
        per_run = sample.cpu / runs_made if runs_made else 0.0
        ours = split.ours / runs_made if runs_made else 0.0
        print(f"  --workers {workers}  {runs_made} runs in {sample.wall:6.2f} s wall, "
              f"{sample.cpu:6.2f} s cpu: {rates[-1]:.2f} runs/s; a run {per_run:.3f} s cpu, "
              f"of it ours {ours:.3f} s (exit {sample.returncode})")
    one_cpu = best[1][0].cpu / best[1][0].wall if best[1][0].wall else 0.0
    print(f"  --workers 1 keeps {one_cpu:.2f} cores busy: on {os.cpu_count()} cores "
          f"a second worker can bring at most {(os.cpu_count() or 1) / one_cpu if one_cpu else 0:.2f}x")
    speedup = rates[1] / rates[0] if rates[0] else 0.0
    # a speed-up: more is better, so the line states its inverse against 1/1.6
    print(ratio_line("workers-1/workers-2 seconds per run", 1 / speedup if speedup
                     else 0.0, round(1 / TARGET_WORKERS, 3),
                     f"--workers 2 makes {speedup:.2f}x the runs per second"))


def persistent_part(work: Path, runs: int, seed: int, repeats: int,
                    agent: list[str] | None, target: float) -> None:
    """``fuzz --fresh-process`` (the baseline) and ``fuzz`` (persistent) alternated; each
    pass printed with its load average and CPU split, then the best rate of each and
    their ratio."""
    sides = {"fresh": ("--fresh-process",), "persistent": ()}
    best: dict[str, tuple[Sample, Split]] = {}
    for i in range(max(1, repeats)):
        for name, extra in sides.items():
            load = os.getloadavg()[0]
            sample, split = fuzz(work, runs, seed, 1, agent, extra)
            data = json.loads(sample.stdout or "{}")
            made = data.get("runs", 0)
            print(f"  pass {i + 1} {name:10s}  {made} runs in {sample.wall:6.2f} s wall, "
                  f"{sample.cpu:6.2f} s cpu: {_rate(sample):.2f} runs/s, "
                  f"{sample.cpu / made if made else 0.0:.3f} s cpu a run (exit "
                  f"{sample.returncode}, load {load:.1f})", flush=True)
            print(f"      {split.line()}", flush=True)
            if name not in best or _rate(sample) > _rate(best[name][0]):
                best[name] = (sample, split)
    rates: dict[str, float] = {}
    for name in sides:
        sample, split = best[name]
        made = json.loads(sample.stdout or "{}").get("runs", 0)
        rates[name] = _rate(sample)

        def per(x: float, made: int = made) -> float:
            return x / made if made else 0.0

        print(f"  {name:10s}  {made} runs in {sample.wall:6.2f} s wall, {sample.cpu:6.2f} s "
              f"cpu: {rates[name]:.2f} runs/s; a run {per(sample.cpu):.3f} s cpu: ours "
              f"{per(split.ours):.3f} s, agents {per(split.roles.get('agent', 0.0)):.3f} s "
              f"({split.processes.get('agent', 0) / made if made else 0.0:.2f} processes), "
              f"not logged "
              f"{per(split.unlogged):.3f} s")
    speedup = rates["persistent"] / rates["fresh"] if rates["fresh"] else 0.0
    print(ratio_line("persistent/fresh-process seconds per run", 1 / speedup if speedup
                     else 0.0, round(1 / target, 3),
                     f"persistent mode makes {speedup:.2f}x the runs per second"))


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
    p.add_argument("--only", choices=["floor", "workers", "persistent"], help="one part only")
    p.add_argument("--persistent-target", type=float, default=TARGET_PERSISTENT,
                   help="the runs/s ratio persistent mode must reach (default 3: the "
                        "reference agent; 5 for gemini-cli)")
    p.add_argument("--agent", metavar="CMD", help="another agent (default: the reference "
                   "agent); the floor part is then left out")
    p.add_argument("--agent-env", metavar="K=V", action="append", default=[],
                   help="its environment, as fuzz takes it (repeatable)")
    p.add_argument("--model-server", action="store_true",
                   help="serve the scripted model APIs to it, as fuzz --model-server")
    p.add_argument("--protocol", choices=["1", "2", "both"], default="both")
    p.add_argument("--timeout", type=float, help="fuzz --timeout (a slow-starting agent)")
    p.add_argument("--reference-client", action="store_true",
                   help="the persistent part against the bundled reference client through "
                        "its pty profile (client fuzzing: each run a turn of a kept client)")
    ns = p.parse_args(argv)
    agent: list[str] | None = None
    if ns.agent or ns.model_server or ns.agent_env or ns.protocol != "both" or ns.timeout:
        agent = ["--agent", ns.agent or " ".join(agent_command()), "--protocol", ns.protocol]
        if ns.timeout:
            agent += ["--timeout", str(ns.timeout)]
        for pair in ns.agent_env:
            agent += ["--agent-env", pair]
        if ns.model_server:
            agent.append("--model-server")
    label = ns.agent or "the reference agent"
    if ns.reference_client:
        from conformance.client.reference import PROFILE_YAML
        from conformance.client.runner import reference_client

        kept = tempfile.TemporaryDirectory(prefix="acp-bench-profile-")  # gone at exit
        profile = Path(kept.name) / "reference.yaml"
        profile.write_text(PROFILE_YAML, encoding="utf-8")
        agent = ["--client", reference_client()[0], "--client-profile", str(profile),
                 "--protocol", ns.protocol] + (["--timeout", str(ns.timeout)] if ns.timeout
                                               else [])
        label, ns.only = "the reference client", "persistent"
    print(f"fuzz scale: {ns.runs} generated runs against {label}, seed {ns.seed}, best of "
          f"{ns.repeats}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="acp-bench-fuzz-scale-") as tmp:
        work = Path(tmp)
        if ns.only in (None, "floor") and agent is None:
            recorded = work / "recorded"
            recorded.mkdir()
            count = record(recorded, ns.runs, ns.seed)
            subjects: list[Sample] = []
            floors: list[Sample] = []
            for _ in range(max(1, ns.repeats)):  # alternated, the best of each kept
                subjects.append(fuzz(work, ns.runs, ns.seed, 1, None, ("--fresh-process",))[0])
                floors.append(run([sys.executable, "-m", "bench.fuzz_scale", "--raw",
                                   str(recorded)]))
            subject = min(subjects, key=lambda s: s.wall)
            baseline = min(floors, key=lambda s: s.wall)
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
            workers_part(work, ns.runs, ns.seed, ns.repeats, agent)
        if ns.only in (None, "persistent"):
            persistent_part(work, ns.runs, ns.seed, ns.repeats, agent, ns.persistent_target)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
