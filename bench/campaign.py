"""A HypoFuzz campaign against the plain ``fuzz`` command, on the same broken agent.

Two parts, every command bounded by ``--cap`` seconds:

* **Time to the first confirmed finding.** ``hypothesis fuzz -n 2 -- --acp-fuzz
  --acp-agent FIXTURE --acp-regressions DIR`` against ``acp-conformance fuzz
  --agent FIXTURE --max-failures 1 --regressions DIR`` with the same effort's
  example budget (``--examples``), each started from nothing (no database). A
  finding is confirmed when its regression file is written: shrunk by replaying
  steps, so it reproduces. The clock runs from the command's start (HypoFuzz's
  collection and worker start-up included) until the file appears; the
  campaign is then stopped. Plain fuzz is repeated over ``--seeds``; HypoFuzz,
  which takes no seed, as many times.
* **Executions per second** of a HypoFuzz campaign against the reference agent
  (nothing to find) with 1 and 2 workers, for ``--seconds`` each, counted by the
  campaign's own counter (``$ACP_CAMPAIGN_COUNT``: a line per execution) after
  the first execution, so start-up is left out.

    python3 -m bench.campaign                       # about three minutes
    python3 -m bench.campaign --quick               # a smoke run

It prints lines and ratios only; ``--json PATH`` keeps them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, env, ratio_line
from conformance.transport.process import end_group

REFERENCE = f"{sys.executable} -m conformance.reference.agent"


def fixture(name: str) -> str:
    return f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / name}.py"


def hypothesis_cli() -> list[str]:
    script = Path(sys.executable).with_name("hypothesis")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from hypothesis.extra.cli import main; main()"]


def until_file(argv: list[str], folder: Path, cap: float, cwd: Path,
               extra: dict[str, str] | None = None) -> float | None:
    """Seconds from start until a regression file appears in ``folder`` (None: not within
    ``cap``, or the command ended without one)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env(extra), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while time.monotonic() - start < cap:
            if folder.is_dir() and any(folder.glob("*.jsonl")):
                return time.monotonic() - start
            if proc.poll() is not None:
                return (time.monotonic() - start
                        if folder.is_dir() and any(folder.glob("*.jsonl")) else None)
            time.sleep(0.1)
        return None
    finally:
        end_group(proc)


def campaign_argv(workers: int, agent: str, protocol: str, regs: Path, effort: str
                  ) -> list[str]:
    return [*hypothesis_cli(), "fuzz", "-n", str(workers), "--no-dashboard", "--",
            "--acp-fuzz", "--acp-agent", agent, "--acp-protocol", protocol,
            "--acp-fuzz-effort", effort, "--acp-regressions", str(regs), "-p",
            "no:cacheprovider"]


def first_finding(agent_name: str, protocol: str, seeds: list[int], cap: float,
                  effort: str, examples: int) -> dict[str, Any]:
    agent = fixture(agent_name)
    plain: list[float | None] = []
    hypofuzz: list[float | None] = []
    for seed in seeds:  # alternate the two, so the machine's load falls on both alike
        with tempfile.TemporaryDirectory(prefix="bench-campaign-") as tmp:
            t = Path(tmp)
            plain.append(until_file(
                [sys.executable, "-m", "conformance", "fuzz", "--agent", agent, "--protocol",
                 protocol, "--max-examples", str(examples), "--seed", str(seed),
                 "--max-failures", "1", "--regressions", str(t / "plain")],
                t / "plain", cap, t))
            hypofuzz.append(until_file(campaign_argv(2, agent, protocol, t / "hf", effort),
                                       t / "hf", cap, t))
        print(f"  seed {seed}: plain fuzz {_s(plain[-1])}, HypoFuzz -n 2 {_s(hypofuzz[-1])}",
              flush=True)
    return {"agent": agent_name, "protocol": protocol, "plain": plain, "hypofuzz": hypofuzz}


def executions(workers: int, seconds: float, protocol: str, effort: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-campaign-") as tmp:
        t = Path(tmp)
        count = t / "count"
        proc = subprocess.Popen(campaign_argv(workers, REFERENCE, protocol, t / "regs", effort),
                                cwd=t, env=env({"ACP_CAMPAIGN_COUNT": str(count)}),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not _lines(count):
                time.sleep(0.05)
            start, first = time.monotonic(), _lines(count)
            time.sleep(seconds)
            done, elapsed = _lines(count) - first, time.monotonic() - start
        finally:
            end_group(proc)
    return {"workers": workers, "executions": done, "seconds": elapsed,
            "per_second": done / elapsed if elapsed else 0.0}


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def _s(value: float | None) -> str:
    return "not found" if value is None else f"{value:.1f} s"


def _median(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.campaign", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--agent", default="update_after_cancel",
                   help="the broken agent fixture (default update_after_cancel)")
    p.add_argument("--protocol", default="2", choices=["1", "2"])
    p.add_argument("--seeds", default="1,2,3", help="plain fuzz seeds (as many HypoFuzz runs)")
    p.add_argument("--effort", default="ci", help="the effort (examples per run) of both")
    p.add_argument("--cap", type=float, default=60.0, help="longest any command may run")
    p.add_argument("--seconds", type=float, default=40.0,
                   help="how long each executions-per-second campaign is counted")
    p.add_argument("--only", choices=["first", "rates"], help="one of the two parts")
    p.add_argument("--quick", action="store_true", help="one seed, short campaigns")
    p.add_argument("--json", type=Path, metavar="PATH", help="keep the numbers here")
    ns = p.parse_args(argv)
    if find_spec("hypofuzz") is None:
        print("HypoFuzz is not installed (pip install hypofuzz): nothing to measure")
        return 2
    from conformance.fuzz.settings import get_effort

    seeds = [int(s) for s in ns.seeds.split(",")][: 1 if ns.quick else None]
    cap, seconds = (20.0, 5.0) if ns.quick else (ns.cap, ns.seconds)
    examples = get_effort(ns.effort).max_examples
    first: dict[str, Any] = {}
    rates: list[dict[str, Any]] = []
    if ns.only != "rates":
        print(f"time to the first confirmed finding: {ns.agent} v{ns.protocol}, effort "
              f"{ns.effort} ({examples} examples), cap {cap:.0f} s", flush=True)
        first = first_finding(ns.agent, ns.protocol, seeds, cap, ns.effort, examples)
        plain, hypofuzz = _median(first["plain"]), _median(first["hypofuzz"])
        print(f"median: plain fuzz {_s(plain)}, HypoFuzz -n 2 {_s(hypofuzz)}")
        if plain and hypofuzz:
            print(ratio_line("first confirmed finding, HypoFuzz -n 2 / plain fuzz",
                             hypofuzz / plain, None))
    if ns.only != "first":
        print(f"executions per second, HypoFuzz against the reference agent, {seconds:.0f} s "
              "each", flush=True)
        rates = [executions(n, seconds, ns.protocol, ns.effort) for n in (1, 2)]
        for r in rates:
            print(f"  -n {r['workers']}: {r['executions']} executions in {r['seconds']:.1f} s, "
                  f"{r['per_second']:.2f}/s")
        if rates[0]["per_second"]:
            print(ratio_line("executions per second, -n 2 / -n 1",
                             rates[1]["per_second"] / rates[0]["per_second"], None))
    if ns.json:
        ns.json.write_text(json.dumps({"first": first, "rates": rates}, indent=1) + "\n",
                           encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
