"""The ``fuzz`` and ``replay`` subcommands (thin shells; ``conformance.cli`` dispatches here).

Nothing heavy is imported at module level: ``acp-conformance fuzz --help`` does
not load Hypothesis.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance import cli
from conformance.fuzz.settings import DEFAULT_EFFORT, EFFORTS


def _target_args(p: argparse.ArgumentParser, *, required_hint: str) -> None:
    cli.add_target_options(p.add_argument_group("target", required_hint), timeout=5.0)


def _model_args(p: argparse.ArgumentParser, *, fuzz: bool) -> None:
    m = p.add_argument_group("scripted model (LLM-backed agents, offline)")
    if fuzz:
        m.add_argument("--model-server", action="store_true",
                       help="serve scripted OpenAI/Anthropic/Gemini APIs on 127.0.0.1 (as in "
                            "suite runs) and draw what the model says in every generated run: "
                            "reasoning, text parts, tool calls, chunking, pauses, provider "
                            "item IDs; {model_url} is filled in the command, --agent-env "
                            "values and --agent-config templates")
    m.add_argument("--agent-config", action="append", default=[], metavar="TEMPLATE=DEST",
                   help="write TEMPLATE to DEST with {model_url} filled in (repeatable)"
                        + ("" if fuzz else "; a file with a model script starts the "
                                           "scripted model server by itself"))


def build_fuzz_parser() -> argparse.ArgumentParser:
    efforts = ", ".join(f"{e.name} ({e.max_examples} runs: {e.description})"
                        for e in EFFORTS.values())
    p = cli._Parser(
        prog="acp-conformance fuzz",
        description="Generate sessions (against an agent) or streams (against a client) with "
                    "Hypothesis until a rule breaks; shrink each broken rule to a minimal "
                    "counterexample and save it to the regression library.",
        epilog="exit codes: 0 nothing found, 1 at least one rule broken, 2 usage or input "
               "error, 3 internal error")
    _target_args(p, required_hint="give --agent CMD, or --client CMD / --client-adapter")
    _model_args(p, fuzz=True)
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
                   help="where failures are saved (default fixtures/regressions)")
    r.add_argument("--no-save", action="store_true", help="do not save failures")
    cli._common(p)
    return p


def build_replay_parser() -> argparse.ArgumentParser:
    p = cli._Parser(
        prog="acp-conformance replay",
        description="Replay regression files against a target: FIXED or STILL FAILING per "
                    "file. Without a target option each file replays against the target it "
                    "was found on (its header's 'target').",
        epilog="exit codes: 0 every file fixed, 1 at least one still failing, 2 usage or "
               "input error, 3 internal error")
    p.add_argument("files", nargs="+", type=Path, help="regression files (.jsonl) or folders")
    _target_args(p, required_hint="optional: the target to replay against")
    _model_args(p, fuzz=False)
    p.add_argument("--attempts", type=int, default=1, metavar="N",
                   help="replay a file up to N times; one failing replay is STILL FAILING "
                        "(for failures that depend on timing)")
    g = p.add_argument_group("grading (default: as recorded in each file)")
    g.add_argument("--profile", default=None, help="v2 rule profile")
    g.add_argument("--strict", action="store_true", help="turn every warn into a fail")
    g.add_argument("--schema-dir", type=Path,
                   help="also validate every frame against the official ACP JSON Schemas in "
                        "DIR (needed to replay a SCHEMA/official regression)")
    g.add_argument("--no-color", action="store_true", help="plain console output")
    return p


# -- fuzz ---------------------------------------------------------------------

def cmd_fuzz(argv: Sequence[str]) -> int:
    from conformance.fuzz import settings

    ns = build_fuzz_parser().parse_args(list(argv))
    cli._check_run_options(ns)
    if not (ns.agent or ns.client or ns.client_adapter):
        raise cli.UsageError("nothing to fuzz: give --agent CMD, --client CMD or "
                             "--client-adapter MODULE:FACTORY")
    if ns.agent and (ns.client or ns.client_adapter):
        raise cli.UsageError("--agent and --client fuzz different sides: run them separately")
    if ns.max_failures is not None and ns.max_failures < 1:
        raise cli.UsageError("--max-failures must be at least 1")
    if ns.baseline is not None:
        raise cli.UsageError("--baseline lists expected failures of cases; a fuzz run has "
                             "none (replay the regression library instead)")
    if (ns.model_server or ns.agent_config) and not ns.agent:
        raise cli.UsageError("--model-server and --agent-config need --agent: the model "
                             "stands behind an agent")
    try:
        effort = settings.get_effort(ns.effort, max_examples=ns.max_examples,
                                     time_budget=ns.time_budget)
        seed = settings.choose_seed(ns.seed)
    except ValueError as exc:
        raise cli.UsageError(str(exc)) from None
    options = cli._options(ns)
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
        model, command, env = cli._model_server(ns, ns.agent, [])
        try:
            result = _fuzz_agent(ns, effort, seed, options, progress, model, command, env)
        finally:
            if model is not None:
                model.stop()
    else:
        result = _fuzz_client(ns, effort, seed, options, progress)
    return _finish(ns, result, options)


def _fuzz_agent(ns: argparse.Namespace, effort: Any, seed: int, options: Any,
                progress: Any, model: Any, command: Any, env: dict[str, str]) -> Any:
    from conformance.fuzz.agent_machine import AgentFuzzConfig, run_agent_fuzz
    from conformance.fuzz.steps import AgentTarget
    from conformance.transport import split_command

    # The label keeps {model_url}: replay fills in the URL of its own model server.
    target = AgentTarget(split_command(command), ns.agent, env, ns.timeout)
    config = AgentFuzzConfig(target, protocols=tuple(cli._protocols(ns)), options=options,
                             strict=ns.strict, max_failures=ns.max_failures,
                             schema_dir=ns.schema_dir, model=model)
    return run_agent_fuzz(config, effort, seed, progress=progress)


def _fuzz_client(ns: argparse.Namespace, effort: Any, seed: int, options: Any,
                 progress: Any) -> Any:
    from conformance.fuzz.client_fuzz import client_target, run_client_fuzz

    target = client_target(ns)
    return run_client_fuzz(target, effort, seed, protocols=tuple(cli._protocols(ns)),
                           options=options, strict=ns.strict, max_failures=ns.max_failures,
                           progress=progress, schema_dir=ns.schema_dir)


def _finish(ns: argparse.Namespace, result: Any, options: Any) -> int:
    from conformance.fuzz import regressions
    from conformance.fuzz.report import indent, transcript_lines
    from conformance.fuzz.steps import describe

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
    print(f"{result.examples} {runs} in {result.elapsed:.1f} s, "
          f"{result.processes} process(es) started")
    for note in result.notes:
        print(f"note: {note}")
    saved_paths: dict[int, str] = {}
    for i, f in enumerate(result.failures):
        fp = failure_fingerprint(f)
        print()
        print(f"{f.finding.outcome.value.upper()} {f.requirement} (v{f.protocol}): "
              f"{f.finding.message}")
        if f.role == "agent":
            print(f"  minimal counterexample: {len(f.steps)} steps (found with {f.found_steps}, "
                  f"{f.shrink_attempts} shrinking replay(s))")
            for n, step in enumerate(f.steps, 1):
                print(f"    {n}. {describe(step)}")
            if f.model is not None:
                from conformance.fuzz.model_side import describe as describe_model

                print("  what the model said (shrunk model script):")
                for line in describe_model(f.model):
                    print(f"    {line}")
        else:
            from conformance.fuzz.client_fuzz import describe_stream

            print("  minimal counterexample: " + describe_stream(f.stream))
        also = sorted({x.requirement for x in f.findings} - {f.requirement})
        if also:
            print(f"  the same run also broke: {', '.join(also)}")
        print("  transcript:")
        print(indent(transcript_lines(f.transcript.entries, f.finding.entries)))
        if ns.transcripts is not None:
            path = Path(ns.transcripts) / f"fuzz-{fp}.jsonl"
            f.transcript.save(path)
            saved_paths[i] = str(path)
        if not ns.no_save:
            saved = regressions.save(directory, fingerprint_=fp,
                                     header=regression_header(f, result, options, ns.strict),
                                     entries=f.transcript.entries,
                                     cwd=_session_cwd(f.transcript))
            saved_paths[i] = str(saved.path)
            print(f"  {'already in the library' if saved.existed else 'saved'}: {saved.path}")
            print(f"  replay: acp-conformance replay {shlex.quote(str(saved.path))} {target}")
    print()
    print(f"seed {result.seed}: repeat this run with --seed {result.seed}")
    run = to_run_result(result, options, ns.strict, saved_paths)
    return cli._report(ns, run)


def failure_fingerprint(f: Any) -> str:
    from conformance.fuzz import regressions

    if f.role == "agent":
        counterexample: Any = regressions.agent_shape(f.steps, f.model)
    else:
        from conformance.fuzz.client_fuzz import stream_shape

        counterexample = stream_shape(f.stream)
    return regressions.fingerprint(f.requirement, regressions.failure_shape(
        f.role, f.protocol, counterexample, f.finding, f.transcript.entries))


def regression_header(f: Any, result: Any, options: Any, strict: bool) -> dict[str, Any]:
    header = dict(f.transcript.header)
    header.update({
        "protocol": f.protocol, "profile": options.profile.name, "strict": strict,
        "finding": f.finding.to_json(), "also": sorted({x.requirement for x in f.findings}
                                                       - {f.requirement}),
        "target": result.target, "seed": result.seed, "effort": result.effort.name,
        "fuzz": f.role,
    })
    if result.replay_with:
        header["replay_with"] = result.replay_with
    header.pop("case", None)
    if f.role == "agent":
        header["steps"] = f.steps
        if f.model is not None:
            header["model"] = f.model
    else:
        header["stream"] = f.stream
    return header


def _session_cwd(transcript: Any) -> str | None:
    """The working directory the suite gave the agent (session/new params)."""
    for e in transcript.entries:
        msg = e.msg
        if (e.src == "client" and isinstance(msg, dict) and msg.get("method") == "session/new"
                and isinstance(msg.get("params"), dict)):
            cwd = msg["params"].get("cwd")
            if isinstance(cwd, str):
                return cwd
    return None


def to_run_result(result: Any, options: Any, strict: bool,
                  saved: dict[int, str]) -> Any:
    """The fuzz run as a RunResult, so every report format works: one case per broken
    rule (its counterexample), and per protocol a case with what the passing runs showed."""
    from conformance import __version__
    from conformance.results import CaseResult, Finding, Outcome, RunResult

    run = RunResult(__version__, result.target, result.role, list(result.protocols),
                    options.profile.name, strict)
    for i, f in enumerate(result.failures):
        name = f"fuzz:{failure_fingerprint(f)}@v{f.protocol}"
        cr = CaseResult(name, f"fuzz counterexample for {f.requirement}", [f.requirement],
                        f.protocol, transcript_path=saved.get(i))
        cr.findings = [x.with_case(name) for x in f.findings]
        run.cases.append(cr)
    for protocol in result.protocols:
        rows = result.coverage.get(protocol, {})
        name = f"fuzz@v{protocol}"
        cr = CaseResult(name, f"{result.examples} generated run(s)", [], protocol,
                        note="" if rows else "no passing generated run on this version")
        broken = {f.requirement for f in result.failures if f.protocol == protocol}
        cr.findings = [x.with_case(name) for rid, x in sorted(rows.items())
                       if rid not in broken and x.outcome is not Outcome.FAIL]
        if not cr.findings and not rows:
            cr.findings = [Finding("FUZZ", Outcome.NOT_APPLICABLE,
                                   "not testable: " + ("; ".join(result.notes) or
                                                       "no run completed"), case=name)]
        run.cases.append(cr)
    return run


# -- replay ---------------------------------------------------------------------

def cmd_replay(argv: Sequence[str]) -> int:
    from conformance import profiles
    from conformance.checks import Options
    from conformance.fuzz import regressions

    ns = build_replay_parser().parse_args(list(argv))
    cli._check_run_options(ns)
    if ns.attempts < 1:
        raise cli.UsageError("--attempts must be at least 1")
    if ns.schema_dir is not None and not ns.schema_dir.is_dir():
        raise cli.UsageError(f"--schema-dir {ns.schema_dir}: no such directory")
    if ns.agent and (ns.client or ns.client_adapter):
        raise cli.UsageError("give --agent or --client, not both")
    paths = regressions.files(ns.files)
    if not paths:
        raise cli.UsageError("no regression files found")
    regs = [regressions.read(p) for p in paths]
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="acp-replay-") as cwd:
        for reg in regs:
            header_profile = reg.header.get("profile")
            try:
                profile = profiles.get(ns.profile or header_profile or profiles.DEFAULT_PROFILE)
            except KeyError as exc:
                raise cli.UsageError(str(exc.args[0])) from None
            options = Options(profile=profile)
            strict = ns.strict or bool(reg.header.get("strict"))
            verdict = _replay_one(ns, reg, options, strict, cwd)
            verdicts.append(verdict)
            _print_verdict(verdict, colour=sys.stdout.isatty() and not ns.no_color)
    still = sum(v.status == regressions.STILL_FAILING for v in verdicts)
    fixed = sum(v.status == regressions.FIXED for v in verdicts)
    skipped = len(verdicts) - still - fixed
    print(f"\n{len(verdicts)} regression(s): {still} still failing, {fixed} fixed"
          + (f", {skipped} not replayed" if skipped else ""))
    return cli.EXIT_FAIL if still else cli.EXIT_OK


def _replay_one(ns: argparse.Namespace, reg: Any, options: Any, strict: bool, cwd: str) -> Any:
    from conformance.fuzz import regressions
    from conformance.fuzz.steps import AgentTarget
    from conformance.transport import split_command

    if reg.role == "agent":
        if ns.client or ns.client_adapter:
            return regressions.Verdict(reg, regressions.NOT_REPLAYED,
                                       note="an agent regression needs --agent")
        command = ns.agent or reg.target
        if not command:
            raise cli.UsageError(f"{reg.path}: no --agent given and no target recorded")
        # A file with a model script gets the same model answers from a scripted model
        # server of its own ({model_url} filled in the command, env and configs).
        ns.model_server = reg.model is not None
        model, filled, env = cli._model_server(ns, command, [])
        target = AgentTarget(split_command(filled), command, env, ns.timeout)
        try:
            return regressions.replay_agent(reg, target, options=options, strict=strict,
                                            attempts=ns.attempts, cwd=cwd,
                                            schema_dir=ns.schema_dir, model=model)
        finally:
            if model is not None:
                model.stop()
    if ns.agent:
        return regressions.Verdict(reg, regressions.NOT_REPLAYED,
                                   note="a client regression needs --client or --client-adapter")
    from conformance.fuzz.client_fuzz import replay_client

    return replay_client(reg, ns, options=options, strict=strict, attempts=ns.attempts,
                         schema_dir=ns.schema_dir)


def _print_verdict(v: Any, *, colour: bool) -> None:
    from conformance.fuzz import regressions

    code = {regressions.FIXED: "32", regressions.STILL_FAILING: "31"}.get(v.status, "33")
    label = f"{v.status:<14}"
    if colour:
        label = f"\x1b[{code}m{label}\x1b[0m"
    reg = v.regression
    line = f"{label} {reg.path}  {reg.requirement} (v{reg.protocol})"
    if v.findings:
        first = v.findings[0]
        where = f" [#{','.join(map(str, first.entries[:4]))}]" if first.entries else ""
        line += f": {first.message}{where}"
    if v.note:
        line += f" ({v.note})"
    print(line)
    if v.others:
        print(f"{'':15}other rules broken in this replay: "
              f"{', '.join(sorted({f.requirement for f in v.others}))}")
