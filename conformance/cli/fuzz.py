"""``fuzz``: generated sessions (against an agent) or streams (against a client).

The engines are :mod:`conformance.fuzz.agent_machine` and
:mod:`conformance.fuzz.client_fuzz`; this module turns the options into their
settings and prints what they found. Nothing heavy is imported at module level:
``acp-conformance fuzz --help`` does not load Hypothesis.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import (
    Parser,
    build_masker,
    check_run_options,
    client_choice,
    common_options,
    grading_options,
    model_group,
    protocols_of,
    target_group,
    use_out,
)
from conformance.cli.output import report_run
from conformance.cli.run import model_server
from conformance.fuzz.settings import DEFAULT_EFFORT, EFFORTS
from conformance.usage import UsageError


def build_fuzz_parser() -> argparse.ArgumentParser:
    efforts = ", ".join(f"{e.name} ({e.max_examples} runs: {e.description})"
                        for e in EFFORTS.values())
    p = Parser(
        prog="acp-conformance fuzz",
        description="Generate sessions (against an agent) or streams (against a client) with "
                    "Hypothesis until a rule breaks; shrink each broken rule to a minimal "
                    "counterexample and save it to the regression library.",
        epilog="exit codes: 0 nothing found, 1 at least one rule broken, 2 usage or input "
               "error, 3 internal error")
    target_group(p, required_hint="give --agent CMD, or --client CMD / --client-adapter")
    model_group(p, fuzz=True)
    e = p.add_argument_group("effort")
    e.add_argument("--effort", choices=list(EFFORTS), default=DEFAULT_EFFORT,
                   help=f"named Hypothesis settings: {efforts} (default {DEFAULT_EFFORT})")
    e.add_argument("--max-examples", type=int, metavar="N",
                   help="generated runs (overrides the effort's number)")
    e.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="stop generating after this long (shrinking still finishes)")
    e.add_argument("--seed", type=int, metavar="N",
                   help="the run's seed (printed either way; the same seed repeats the run)")
    e.add_argument("--max-failures", type=int, metavar="N",
                   help="stop generating once N rules broke (default: go on to the end)")
    r = p.add_argument_group("regressions")
    r.add_argument("--regressions", type=Path, default=None, metavar="DIR",
                   help="where failures are saved (default: regressions/ in the --out folder)")
    r.add_argument("--no-save", action="store_true", help="do not save failures")
    r.add_argument("--hypothesis-db", type=Path, default=None, metavar="DIR",
                   help="a Hypothesis example database shared with other runs and campaigns: "
                        "its counterexamples are replayed first, new ones are added")
    r.add_argument("--emit-case", type=Path, default=None, metavar="FILE.yaml",
                   help="also write each shrunk counterexample as a case of one case file "
                        "(run it with --cases DIR; docs/fuzzing-campaigns.md)")
    common_options(p)
    return p


def main(argv: Sequence[str]) -> int:
    from conformance.fuzz import settings

    ns = build_fuzz_parser().parse_args(list(argv))
    check_run_options(ns)
    if not (ns.agent or ns.client or ns.client_adapter):
        raise UsageError("nothing to fuzz: give --agent CMD, --client CMD or "
                             "--client-adapter MODULE:FACTORY")
    if ns.agent and (ns.client or ns.client_adapter):
        raise UsageError("--agent and --client fuzz different sides: run them separately")
    if ns.max_failures is not None and ns.max_failures < 1:
        raise UsageError("--max-failures must be at least 1")
    if ns.baseline is not None:
        raise UsageError("--baseline lists expected failures of cases; a fuzz run has "
                             "none (replay the regression library instead)")
    if (ns.model_server or ns.agent_config) and not ns.agent:
        raise UsageError("--model-server and --agent-config need --agent: the model "
                             "stands behind an agent")
    try:
        effort = settings.get_effort(ns.effort, max_examples=ns.max_examples,
                                     time_budget=ns.time_budget)
        seed = settings.choose_seed(ns.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = grading_options(ns)
    masker = build_masker(ns)
    out = use_out(ns)  # the regression library and Hypothesis's data go under it
    if ns.regressions is None:
        ns.regressions = out / "regressions"
    if ns.hypothesis_db is not None:
        from conformance.fuzz.database import open_directory

        try:
            ns.database = open_directory(ns.hypothesis_db)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    else:
        ns.database = None
    if ns.agent:  # a missing command is a usage error before anything heavy loads
        from conformance.transport import split_command

        split_command(ns.agent)
    shape = f", up to {effort.steps} steps each" if ns.agent else ", one turn each"
    if ns.model_server:
        shape += ", the model's answers drawn too"
    print(f"acp-conformance fuzz: seed {seed}, effort {effort.name} "
          f"({effort.max_examples} runs{shape}"
          + (f", {effort.time_budget:.0f} s budget" if effort.time_budget else "") + ")",
          flush=True)
    progress = settings.progress_stream(True)
    if ns.agent:
        model, command, env = model_server(ns, ns.agent, [], masker)
        try:
            result = _fuzz_agent(ns, effort, seed, options, progress, model, command, env,
                                 masker)
        finally:
            if model is not None:
                model.stop()
    else:
        result = _fuzz_client(ns, effort, seed, options, progress, masker)
    return _finish(ns, result, options, masker)


def _fuzz_agent(ns: argparse.Namespace, effort: Any, seed: int, options: Any,
                progress: Any, model: Any, command: Any, env: dict[str, str],
                masker: Any) -> Any:
    from conformance.fuzz.agent_machine import AgentFuzzConfig, run_agent_fuzz
    from conformance.fuzz.player import AgentTarget
    from conformance.transport import split_command

    # The label keeps {model_url}: replay fills in the URL of its own model server.
    target = AgentTarget(split_command(command), ns.agent, env, ns.timeout, masker)
    config = AgentFuzzConfig(target, protocols=tuple(protocols_of(ns)), options=options,
                             strict=ns.strict, max_failures=ns.max_failures,
                             schema_dir=ns.schema_dir, model=model, database=ns.database)
    return run_agent_fuzz(config, effort, seed, progress=progress)


def _fuzz_client(ns: argparse.Namespace, effort: Any, seed: int, options: Any,
                 progress: Any, masker: Any) -> Any:
    from conformance.fuzz.client_fuzz import client_target, run_client_fuzz

    target = client_target(client_choice(ns, masker))
    return run_client_fuzz(target, effort, seed, protocols=tuple(protocols_of(ns)),
                           options=options, strict=ns.strict, max_failures=ns.max_failures,
                           progress=progress, schema_dir=ns.schema_dir,
                           database=ns.database)


def _finish(ns: argparse.Namespace, result: Any, options: Any, masker: Any) -> int:
    """Print what the run found (every line masked), save it, write the reports."""
    from conformance.fuzz import regressions
    from conformance.fuzz.report import indent, to_run_result, transcript_lines
    from conformance.fuzz.steps import describe

    def out(line: str = "") -> None:
        print(masker.text(line))

    directory = ns.regressions or regressions.DEFAULT_DIR
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
          f"{result.processes} process(es) started")
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
            if f.model is not None:
                from conformance.fuzz.model_side import describe as describe_model

                out("  what the model said (shrunk model script):")
                for line in describe_model(f.model):
                    out(f"    {line}")
        else:
            from conformance.fuzz.client_fuzz import describe_stream

            out("  minimal counterexample: " + describe_stream(f.stream))
        also = sorted({x.requirement for x in f.findings} - {f.requirement})
        if also:
            out(f"  the same run also broke: {', '.join(also)}")
        out("  transcript:")
        out(indent(transcript_lines(f.transcript.entries, f.finding.entries)))
        if ns.transcripts is not None:
            path = Path(ns.transcripts) / f"fuzz-{fp}.jsonl"
            f.transcript.save(path)
            saved_paths[i] = str(path)
        if not ns.no_save:
            saved = regressions.save(directory, fingerprint_=fp,
                                     header=masker.data(regressions.regression_header(
                                         f, result, options, ns.strict)),
                                     entries=f.transcript.entries,
                                     cwd=regressions.session_cwd(f.transcript))
            saved_paths[i] = str(saved.path)
            out(f"  {'already in the library' if saved.existed else 'saved'}: {saved.path}")
            out(f"  replay: acp-conformance replay {shlex.quote(str(saved.path))} {target}")
    if ns.emit_case is not None:
        _emit_cases(ns.emit_case, result, options, out)
    out()
    out(f"seed {result.seed}: repeat this run with --seed {result.seed}")
    run = to_run_result(result, options, ns.strict, saved_paths)
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
