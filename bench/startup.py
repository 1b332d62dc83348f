"""Start-up cost: ``acp-conformance --help`` against ``python -c pass``.

The console script runs ``conformance.cli:main``; this benchmark runs exactly
that (``python -c "from conformance.cli import main; ..." --help``) and
``python -m conformance --help``, alternating with ``python -c pass``, many
times each, and prints the ratio of the best CPU times (target: at most 2x; the
best wall times are shown too).
It also lists which heavy modules ``--help`` imports (none should be: the
commands that need hypothesis, jsonschema, pexpect or yaml import them lazily).

    python3 -m bench.startup
    python3 -m bench.startup --repeats 3     # a smoke run
"""

from __future__ import annotations

import argparse
import sys

from bench.common import alternate, python, ratio_line, run

TARGET_RATIO = 2.0
HEAVY = ("hypothesis", "jsonschema", "pexpect", "yaml")
CONSOLE_SCRIPT = "import sys; from conformance.cli import main; sys.exit(main())"


def heavy_imports() -> list[str]:
    """The heavy top-level modules that ``--help`` imports (from ``-X importtime``)."""
    sample = run(python() + ["-X", "importtime", "-c", CONSOLE_SCRIPT, "--help"])
    seen = set()
    for line in sample.stdout.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            seen.add(name.split(".")[0])
    return sorted(seen & set(HEAVY))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.startup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=20, help="runs of each, best kept")
    ns = p.parse_args(argv)
    print(f"start-up: --help vs python -c pass, best of {ns.repeats} "
          f"({sys.executable})")
    bare, script, module = alternate(
        ns.repeats,
        lambda: run(python() + ["-c", "pass"]),
        lambda: run(python() + ["-c", CONSOLE_SCRIPT, "--help"]),
        lambda: run(python() + ["-m", "conformance", "--help"]))
    ok = script.returncode == 0 and module.returncode == 0 and "usage" in script.stdout
    for name, s in (("python -c pass", bare), ("acp-conformance --help", script),
                    ("python -m conformance --help", module)):
        print(f"  {name:<30} wall {s.wall * 1000:7.1f} ms  cpu {s.cpu * 1000:7.1f} ms")
    # Start-up is CPU-bound in one thread: CPU time is the work, wall time adds the
    # machine's load; the verdict is on CPU, wall is shown beside it.
    print(ratio_line("help/python-c-pass cpu", script.cpu / bare.cpu, TARGET_RATIO))
    print(ratio_line("help/python-c-pass wall", script.wall / bare.wall, None))
    print(ratio_line("python-m-help/python-c-pass cpu", module.cpu / bare.cpu, None))
    heavy = heavy_imports()
    print(f"heavy modules imported by --help: {', '.join(heavy) if heavy else 'none'}")
    return 0 if ok and not heavy else 1


if __name__ == "__main__":
    sys.exit(main())
