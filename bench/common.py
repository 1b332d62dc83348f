"""Shared helpers of the benchmarks: run a command, measure it, print a ratio line.

Absolute times on a shared machine are noise, so every benchmark measures its
own baseline in the same run, alternates baseline and subject, keeps the best
of a few repeats, and prints ratios. Each ratio line starts with ``ratio`` and
reads ``ratio <name>: <value>x (target <= <limit>x) ok|OVER``; the smoke test
looks for these lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.peak import MARK

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Sample:
    wall: float  # seconds
    cpu: float  # user + system seconds of the process (and its waited-for children)
    max_rss_mb: float  # peak resident set size
    returncode: int
    stdout: str = ""


def env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a measured command: the repository importable, no colour."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e["NO_COLOR"] = "1"
    e.pop("ACP_CONFORMANCE_DEBUG", None)
    e.update(extra or {})
    return e


def run(argv: Sequence[str], *, cwd: Path | None = None, extra_env: Mapping[str, str] | None = None,
        timeout: float = 3600, peak: bool = False) -> Sample:
    """Run ``argv`` to its end: wall time, CPU time (wait4) and peak memory.

    With ``peak=True`` (``argv`` must be ``python -m ...`` or ``python -c ...``)
    the command runs under bench.peak, which reports the process's own peak;
    otherwise the peak is wait4's ``ru_maxrss``, which on Linux starts at this
    process's own size when it forked.
    """
    if peak:
        if argv[0] != sys.executable or argv[1] not in ("-m", "-c"):
            raise ValueError("peak=True runs python -m/-c command lines only")
        argv = [sys.executable, "-m", "bench.peak", *argv[1:]]
    start = time.perf_counter()
    proc = subprocess.Popen(list(argv), cwd=str(cwd or REPO_ROOT), env=env(extra_env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    timer = threading.Timer(timeout, proc.kill)  # a hung command ends the benchmark, not CI
    timer.start()
    try:
        out = proc.stdout.read()  # the commands print little; reading first avoids a full pipe
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    # ru_maxrss is in kilobytes on Linux (bytes on macOS).
    rss = usage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    if peak:
        found = re.search(rf"^{MARK} (\d+)$", out, re.MULTILINE)
        if found:
            rss = int(found.group(1)) / 1024
            out = out[:found.start()].rstrip("\n") + "\n" + out[found.end() + 1:]
    return Sample(wall, usage.ru_utime + usage.ru_stime, rss, proc.returncode, out)


def best(samples: Sequence[Sample]) -> Sample:
    """The fastest run by CPU time, with the best wall time and the highest peak memory seen."""
    fastest = min(samples, key=lambda s: s.cpu)
    return Sample(min(s.wall for s in samples), fastest.cpu,
                  max(s.max_rss_mb for s in samples), fastest.returncode, fastest.stdout)


def alternate(repeats: int, *subjects: Callable[[], Sample]) -> list[Sample]:
    """Run each subject ``repeats`` times, interleaved (a, b, a, b...); the best of each."""
    runs: list[list[Sample]] = [[] for _ in subjects]
    for _ in range(max(1, repeats)):
        for i, subject in enumerate(subjects):
            runs[i].append(subject())
    return [best(r) for r in runs]


def ratio_line(name: str, value: float, limit: float | None, detail: str = "") -> str:
    verdict = "" if limit is None else (" ok" if value <= limit else " OVER")
    target = "" if limit is None else f" (target <= {limit:g}x)"
    more = f"  [{detail}]" if detail else ""
    return f"ratio {name}: {value:.2f}x{target}{verdict}{more}"


def python() -> list[str]:
    return [sys.executable]


def conformance_cli() -> list[str]:
    """``acp-conformance`` as installed or not: ``python -m conformance`` from this checkout."""
    return [sys.executable, "-m", "conformance"]
