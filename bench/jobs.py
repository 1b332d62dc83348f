"""Cases in parallel: the whole suite at ``-j N`` against ``-j 1``, measured in one run.

Three targets, each run alternately at ``-j 1`` (the baseline) and at the
subject's ``-j``, best wall time of ``--repeats``:

- ``slow_start``: the reference agent behind a one-second start (it answers
  ``initialize`` after 1 s, like a Node agent loading), ``-j 4`` (target: under
  0.4x the wall time of ``-j 1``);
- the reference agent itself, ``-j auto`` (the number of cores);
- a real agent of the interop matrix (``--real codex-acp``, installed with
  ``tox -e interop -- --install-only -k codex-acp``) through the scripted model
  server, ``-j 4``, on the interop run's own options; skipped with one line when it
  is not installed.

Every pair must reach the same verdict with the same number of fails.

    python3 -m bench.jobs
    python3 -m bench.jobs --quick      # one repeat, a few cases (smoke test)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from bench.common import REPO_ROOT, Sample, conformance_cli, ratio_line, run

SLOW = REPO_ROOT / "fixtures" / "hostile" / "agents" / "slow_start.py"
QUICK_CASES = ["ids-across-turns", "wire-shapes", "prompt-lifecycle", "ids-across-sessions"]


def measure(argv: list[str], jobs: str, out: Path, extra_env: dict[str, str] | None = None
            ) -> tuple[Sample, dict[str, object]]:
    report = out / f"j{jobs}.json"
    sample = run([*argv, "-j", jobs, "--json", str(report)], cwd=out, extra_env=extra_env)
    summary = json.loads(report.read_text("utf-8"))["summary"] if report.exists() else {}
    return sample, summary


def compare(name: str, argv: list[str], subject: str, repeats: int, limit: float | None,
            out: Path, extra_env: dict[str, str] | None = None) -> bool:
    """Best of ``repeats`` at -j 1 and at -j ``subject``; prints both and the ratio."""
    best: dict[str, Sample] = {}
    summaries: dict[str, dict[str, object]] = {}
    for _ in range(repeats):
        for jobs in ("1", subject):
            sample, summary = measure(argv, jobs, out, extra_env)
            summaries[jobs] = summary
            if jobs not in best or sample.wall < best[jobs].wall:
                best[jobs] = sample
    for jobs in ("1", subject):
        s = best[jobs]
        print(f"  {name} -j {jobs:<5} wall {s.wall:7.2f} s  cpu {s.cpu:6.2f} s  exit "
              f"{s.returncode}  {summaries[jobs]}")
    # The verdict and the fails: a real agent's timing-dependent warns (how fast it exits
    # after stdin closes: TARGET/shutdown) vary between two serial runs as well.
    same = all(summaries["1"].get(k) == summaries[subject].get(k) for k in ("verdict", "fail")
               ) and best["1"].returncode == best[subject].returncode
    print(f"  {name}: same verdict at -j 1 and -j {subject}: {'yes' if same else 'NO'}")
    print(ratio_line(f"{name} -j {subject} / -j 1 wall", best[subject].wall / best["1"].wall,
                     limit, f"{os.cpu_count()} cores"))
    return same


def real_agent(name: str, out: Path, quick: bool) -> tuple[list[str], str] | None:
    """The conformance command of the interop target ``name``'s suite run, or None (why
    printed) when the target is not installed."""
    sys.path.insert(0, str(REPO_ROOT / "interop"))
    import matrix as interop  # type: ignore[import-not-found]  # interop/matrix.py

    target = interop.load_target(REPO_ROOT / "interop" / "targets" / f"{name}.yaml")
    inst = interop.Installer(interop.cache_root(None), verbose=False)
    if not (inst.target_dir(target) / ".installed").exists():
        print(f"skip: {name} is not installed (tox -e interop -- --install-only -k {name})")
        return None
    suite = next(r for r in target.runs if r.name == "suite")
    out.mkdir(parents=True, exist_ok=True)
    if quick:
        suite.cases = QUICK_CASES[:2]
    argv = interop.conformance_command(target, suite, inst, out)
    drop = argv.index("--json")  # measure() names the report
    return argv[:drop] + argv[drop + 2:], suite.protocol


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.jobs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="a few cases, one repeat")
    p.add_argument("--real", default="codex-acp", help="interop target (default codex-acp; "
                                                       "'none' skips it)")
    ns = p.parse_args(argv)
    repeats = 1 if ns.quick else ns.repeats
    cases = [a for c in QUICK_CASES for a in ("--case", c)] if ns.quick else []
    same = True
    with tempfile.TemporaryDirectory(prefix="acp-bench-jobs-") as tmp:
        out = Path(tmp)
        base = [*conformance_cli(), "--no-color", *cases]
        print(f"cases in parallel ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
        same &= compare("slow-start agent", [*base, "--agent", f"{sys.executable} {SLOW}"],
                        "4", repeats, 0.4, out, {"SLOW_START_SECONDS": "1"})
        same &= compare("reference agent",
                        [*base, "--agent", f"{sys.executable} -m conformance.reference.agent"],
                        "auto", repeats, None, out)
        if ns.real != "none":
            found = real_agent(ns.real, out / "real", ns.quick)
            if found is not None:
                command, _ = found
                same &= compare(ns.real, command, "4", repeats, None, out / "real")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
