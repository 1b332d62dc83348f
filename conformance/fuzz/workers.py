"""``fuzz --workers N``: one run on N worker processes sharing one example database.

Each worker is the ``fuzz`` command itself, started again with the run's options
and a share of the run: its own seed (derived from the run's, so the same seed
repeats the run), its part of ``--max-examples``, the run's ``--time-budget``
(all workers start together), the run's example database and regression
library. A worker only generates: each failure it finds is stored at once,
unshrunk (:class:`conformance.fuzz.keeper.Keeper`), and listed in a worker
report, a JSON file with its transcripts beside it. This process then keeps one
failure per broken rule and version, the smallest any worker found, shrinks it
once and saves it once (the workers' unshrunk files are replaced), and makes one
result of the whole run. Only the first worker replays the database's stored
counterexamples first.

SIGINT or SIGTERM stops the workers (each writes its report with what it holds)
and skips shrinking; what was held is saved unshrunk.

Several machines are several ``fuzz`` commands on one database (a shared Redis).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.fuzz.grading import Failure, FuzzResult, graded, merge_coverage, violations
from conformance.fuzz.keeper import Interrupted
from conformance.fuzz.settings import Effort
from conformance.results import Finding, Outcome, Reason
from conformance.transcript import from_entries as transcript_of
from conformance.transcript import load, write_atomic
from conformance.transport.process import signals_held

REPORT_ENV = "ACP_FUZZ_WORKER_REPORT"  # set in a worker: where it writes its report
INDEX_ENV = "ACP_FUZZ_WORKER_INDEX"  # and which worker it is
STOP_GRACE = 20.0  # seconds a stopped worker gets to write its report


def worker_seed(seed: int, index: int) -> int:
    """Worker ``index``'s seed, derived from the run's (the same seed repeats the run)."""
    return random.Random(f"acp-conformance/{seed}/{index}").randrange(2**32)


def shares(total: int, workers: int) -> list[int]:
    """``total`` generated runs split among at most ``workers`` workers (none gets 0)."""
    n = max(1, min(workers, total))
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


# -- in a worker ------------------------------------------------------------------------

def write_report(path: Path, result: FuzzResult, keeper: Any) -> None:
    """A worker's result: counts, notes, coverage and its unshrunk failures (each with its
    transcript in a file beside the report and its regression file, if it wrote one)."""
    failures = []
    for i, f in enumerate(result.failures):
        transcript = path.with_name(f"{path.stem}-{i}.jsonl")
        f.transcript.save(transcript)
        kept = keeper.kept.get(f.key, []) if keeper is not None else []
        failures.append({"protocol": f.protocol, "requirement": f.requirement,
                         "steps": f.steps, "model": f.model, "found_steps": f.found_steps,
                         "history": f.history,  # persistent mode: the earlier runs' steps
                         "transcript": str(transcript),
                         "regression": str(kept[-1].path) if kept and kept[-1].path else None})
    report = {"examples": result.examples, "processes": result.processes,
              "reused": result.reused,
              "elapsed": result.elapsed, "first_failure": result.time_to_first_failure,
              "notes": result.notes, "interrupted": result.interrupted,
              "coverage": {str(p): [f.to_json() for f in rows.values()]
                           for p, rows in result.coverage.items()},
              "failures": failures}
    write_atomic(path, json.dumps(report))


# -- in the run's process ---------------------------------------------------------------

def run_agent_workers(config: Any, effort: Effort, seed: int, argv: Sequence[str],
                      workers: int, *, database: str, progress: Any = None) -> FuzzResult:
    """Generate on ``workers`` processes, then shrink and keep each broken rule once."""
    from conformance.fuzz.agent_fuzz import shrink_failure
    from conformance.fuzz.player import Spawner

    result = FuzzResult("agent", config.target.label, seed, effort, protocols=config.protocols,
                        workers=workers)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="acp-fuzz-workers-") as work:
        reports = _generate(argv, effort, seed, workers, Path(work), database, progress)
        found = _merge(result, reports, config, progress)
        result.elapsed = time.monotonic() - started
        if result.interrupted is None:
            spawner = Spawner(config.target.command, env=config.target.env,
                              timeout=config.target.timeout)
            budget = config.shrink_budget
            deadline = None if budget is None else time.monotonic() + budget
            try:
                for key in sorted(found):
                    result.failures.append(shrink_failure(
                        found[key], config, work, spawner, deadline=deadline,
                        stream=progress, hold=found))
            except Interrupted as exc:
                result.interrupted = exc.signum
            finally:
                spawner.close()
                result.processes += spawner.started
        done = {f.key for f in result.failures}
        result.unshrunk = set(found) - done
        result.failures += [f for k, f in sorted(found.items()) if k not in done]
        result.failures.sort(key=lambda f: f.key)
        for f in result.failures:
            f.findings = violations(graded(f.transcript, config.schema_dir),
                                    config.strict) or f.findings
    result.elapsed = time.monotonic() - started
    return result


def _generate(argv: Sequence[str], effort: Effort, seed: int, workers: int, work: Path,
              database: str, progress: Any) -> list[tuple[int, dict[str, Any] | None, str]]:
    """Start the workers and wait for them; (index, report or None, its stderr's end)."""
    procs: list[tuple[int, subprocess.Popen[bytes], Path, Path]] = []
    try:
        for i, n in enumerate(shares(effort.max_examples, workers)):
            report, log = work / f"worker{i}.json", work / f"worker{i}.log"
            extra = ["--seed", str(worker_seed(seed, i)), "--max-examples", str(n),
                     "--workers", "1", "--hypothesis-db", database]
            if effort.time_budget is not None:
                extra += ["--time-budget", str(effort.time_budget)]
            with signals_held(), open(log, "wb") as err:  # a stop lands once it is kept
                proc = subprocess.Popen([sys.executable, "-m", "conformance", "fuzz", *argv,
                                         *extra], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True,
                                        env={**os.environ, REPORT_ENV: str(report),
                                             INDEX_ENV: str(i)})
                procs.append((i, proc, report, log))
        _say(progress, f"[fuzz agent] {len(procs)} workers started")
        interrupted: int | None = None
        try:
            while any(p.poll() is None for _, p, _, _ in procs):
                time.sleep(0.1)
        except Interrupted as exc:
            interrupted = exc.signum
            _stop(procs)
        out = []
        for i, proc, report, log in procs:
            data = json.loads(report.read_text("utf-8")) if report.exists() else None
            if data is not None and interrupted is not None:
                data["interrupted"] = interrupted
            tail = log.read_text("utf-8", "replace").strip().splitlines()[-1:] if \
                log.exists() else []
            out.append((i, data, tail[0] if tail else f"exit status {proc.returncode}"))
        return out
    finally:
        for _, proc, _, _ in procs:  # whatever happened, no worker outlives the run
            if proc.poll() is None:
                _signal(proc, signal.SIGKILL)
                proc.wait()


def _stop(procs: Sequence[tuple[int, subprocess.Popen[bytes], Path, Path]]) -> None:
    for _, proc, _, _ in procs:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and any(p.poll() is None for _, p, _, _ in procs):
        try:
            time.sleep(0.1)
        except Interrupted:  # a second signal: the workers still get their grace
            pass


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _merge(result: FuzzResult, reports: list[tuple[int, dict[str, Any] | None, str]],
           config: Any, progress: Any = None) -> dict[tuple[str, int], Failure]:
    """The workers' counts, notes and coverage into ``result``; their failures, the
    smallest per rule and version (each worker's unshrunk file adopted by the keeper)."""
    found: dict[tuple[str, int], Failure] = {}
    firsts = []
    for index, data, tail in reports:
        if data is None:
            result.notes.append(f"worker {index} wrote no report: {tail}")
            continue
        rules = ", ".join(f"{f['requirement']} (v{f['protocol']})" for f in data["failures"])
        _say(progress, f"[fuzz agent] worker {index}: {data['examples']} runs, "
                       + (f"found {rules}" if rules else "nothing found"))
        result.examples += int(data["examples"])
        result.processes += int(data["processes"])
        result.reused += int(data.get("reused") or 0)
        if data.get("first_failure") is not None:
            firsts.append(float(data["first_failure"]))
        if data.get("interrupted"):
            result.interrupted = int(data["interrupted"])
        for note in data["notes"]:
            if note not in result.notes:
                result.notes.append(note)
        for protocol, rows in data["coverage"].items():
            merge_coverage(result.coverage.setdefault(int(protocol), {}),
                           [_finding(r) for r in rows])
        for item in data["failures"]:
            failure = _failure(item, config)
            if failure is None:
                continue
            regression = Path(item["regression"]) if item.get("regression") else None
            if config.keeper is not None:
                config.keeper.adopt(failure, regression)
            old = found.get(failure.key)
            if old is None or failure.size() < old.size():
                found[failure.key] = failure
    result.time_to_first_failure = min(firsts) if firsts else None
    return found


def _failure(item: dict[str, Any], config: Any) -> Failure | None:
    header, entries = load(Path(item["transcript"]))
    protocol = int(item["protocol"])
    transcript = transcript_of(header, entries)
    bad = violations(graded(transcript, config.schema_dir), config.strict)
    same = [f for f in bad if f.requirement == item["requirement"]]
    if not same:
        return None
    return Failure(same[0], protocol, list(item["steps"]), transcript, bad,
                   found_steps=int(item.get("found_steps") or len(item["steps"])),
                   model=item.get("model"), history=list(item.get("history") or []))


def _finding(row: dict[str, Any]) -> Finding:
    evidence = row.get("evidence") or {}
    return Finding(row["requirement"], Outcome(row["outcome"]), row["message"],
                   expected=evidence.get("expected"), actual=evidence.get("actual"),
                   entries=tuple(evidence.get("entries", ())),
                   occurrences=int(row.get("occurrences", 1)), faults=int(row.get("faults", 1)),
                   reason=Reason(row["reason"]) if row.get("reason") else None,
                   consequences=tuple(row.get("consequences", ())))


def _say(stream: Any, line: str) -> None:
    if stream is not None:
        stream.write(line + "\n")
        stream.flush()


__all__ = ["run_agent_workers", "shares", "worker_seed", "write_report"]
