"""Offline grading cost: ``acp-conformance check`` against a bare JSON-lines loop.

For each size, shape and ID mode it writes a conformant transcript
(bench/gen_transcript.py; shape ``long``: several turns of long chunk runs, shape
``real``: token-sized chunks in short runs with thoughts and tool calls between;
each with and without message IDs, and a session/load replay), then runs,
alternately and a few times each, in fresh processes:

* the baseline: a bare loop that reads the same file and ``json.loads`` each line;
* the subject: ``python -m conformance check FILE`` (the full grading).

It prints the CPU-time ratio (the target: at most 1.0x at 1M updates), the wall
ratio, and the peak memory (RSS) of both, and checks that the transcript with a
planted violation still fails on the expected rule at the same size and shape.

    python3 -m bench.offline_check                       # 10k, 100k, 1M; every shape
    python3 -m bench.offline_check --sizes 2000 --repeats 1   # a smoke run
    python3 -m bench.offline_check --shapes real --ids no    # one shape, no IDs (v1)
    python3 -m bench.offline_check --breakdown          # where the time goes, in-process
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Sample, alternate, conformance_cli, python, ratio_line, run
from bench.gen_transcript import SHAPES, generate

TARGET_RATIO = 1.0  # check / bare parse, CPU time, at 1M updates
TARGET_RSS_MB = 64.0  # peak memory (RSS) of the check process at 1M updates
VIOLATION_RULE = "MID-A-02/cross-turn-reuse"

BARE_LOOP = """\
import json, sys
with open(sys.argv[1], encoding="utf-8") as fh:
    for line in fh:
        json.loads(line)
"""


def _size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 \
        else str(n)


def measure_size(workdir: Path, updates: int, repeats: int, chunks_per_message: int,
                 no_ids: bool = False, shape: str = "long") -> bool:
    path = workdir / f"transcript-{updates}.jsonl"
    t0 = time.perf_counter()
    stats = generate(path, updates=updates, chunks_per_message=chunks_per_message,
                     no_ids=no_ids, shape=shape)
    size_mb = path.stat().st_size / 1e6
    name = f"{_label(updates)} {shape}{' no-ids' if no_ids else ''}"
    print(f"\n{name}: {stats.lines} lines, {stats.updates} updates, "
          f"{stats.messages} messages, {size_mb:.0f} MB "
          f"(written in {time.perf_counter() - t0:.1f} s)")

    def bare() -> Sample:
        return run(python() + ["-c", BARE_LOOP, str(path)], peak=True)

    def check() -> Sample:
        return run(conformance_cli() + ["check", str(path)], peak=True)

    base, subject = alternate(repeats, bare, check)
    ok = True
    if subject.returncode != 0:
        print(f"  check exited {subject.returncode} on the conformant transcript:\n"
              f"{subject.stdout[-2000:]}")
        ok = False
    cpu, wall = subject.cpu / base.cpu, subject.wall / base.wall
    print(f"  bare parse  cpu {base.cpu:7.2f} s  wall {base.wall:7.2f} s  "
          f"peak {base.max_rss_mb:6.1f} MB")
    print(f"  check       cpu {subject.cpu:7.2f} s  wall {subject.wall:7.2f} s  "
          f"peak {subject.max_rss_mb:6.1f} MB")
    limit = TARGET_RATIO if updates >= 1_000_000 else None
    print(ratio_line(f"check/bare-parse cpu {name}", cpu, limit))
    print(ratio_line(f"check/bare-parse wall {name}", wall, None))
    rss_ok = subject.max_rss_mb <= TARGET_RSS_MB or updates < 1_000_000
    print(f"memory check {name}: peak {subject.max_rss_mb:.1f} MB "
          f"({subject.max_rss_mb - base.max_rss_mb:+.1f} MB over the bare loop; "
          f"{stats.messages} messages, {stats.updates} updates)"
          + ("" if updates < 1_000_000 else
             f" (target <= {TARGET_RSS_MB:g} MB) {'ok' if rss_ok else 'OVER'}"))
    path.unlink()
    if no_ids:  # the planted violation reuses an ID
        return ok

    bad = workdir / f"transcript-{updates}-violation.jsonl"
    generate(bad, updates=updates, chunks_per_message=chunks_per_message,
             violation="cross-turn-reuse", shape=shape)
    caught = run(conformance_cli() + ["check", str(bad)])
    found = any(line.startswith(VIOLATION_RULE + " ") and " FAIL " in line
                for line in caught.stdout.splitlines())
    print(f"violation {name}: exit {caught.returncode}, {VIOLATION_RULE} "
          f"{'reported' if found else 'NOT reported'} (cpu {caught.cpu:.2f} s)")
    bad.unlink()
    return ok and found and caught.returncode == 1


def breakdown(workdir: Path, updates: int, chunks_per_message: int, no_ids: bool = False,
              shape: str = "long") -> None:
    """In one process: reading, timeline and checkers, each over the same file."""
    import json

    from conformance import transcript as tmod
    from conformance.checks import grade
    from conformance.checks.timeline import Timeline

    path = workdir / "breakdown.jsonl"
    generate(path, updates=updates, chunks_per_message=chunks_per_message, no_ids=no_ids,
             shape=shape)

    def bare() -> None:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                json.loads(line)

    def read() -> None:
        for _ in tmod.iter_entries(path)[1]:
            pass

    def timeline() -> None:
        tl = Timeline(1)
        for e in tmod.iter_entries(path)[1]:
            tl.feed(e)

    def graded(repeats: bool) -> None:
        grade(tmod.iter_entries(path)[1], protocol=1, repeats=repeats)

    steps = [("bare json.loads loop", bare), ("read entries", read),
             ("read + timeline", timeline), ("read + timeline + checkers", lambda: graded(True)),
             ("the same without the chunk-run short path", lambda: graded(False))]
    times = {}
    for name, fn in steps:
        best_time = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            fn()
            best_time = min(best_time, time.process_time() - t0)
        times[name] = best_time
    base = times["bare json.loads loop"]
    print(f"\nbreakdown, {_label(updates)} updates, {shape}{' no-ids' if no_ids else ''}, "
          "in one process (CPU, best of 3):")
    for name, value in times.items():
        print(f"  {name:<44} {value:7.2f} s  {value / base:5.2f}x")
    path.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.offline_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10k,100k,1M",
                   help="updates per transcript, comma-separated (default 10k,100k,1M)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each side, best kept")
    p.add_argument("--chunks-per-message", type=int, default=300)
    p.add_argument("--breakdown", action="store_true",
                   help="also split the cost in-process at the largest size")
    p.add_argument("--workdir", type=Path, help="where transcripts go (default: a temp dir)")
    p.add_argument("--shapes", default=",".join(SHAPES),
                   help=f"transcript shapes, comma-separated (default: {','.join(SHAPES)})")
    p.add_argument("--ids", choices=("yes", "no", "both"), default="both",
                   help="with message IDs, without (allowed in v1), or both (default)")
    ns = p.parse_args(argv)
    sizes = [_size(s) for s in ns.sizes.split(",") if s.strip()]
    shapes = [s.strip() for s in ns.shapes.split(",") if s.strip()]
    if not shapes or any(s not in SHAPES for s in shapes):
        p.error(f"--shapes takes {', '.join(SHAPES)}")
    modes = {"yes": [False], "no": [True], "both": [False, True]}[ns.ids]
    if ns.workdir is not None:
        try:
            ns.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            p.error(f"--workdir {ns.workdir}: {exc.strerror}")
    print(f"offline grading: acp-conformance check vs a bare json.loads loop, "
          f"best of {ns.repeats}, fresh processes ({sys.executable})")
    with tempfile.TemporaryDirectory(prefix="acp-bench-", dir=ns.workdir) as tmp:
        results = [measure_size(Path(tmp), n, ns.repeats, ns.chunks_per_message, no_ids, shape)
                   for n in sizes for shape in shapes for no_ids in modes]
        ok = all(results)  # every size and shape ran, even after a failed one
        if ns.breakdown:
            for shape in shapes:
                for no_ids in modes:
                    breakdown(Path(tmp), max(sizes), ns.chunks_per_message, no_ids, shape)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
