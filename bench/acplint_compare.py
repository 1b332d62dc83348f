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
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import REPO_ROOT, conformance_cli, env, ratio_line, run

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.acplint_compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-install", action="store_true", help="do not install acplint: skip")
    ns = p.parse_args(argv)
    print(f"peer: {PACKAGE} vs acp-conformance against the reference agent ({sys.executable})")
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
        peer = run([str(exe), "--agent", sys.executable, "--agent-args",
                    "-m conformance.reference.agent", "--output", "json", "--output-file",
                    str(report)], cwd=REPO_ROOT, timeout=1800)
        agent = ["--agent", f"{sys.executable} -m conformance.reference.agent"]
        serial = run(conformance_cli() + agent + ["-j", "1"])
        ours = run(conformance_cli() + agent + ["-j", "auto"])
        verdict = "no report"
        if report.exists():
            data = json.loads(report.read_text(encoding="utf-8"))
            results = data.get("results", [])
            failed = sum(1 for r in results if r.get("status") == "FAIL")
            verdict = f"{data.get('conformance_level')}, {failed} of {len(results)} failed"
        lines = ours.stdout.splitlines()  # "summary: v1 ...", then one line per version
        first = next((i for i, line in enumerate(lines) if line.startswith("summary:")), None)
        summary = [] if first is None else ["; ".join(
            line.strip() for line in lines[first:] if not line.startswith("verdict:"))]
        print(f"  {version or PACKAGE:<24} wall {peer.wall:7.2f} s  cpu {peer.cpu:6.2f} s  "
              f"exit {peer.returncode}  ({verdict})")
        print(f"  {'acp-conformance -j 1':<24} wall {serial.wall:7.2f} s  cpu {serial.cpu:6.2f} s"
              f"  exit {serial.returncode}")
        print(f"  {'acp-conformance -j auto':<24} wall {ours.wall:7.2f} s  cpu {ours.cpu:6.2f} s  "
              f"exit {ours.returncode}  ({summary[0] if summary else 'no summary'})")
        print(ratio_line("acplint/acp-conformance -j 1 wall", peer.wall / serial.wall, None,
                         "how many times longer the peer takes to a verdict"))
        times = peer.wall / ours.wall
        print(ratio_line("acplint/acp-conformance -j auto wall", times, None,
                         f"target >= {TARGET:g}x: {'ok' if times >= TARGET else 'UNDER'}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
