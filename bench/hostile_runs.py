"""Wall time of a whole run against each hostile target, through the real command line.

A target that fails the same way in every case must cost about one fault per
protocol version, not one per case (README, "Bounded runs"). This runs the
CLI against each fixture of ``fixtures/hostile/agents`` and
``fixtures/hostile/clients`` named below and prints the wall time of the run,
its exit code and the bound it must stay under (``2 x --timeout + 15 s`` per
protocol version). Clients run with the reference client's profile and
``--turn-timeout`` equal to ``--timeout`` (a client that prints forever
is bounded by that, not by silence).

``--code DIR`` runs the command line of another checkout (its ``conformance``
package first on ``PYTHONPATH``, no byte code written), so the same fixtures
can be timed on the code before a change: ``--code ../old-checkout``.

    python3 -m bench.hostile_runs --timeout 10 --protocol 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ROOT / "fixtures" / "hostile" / "agents"
CLIENTS = ROOT / "fixtures" / "hostile" / "clients"
FIXTURES = ("silent_after_prompt", "huge_line", "huge_line_at_prompt", "unmatched_ids",
            "stream_forever", "crash_mid_stream", "mute_to_v2",
            "client:never_ready", "client:chatty_never_ready", "client:exits_early",
            "client:floods_screen")
SLACK = 15.0


def bound(timeout: float, protocols: int) -> float:
    return protocols * (2 * timeout + SLACK)


def run_one(name: str, *, timeout: float, protocol: str, code: Path | None,
            extra: list[str] | None = None) -> tuple[float, int]:
    """(wall seconds, exit code) of one CLI run against fixture ``name``."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(code or ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CI", None)
    if name.startswith("client:"):
        client = f"{sys.executable} {CLIENTS / (name[7:] + '.py')} --agent-cmd {{agent}}"
        target = ["--client", client, "--client-profile",
                  str(ROOT / "fixtures" / "clients" / "reference.yaml"),
                  "--turn-timeout", str(timeout)]
    else:
        target = ["--agent", f"{sys.executable} {AGENTS / (name + '.py')}"]
    with tempfile.TemporaryDirectory(prefix="hostile-bench-") as tmp:
        argv = [sys.executable, "-m", "conformance", *target, "--protocol", protocol,
                "--timeout", str(timeout), "--json", str(Path(tmp) / "r.json"),
                *(extra or [])]
        start = time.monotonic()
        done = subprocess.run(argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=False)
        return time.monotonic() - start, done.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--protocol", default="1", choices=["1", "2", "both"])
    p.add_argument("--code", type=Path, help="run this checkout's command line instead")
    p.add_argument("--only", action="append", default=[],
                   help="fixture name, client:NAME for a client (repeatable)")
    p.add_argument("-j", "--jobs", help="pass --jobs to the command line (the code after the "
                                        "change; without it, its default)")
    ns = p.parse_args(argv)
    limit = bound(ns.timeout, 2 if ns.protocol == "both" else 1)
    over = 0
    for name in ns.only or FIXTURES:
        wall, rc = run_one(name, timeout=ns.timeout, protocol=ns.protocol, code=ns.code,
                           extra=["-j", ns.jobs] if ns.jobs else [])
        ok = wall < limit
        over += not ok
        print(f"{name}: {wall:.1f} s wall, exit {rc} (bound {limit:.0f} s) "
              f"{'ok' if ok else 'OVER'}", flush=True)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
