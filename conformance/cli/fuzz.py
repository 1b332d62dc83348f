"""``fuzz``: generated sessions (against an agent) or streams (against a client).

The engines are :mod:`conformance.fuzz.agent_machine` and
:mod:`conformance.fuzz.client_fuzz`; this module turns the options into their
settings and prints what they found. Nothing heavy is imported at module level:
``acp-conformance fuzz --help`` does not load Hypothesis.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import (
    Parser,
    add_option,
    add_options,
    build_masker,
    check_run_options,
    client_choice,
    common_options,
    grading_options,
    model_group,
    protocols_of,
    table_values,
    target_group,
    use_out,
)
from conformance.cli.output import report_run
from conformance.cli.run import model_server
from conformance.fuzz.settings import EFFORTS
from conformance.roles import ROLES, check_options, role_of
from conformance.settings.table import GROUPS
from conformance.usage import UsageError


def build_fuzz_parser() -> argparse.ArgumentParser:
    """The fuzz subcommand's options: the run's target, grading and output options, and its
    own (shell ``fuzz`` of the option table, :mod:`conformance.settings.table`)."""
    p = Parser(
        prog="acp-conformance fuzz",
        description="Generate sessions (against an agent) or streams (against a client) with "
                    "Hypothesis until a rule breaks; shrink each broken rule to a minimal "
                    "counterexample and save it to the regression library.",
        epilog="exit codes: 0 nothing found, 1 at least one rule broken, 2 usage or input "
               "error, 3 internal error, 128+N interrupted by signal N (never a pass)")
    target_group(p, required_hint="give --agent CMD, or --client CMD / --client-adapter")
    add_option(p.add_argument_group(GROUPS["demo"]), "demo", shell="fuzz")
    model_group(p, fuzz=True)
    add_options(p.add_argument_group(GROUPS["effort"]), "effort", "max-examples", "time-budget",
                "shrink-budget", "workers", "seed", "runs-per-process", "fresh-process",
                "max-failures", shell="fuzz", fill=blanks())
    add_options(p.add_argument_group(GROUPS["regressions"]), "regressions", "no-save",
                "hypothesis-db", "emit-case", shell="fuzz")
    common_options(p)
    return p


def blanks() -> dict[str, str]:
    """The blanks of the fuzz options' helps, filled from the fuzzer's own facts: its named
    efforts, and how many runs one agent process serves by default."""
    from conformance.fuzz.persistent import DEFAULT_RUNS_PER_PROCESS

    efforts = ", ".join(f"{e.name} ({e.max_examples} runs: {e.description})"
                        for e in EFFORTS.values())
    return {"efforts": efforts, "runs_per_process": str(DEFAULT_RUNS_PER_PROCESS)}


def main(argv: Sequence[str]) -> int:
    from conformance.fuzz import settings
    from conformance.fuzz.database import describe
    from conformance.fuzz.keeper import Interrupted, interrupts, received

    ns = build_fuzz_parser().parse_args(list(argv))
    ns.worker_report, ns.worker_index = worker_of_run()
    check_run_options(ns)  # the option table's checks: each value's, and the clashes
    values = table_values(ns)
    role = ROLES["agent"] if ns.demo else role_of(values)
    if role is None:
        raise UsageError("nothing to fuzz: give --agent CMD, --client CMD or "
                             "--client-adapter MODULE:FACTORY")
    check_options(values, "fuzz", role)  # an option of the other side is refused
    if ns.demo:  # the bundled broken agent, as `demo --broken` runs it
        import shlex

        from conformance.cli.demo import broken_agent_command

        ns.agent = shlex.join(broken_agent_command())
    if ns.baseline is not None:
        raise UsageError("--baseline lists expected failures of cases; a fuzz run has "
                             "none (replay the regression library instead)")
    try:
        effort = settings.get_effort(ns.effort, max_examples=ns.max_examples,
                                     time_budget=ns.time_budget)
        seed = settings.choose_seed(ns.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = grading_options(ns)
    masker = build_masker(ns)
    out = use_out(ns, hypothesis=True)  # the regression library and Hypothesis's data go under it
    if ns.regressions is None:
        ns.regressions = out / "regressions"
    ns.database = _open_database(ns, out)  # unreachable: exit 2 before any target starts
    if ns.agent:  # a missing command is a usage error before anything heavy loads
        from conformance.transport import split_command

        split_command(ns.agent)
    ns.keeper = _keeper(ns, effort, seed, options, masker)
    ns.shrink_budget = settings.shrink_budget(effort, ns.shrink_budget)
    worker = ns.worker_report is not None
    if not worker and not ns.quiet:  # -q: the verdict line only
        shape = f", up to {effort.steps} steps each" if ns.agent else ", one turn each"
        if ns.model_server:
            shape += ", the model's answers drawn too"
        print(f"acp-conformance fuzz: seed {seed}, effort {effort.name} "
              f"({effort.max_examples} runs{shape}"
              + (f", {effort.time_budget:.0f} s budget" if effort.time_budget else "")
              + (f", {ns.workers} workers" if ns.workers > 1 else "") + ")", flush=True)
    progress = settings.progress_stream(not worker)
    with interrupts():
        try:
            if ns.agent:
                model, command, env = model_server(ns, ns.agent, [], masker)
                try:
                    result = _fuzz_agent(ns, effort, seed, options, progress, model, command,
                                         env, masker, argv)
                finally:
                    if model is not None:
                        model.stop()
            else:
                result = _fuzz_client(ns, effort, seed, options, progress, masker)
        except Interrupted as exc:  # before the engine started: nothing is held
            result = _nothing(ns, effort, seed, exc.signum)
    if result.interrupted is None and received() is not None:  # swallowed on its way up:
        result.interrupted = received()  # still an interrupted run, never a pass
    for sig in (signal.SIGINT, signal.SIGTERM):  # saving and the reports are not torn
        signal.signal(sig, signal.SIG_IGN)
    if worker:
        from conformance.fuzz.workers import write_report

        write_report(ns.worker_report, result, ns.keeper)
        return 0
    result.database = describe(ns.hypothesis_db) or getattr(ns, "workers_db", None)
    status = _finish(ns, result, options, masker)
    if result.interrupted is not None:
        print(f"acp-conformance: fuzz interrupted by {signal.Signals(result.interrupted).name}; "
              f"{len(result.failures)} broken rule(s) held were saved (unshrunk where "
              "shrinking had not ended) and the reports written", file=sys.stderr)
        return 128 + int(result.interrupted)
    return status


def _runs_per_process() -> int:
    from conformance.fuzz.persistent import default_runs_per_process

    return default_runs_per_process()


def worker_of_run() -> tuple[Path | None, int]:
    """In a worker of ``fuzz --workers N``: where it writes its report, and its index
    (set by the run in its environment, taken out so its agents do not inherit it)."""
    from conformance.fuzz.workers import INDEX_ENV, REPORT_ENV

    report, index = os.environ.pop(REPORT_ENV, None), os.environ.pop(INDEX_ENV, "0")
    return (Path(report) if report else None), int(index)


def _open_database(ns: argparse.Namespace, out: Path) -> Any:
    """The example database of --hypothesis-db (a usage error if it cannot be reached)."""
    if ns.hypothesis_db is None:
        return None
    from conformance.fuzz.database import open_database

    try:
        return open_database(ns.hypothesis_db, local=out / "hypothesis" / "examples")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _keeper(ns: argparse.Namespace, effort: Any, seed: int, options: Any, masker: Any) -> Any:
    """What stores each failure as it is found and replaces it when it is shrunk."""
    from conformance.fuzz import regressions
    from conformance.fuzz.grading import FuzzResult
    from conformance.fuzz.keeper import Keeper

    found_on = FuzzResult("agent" if ns.agent else "client", ns.agent or "", seed, effort)

    def header(f: Any) -> dict[str, Any]:
        return dict(masker.data(regressions.regression_header(f, found_on, options,
                                                              ns.strict)))

    ns.found_on = found_on  # the client's label and replay_with are filled in when known
    return Keeper(None if ns.no_save else ns.regressions, ns.database, header)


def _nothing(ns: argparse.Namespace, effort: Any, seed: int, signum: int) -> Any:
    from conformance.fuzz.grading import FuzzResult

    result = FuzzResult(ns.found_on.role, ns.found_on.target, seed, effort,
                        protocols=tuple(protocols_of(ns)))
    result.interrupted = signum
    return result


def _fuzz_agent(ns: argparse.Namespace, effort: Any, seed: int, options: Any,
                progress: Any, model: Any, command: Any, env: dict[str, str],
                masker: Any, argv: Sequence[str]) -> Any:
    from conformance.fuzz.agent_fuzz import run_agent_fuzz
    from conformance.fuzz.agent_machine import AgentFuzzConfig
    from conformance.fuzz.player import AgentTarget
    from conformance.transport import split_command

    # The label keeps {model_url}: replay fills in the URL of its own model server.
    target = AgentTarget(split_command(command), ns.agent, env, ns.timeout, masker)
    config = AgentFuzzConfig(target, protocols=tuple(protocols_of(ns)), options=options,
                             strict=ns.strict, max_failures=ns.max_failures,
                             schema_dir=ns.schema_dir, model=model, database=ns.database,
                             keeper=ns.keeper, shrink_budget=ns.shrink_budget,
                             generate_only=ns.worker_report is not None,
                             replay_database=ns.worker_index == 0,
                             runs_per_process=(1 if ns.fresh_process else
                                               ns.runs_per_process or _runs_per_process()))
    if ns.workers > 1:
        from conformance.fuzz.workers import run_agent_workers

        return run_agent_workers(config, effort, seed, argv, ns.workers,
                                 database=_worker_database(ns), progress=progress)
    return run_agent_fuzz(config, effort, seed, progress=progress)


def _worker_database(ns: argparse.Namespace) -> str:
    """The database the workers share: --hypothesis-db, or one under --out for this run."""
    if ns.hypothesis_db is not None:
        return str(ns.hypothesis_db)
    from conformance.fuzz.database import open_directory

    folder = Path(ns.out).resolve() / "hypothesis" / "workers"
    ns.database = ns.keeper.database = open_directory(folder)
    ns.workers_db = str(folder)
    return str(folder)


def _fuzz_client(ns: argparse.Namespace, effort: Any, seed: int, options: Any,
                 progress: Any, masker: Any) -> Any:
    from conformance.fuzz.client_fuzz import client_target, run_client_fuzz

    target = client_target(client_choice(ns, masker))
    ns.found_on.target, ns.found_on.replay_with = target.label, target.replay_with()
    return run_client_fuzz(target, effort, seed, protocols=tuple(protocols_of(ns)),
                           options=options, strict=ns.strict, max_failures=ns.max_failures,
                           progress=progress, schema_dir=ns.schema_dir,
                           database=ns.database, keeper=ns.keeper,
                           runs_per_process=(1 if ns.fresh_process else
                                             ns.runs_per_process or _runs_per_process()))


def _finish(ns: argparse.Namespace, result: Any, options: Any, masker: Any) -> int:
    """Print what the run found (every line masked), save it, write the reports."""
    from conformance.agent.steps import describe
    from conformance.fuzz import regressions
    from conformance.fuzz.report import indent, to_run_result, transcript_lines

    def out(line: str = "") -> None:
        if not getattr(ns, "quiet", False):  # -q: the verdict line only (report_run's)
            print(masker.text(line))

    how = {"client": "--client", "client_adapter": "--client-adapter",
           "client_profile": "--client-profile"}
    target = (f"--agent {shlex.quote(result.target)}" if result.role == "agent" else
              " ".join(f"{how[k]} {shlex.quote(str(v))}" for k, v in result.replay_with.items()
                       if v))
    if result.role == "agent" and getattr(ns, "model_server", False):  # the model's side
        target += "".join(f" {flag} {shlex.quote(v)}" for flag, values in
                          (("--agent-env", ns.agent_env), ("--agent-config", ns.agent_config))
                          for v in values)
    runs = ("generated run(s)" if result.role == "agent"
            else "run(s), generated and shrinking")
    out(f"{result.examples} {runs} in {result.elapsed:.1f} s, "
          f"{result.processes} process(es) started"
        + (f", {result.examples / result.elapsed:.1f} runs/s" if result.elapsed > 0 else "")
        + (f", {result.reused} run(s) on a reused process" if result.reused else ""))
    for note in result.notes:
        out(f"note: {note}")
    saved_paths: dict[int, str] = {}
    for i, f in enumerate(result.failures):
        fp = regressions.failure_fingerprint(f)
        out()
        out(f"{f.finding.outcome.value.upper()} {f.requirement} (v{f.protocol}): "
              f"{f.finding.message}")
        if f.role == "agent":
            out(f"  minimal counterexample: {len(f.steps)} steps (found with {f.found_steps}, "
                  f"{f.shrink_attempts} shrinking replay(s))")
            for n, step in enumerate(f.steps, 1):
                out(f"    {n}. {describe(step)}")
            from conformance.fuzz.persistent import describe_history

            history = describe_history(f)
            if history is not None:
                out(f"  {history}")
            if f.model is not None:
                from conformance.fuzz.model_side import describe as describe_model

                out("  what the model said (shrunk model script):")
                for line in describe_model(f.model):
                    out(f"    {line}")
        else:
            from conformance.fuzz.client_fuzz import describe_stream
            from conformance.fuzz.client_persistent import describe_history as after

            out("  minimal counterexample: " + describe_stream(f.stream))
            if after(f) is not None:
                out(f"  {after(f)}")
        also = sorted({x.requirement for x in f.findings} - {f.requirement})
        if also:
            out(f"  the same run also broke: {', '.join(also)}")
        out("  transcript:")
        out(indent(transcript_lines(f.transcript.entries, f.finding.entries)))
        if ns.transcripts is not None:
            path = Path(ns.transcripts) / f"fuzz-{fp}.jsonl"
            f.transcript.save(path)
            saved_paths[i] = str(path)
        if f.key in result.unshrunk:
            out("  not shrunk to the end: the run was stopped before shrinking ended")
        # in place of what was stored when it was found
        saved = ns.keeper.final(f, shrunk=f.key not in result.unshrunk)
        if saved is not None:
            saved_paths[i] = str(saved.path)
            out(f"  {'already in the library' if saved.existed else 'saved'}: {saved.path}")
            out(f"  replay: acp-conformance replay {shlex.quote(str(saved.path))} {target}")
    if ns.emit_case is not None:
        _emit_cases(ns.emit_case, result, options, out)
    out()
    out(f"seed {result.seed}: repeat this run with --seed {result.seed}")
    run = to_run_result(result, options, ns.strict, saved_paths)
    run.fuzz = {"runs": result.examples, "seconds": round(result.elapsed, 3),
                "workers": result.workers, "database": result.database}
    if result.interrupted is not None:  # every report says so; never a pass
        run.interrupted = signal.Signals(result.interrupted).name
    return report_run(ns, run, masker=masker)


def _emit_cases(path: Path, result: Any, options: Any, out: Any) -> None:
    """--emit-case: the shrunk counterexamples as one case file."""
    from conformance.fuzz import emit, regressions

    found = [emit.of_failure(f, regressions.failure_fingerprint(f), options.profile.name,
                             f"acp-conformance fuzz, seed {result.seed}")
             for f in result.failures]
    out()
    if not found:
        out(f"--emit-case {path}: nothing found, no case written")
        return
    try:
        written = emit.write(path, found)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out(f"case file: {written[0]} ({len(found)} case(s); run it with --cases "
        f"{shlex.quote(str(written[0].parent))})")
    for extra in written[1:]:
        out(f"  its model script: {extra}")
