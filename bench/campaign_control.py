"""Why a HypoFuzz execution costs more than a plain generated run: a control.

Four ways of running the same agent state machine against the reference agent,
each for ``--seconds`` (the first execution's start-up left out), every
generated run logged by ``bench.campaign_probe`` (its steps, wall time and the
harness process's CPU time):

* ``engine``: the plain engine of ``acp-conformance fuzz`` (in a process of its own);
* ``pytest``: the campaign's test under plain Hypothesis (``pytest --acp-fuzz``):
  the plugin's path, Hypothesis's own input distribution, no HypoFuzz;
* ``hypofuzz``: ``hypothesis fuzz -n 1 -- --acp-fuzz``: HypoFuzz's executor, its
  input distribution and its coverage tracing;
* ``hypofuzz-notrace``: the same with HypoFuzz's coverage collector emptied
  (``$ACP_BENCH_NO_TRACE``): its executor and inputs, no tracing;
* ``hypofuzz-before``: HypoFuzz with the campaign grading under its tracer, as it
  did before grading lifted the tracer (``$ACP_BENCH_TRACE_GRADING``).

Then the **replay control**: up to ``--replay`` step lists of the ``engine`` runs
and as many of the ``hypofuzz`` runs, played again by the plain player
(``conformance.fuzz.player.play``, graded once, no Hypothesis, no tracing),
alternated. Equal replay times mean the inputs cost the same, so what
HypoFuzz adds is its executor or its tracing; unequal ones measure what its
inputs cost.

    python3 -m bench.campaign_control                 # about five minutes
    python3 -m bench.campaign_control --seconds 8 --replay 3   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from bench.campaign import REFERENCE, hypothesis_cli
from bench.campaign_probe import LOG_ENV, NO_TRACE_ENV, TRACE_GRADING_ENV
from bench.common import env, ratio_line
from conformance.transport.process import end_group

MODES = ("engine", "pytest", "hypofuzz", "hypofuzz-notrace", "hypofuzz-before")


def mode_argv(mode: str, protocol: str) -> list[str]:
    acp = ["--acp-fuzz", "--acp-agent", REFERENCE, "--acp-protocol", protocol,
           "--acp-fuzz-effort", "deep", "-p", "bench.campaign_probe", "-p", "no:cacheprovider"]
    if mode == "engine":
        return [sys.executable, "-m", "bench.campaign_control", "--engine", protocol]
    if mode == "pytest":
        return [sys.executable, "-m", "pytest", "-q", *acp]
    return [*hypothesis_cli(), "fuzz", "-n", "1", "--no-dashboard", "--", *acp]


def campaign(mode: str, seconds: float, protocol: str) -> list[dict[str, Any]]:
    """The runs one mode made in ``seconds`` after its first run ended."""
    with tempfile.TemporaryDirectory(prefix="bench-control-") as tmp:
        log = Path(tmp) / "runs.jsonl"
        extra = {LOG_ENV: str(log)}
        if mode == "hypofuzz-notrace":
            extra[NO_TRACE_ENV] = "1"
        if mode == "hypofuzz-before":
            extra[TRACE_GRADING_ENV] = "1"
        proc = subprocess.Popen(mode_argv(mode, protocol), cwd=tmp, env=env(extra),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not _runs(log) and proc.poll() is None:
                time.sleep(0.05)
            first = len(_runs(log))
            time.sleep(seconds)
            runs = _runs(log)[first:]
        finally:
            end_group(proc)
    return runs


def _runs(log: Path) -> list[dict[str, Any]]:
    try:
        lines = log.read_text("utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a line being written
    return out


def shape(steps: list[Any]) -> dict[str, int]:
    """What a run asked: prompts, long uncancelled ones, cancelled ones, restarts."""
    from conformance.agent.steps import LONG_TEXT

    prompts = [s["prompt"] for s in steps if isinstance(s, dict) and "prompt" in s]
    return {"steps": len(steps), "prompts": len(prompts),
            "cancelled": sum(1 for p in prompts if "cancel_after" in p),
            "long_uncancelled": sum(1 for p in prompts if p.get("text") == LONG_TEXT
                                    and "cancel_after" not in p),
            "restarts": sum(1 for s in steps if s == "restart")}


def summary(mode: str, runs: list[dict[str, Any]], seconds: float) -> str:
    if not runs:
        return f"  {mode:17} no run logged"
    shapes = [shape(r["steps"]) for r in runs]

    def mean(key: str) -> float:
        return statistics.mean(s[key] for s in shapes)

    return (f"  {mode:17} {len(runs):4} runs, {len(runs) / seconds:5.2f}/s; a run: wall "
            f"{statistics.mean(r['wall'] for r in runs):5.3f} s, harness cpu "
            f"{statistics.mean(r['cpu'] for r in runs):5.3f} s, {mean('steps'):4.1f} steps, "
            f"{mean('prompts'):3.1f} prompts ({mean('cancelled'):3.1f} cancelled, "
            f"{mean('long_uncancelled'):3.1f} long uncancelled), {mean('restarts'):3.1f} restarts")


def replay(sets: dict[str, list[dict[str, Any]]], limit: int) -> dict[str, list[float]]:
    """Play each set's step lists with the plain player, alternating sets; wall per run."""
    from conformance.fuzz.grading import graded
    from conformance.fuzz.player import AgentTarget, Spawner, play
    from conformance.grading import Scope

    target = AgentTarget(REFERENCE.split(), "reference agent", {}, 10.0)
    times: dict[str, list[float]] = {name: [] for name in sets}
    with tempfile.TemporaryDirectory(prefix="bench-control-") as cwd:
        spawner = Spawner(target.command, timeout=target.timeout, prespawn=True)
        try:
            for i in range(limit):
                for name, runs in sets.items():
                    if i >= len(runs):
                        continue
                    run = runs[i]
                    start = time.perf_counter()
                    played = play(target, run["protocol"], run["steps"], scope=Scope("agent"),
                                  cwd=cwd, spawner=spawner, wait_exit=False)
                    graded(played.transcript)
                    times[name].append(time.perf_counter() - start)
        finally:
            spawner.close()
    return times


def _engine_main(protocol: str) -> int:
    """``--engine P``: the plain engine in this process, runs logged by the probe."""
    from bench import campaign_probe
    from conformance.fuzz.agent_fuzz import run_agent_fuzz
    from conformance.fuzz.agent_machine import AgentFuzzConfig
    from conformance.fuzz.player import AgentTarget
    from conformance.fuzz.settings import get_effort

    campaign_probe.pytest_configure(None)
    target = AgentTarget(REFERENCE.split(), "reference agent", {}, 10.0)
    run_agent_fuzz(AgentFuzzConfig(target, protocols=(int(protocol),)),
                   get_effort("deep", max_examples=100_000), 1)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--engine"]:
        return _engine_main(argv[1])
    p = argparse.ArgumentParser(prog="python3 -m bench.campaign_control",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="how long each mode is logged")
    p.add_argument("--protocol", default="2", choices=["1", "2"])
    p.add_argument("--replay", type=int, default=20, help="runs of each set replayed")
    p.add_argument("--modes", default=",".join(MODES), help="which modes, comma-separated")
    ns = p.parse_args(argv)
    modes = [m for m in ns.modes.split(",") if m]
    if any(m.startswith("hypofuzz") for m in modes) and find_spec("hypofuzz") is None:
        print("HypoFuzz is not installed (pip install hypofuzz): its modes are left out")
        modes = [m for m in modes if not m.startswith("hypofuzz")]
    print(f"campaign control: reference agent, v{ns.protocol}, {ns.seconds:.0f} s a mode; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    logged: dict[str, list[dict[str, Any]]] = {}
    for mode in modes:
        logged[mode] = campaign(mode, ns.seconds, ns.protocol)
        print(summary(mode, logged[mode], ns.seconds) + f"  (load {os.getloadavg()[0]:.1f})",
              flush=True)
    rate = {m: len(r) / ns.seconds for m, r in logged.items()}
    if rate.get("engine") and "hypofuzz" in rate:
        print(ratio_line("runs per second, engine / hypofuzz",
                         rate["engine"] / rate["hypofuzz"] if rate["hypofuzz"] else 0.0, 1.5))
    for mode in ("pytest", "hypofuzz-notrace", "hypofuzz-before"):
        if rate.get(mode) and rate.get("hypofuzz"):
            print(ratio_line(f"runs per second, {mode} / hypofuzz",
                             rate[mode] / rate["hypofuzz"], None))
    sets = {m: logged[m] for m in ("engine", "hypofuzz") if logged.get(m)}
    if len(sets) == 2 and ns.replay > 0:
        times = replay(sets, ns.replay)
        for name, t in times.items():
            print(f"  replayed {name:9} inputs: {len(t)} runs, {statistics.mean(t):.3f} s a run "
                  "(plain player, no tracing)")
        if times["engine"] and times["hypofuzz"]:
            print(ratio_line("replay of hypofuzz's inputs / replay of the engine's inputs",
                             statistics.mean(times["hypofuzz"])
                             / statistics.mean(times["engine"]), None))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
