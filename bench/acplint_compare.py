"""Against the only peer: acplint and this suite, one run each, against the same agent.

acplint (the ACP linter on the package index) is installed into a throwaway
virtual environment in a temp folder, never into this checkout's environment.
Both tools then test the bundled reference agent (``python -m
conformance.reference.agent``, which echoes the prompt and streams a reply),
each with its defaults, and the benchmark prints the time to a verdict of each
and their ratio. acplint waits fixed windows for notifications; this suite
waits for messages. When acplint does not install (no network, a broken
release) the benchmark says so on one line and exits 0.

    python3 -m bench.acplint_compare
    python3 -m bench.acplint_compare --no-install    # the skip path only (smoke test)
    python3 -m bench.acplint_compare --floor-only --repeats 1   # no acplint (smoke test)

Beside the two tools it prints the floor of a run at ``-j auto`` and ``-j 4``:
what the same exchanges take with nothing of this suite in them (see
:func:`floor`), so a missed target says whether the suite or the waiting is
the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import REPO_ROOT, Sample, alternate, conformance_cli, env, ratio_line, run
from bench.live_overhead import GRACE

PACKAGE = "acplint"
TARGET = 50.0  # acplint's time to a verdict over ours at -j auto, at least


def install(where: Path) -> tuple[Path | None, str]:
    """acplint's executable in a fresh venv under ``where``, or None and why not."""
    venv = where / "venv"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                       capture_output=True, timeout=300)
        done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", PACKAGE],
                              capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    exe = venv / "bin" / PACKAGE
    if done.returncode != 0 or not exe.exists():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"pip install {PACKAGE} exited {done.returncode}: {last[0]}"
    return exe, ""


def jobs_auto() -> int:
    """What ``-j auto`` means: the number of cores."""
    return os.cpu_count() or 1


def floors(recorded: Path, jobs: list[int]) -> list[tuple[float, str]]:
    """The shortest a run at each ``-j`` of ``jobs`` can take against this agent, and how
    that is made up.

    The raw driver of ``bench.live_overhead`` replays the recorded exchanges with
    nothing else: the agent starts, the lines, and the grace windows the catalogue
    asks for (MID-A-09: 0.25 s of silence after a cancelled turn, a load and a
    resume), one case at a time. Perfectly spread over ``j`` workers that is
    max(sum / j, longest case); the suite's own start-up (``acp-conformance
    list``: imports and case files) comes before any case.
    """
    raw = run([sys.executable, "-m", "bench.live_overhead", "--raw", str(recorded)])
    info = json.loads(raw.stdout.strip().splitlines()[-1])
    spans = list(info["spans"].values())
    startup = min(run(conformance_cli() + ["list"]).wall for _ in range(3))
    graces = info["graces"] * GRACE
    return [(startup + max(sum(spans) / j, max(spans)),
             (f"start-up {startup:.2f} s + max(sum of {len(spans)} raw cases {sum(spans):.2f} s"
              f" / {j}, longest {max(spans):.2f} s); the raw cases hold {info['spawns']} agent "
              f"starts and {info['graces']} grace windows ({graces:.2f} s)")) for j in jobs]


def ours(argv: list[str], repeats: int) -> dict[str, Sample]:
    """This suite at -j 1, -j auto and -j 4, alternated, best of ``repeats``."""
    agent = ["--agent", f"{sys.executable} -m conformance.reference.agent"]
    variants = {"-j 1": ["-j", "1"], "-j auto": ["-j", "auto"], "-j 4": ["-j", "4"]}
    best = alternate(repeats, *(
        (lambda extra=extra: run(conformance_cli() + agent + extra + argv))
        for extra in variants.values()))
    return dict(zip(variants, best, strict=False))


def print_floor(peer_wall: float | None, repeats: int) -> Sample:
    """Record a serial run, print the floor at -j auto and -j 4 and this suite's times."""
    with tempfile.TemporaryDirectory(prefix="acp-bench-floor-") as tmp:
        recorded = Path(tmp) / "recorded"
        first = run(conformance_cli() + ["--agent",
                                         f"{sys.executable} -m conformance.reference.agent",
                                         "-j", "1", "--transcripts", str(recorded)])
        if first.returncode != 0:
            raise SystemExit(f"the suite failed on the reference agent (exit "
                             f"{first.returncode}):\n{first.stdout[-3000:]}")
        labels = {f"-j auto ({jobs_auto()})": jobs_auto(), "-j 4": 4}
        for label, (least, how) in zip(labels, floors(recorded, list(labels.values())), strict=False):
            need = f"; {TARGET:g}x of the peer needs <= {peer_wall / TARGET:.2f} s" \
                if peer_wall else ""
            print(f"  floor at {label:<12} {least:6.2f} s  [{how}]{need}")
    samples = ours([], repeats)
    for label, sample in samples.items():
        print(f"  {'acp-conformance ' + label:<24} wall {sample.wall:7.2f} s  "
              f"cpu {sample.cpu:6.2f} s  exit {sample.returncode}")
    return samples["-j auto"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.acplint_compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-install", action="store_true", help="do not install acplint: skip")
    p.add_argument("--floor-only", action="store_true",
                   help="no acplint: only this suite's times and the floor (a smoke run)")
    p.add_argument("--repeats", type=int, default=3, help="runs of this suite, best kept")
    p.add_argument("--peer-repeats", type=int, default=2,
                   help="runs of acplint (about a minute each), best kept")
    ns = p.parse_args(argv)
    print(f"peer: {PACKAGE} vs acp-conformance against the reference agent ({sys.executable})")
    if ns.floor_only:
        print_floor(None, ns.repeats)
        return 0
    if ns.no_install:
        print(f"skip: {PACKAGE} not installed (--no-install)")
        return 0
    with tempfile.TemporaryDirectory(prefix="acp-bench-acplint-") as tmp:
        exe, why = install(Path(tmp))
        if exe is None:
            print(f"skip: {PACKAGE} did not install ({why})")
            return 0
        version = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                                 env=env(), timeout=60, check=False).stdout.strip()
        report = Path(tmp) / "acplint.json"
        # The peer's time varies from run to run (fixed windows that a busy machine can
        # stretch): it gets the same best-of treatment as this suite.
        peers = [run([str(exe), "--agent", sys.executable, "--agent-args",
                      "-m conformance.reference.agent", "--output", "json", "--output-file",
                      str(report)], cwd=REPO_ROOT, timeout=1800)
                 for _ in range(max(1, ns.peer_repeats))]
        peer = min(peers, key=lambda sample: sample.wall)
        if len(peers) > 1:
            print(f"  {PACKAGE} runs: " + ", ".join(f"{x.wall:.2f} s" for x in peers)
                  + " (the best is kept)")
        verdict = "no report"
        if report.exists():
            data = json.loads(report.read_text(encoding="utf-8"))
            results = data.get("results", [])
            failed = sum(1 for r in results if r.get("status") == "FAIL")
            verdict = f"{data.get('conformance_level')}, {failed} of {len(results)} failed"
        print(f"  {version or PACKAGE:<24} wall {peer.wall:7.2f} s  cpu {peer.cpu:6.2f} s  "
              f"exit {peer.returncode}  ({verdict})")
        auto = print_floor(peer.wall, ns.repeats)
        times = peer.wall / auto.wall
        print(ratio_line("acplint/acp-conformance -j auto wall", times, None,
                         f"target >= {TARGET:g}x: {'ok' if times >= TARGET else 'UNDER'}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
