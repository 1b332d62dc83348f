"""The suite run (no subcommand): ``--agent CMD``, or ``--client CMD`` / ``--client-adapter``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import (
    SUBCOMMANDS,
    Parser,
    add_target_options,
    check_run_options,
    common_options,
    default_outputs,
    find_model_script,
    grading_options,
    parse_jobs,
    protocols_of,
)
from conformance.cli.output import interrupted, load_baseline, report_run
from conformance.usage import UsageError, env_pairs


def build_parser(subcommand: str | None = None) -> argparse.ArgumentParser:
    """The suite's options; ``subcommand="demo"`` for ``demo --help``."""
    commands = "\n".join(f"  {name:<11} {what}" for name, what in SUBCOMMANDS.items())
    p = Parser(
        prog="acp-conformance" + (f" {subcommand}" if subcommand else ""),
        usage=None if subcommand else (
            "%(prog)s --agent CMD | --client CMD | --client-adapter M:F [options]\n"
            "       %(prog)s SUBCOMMAND [options]"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=SUBCOMMANDS[subcommand].capitalize() + "." if subcommand else
        "Conformance suite for message identity (messageId) in the Agent Client "
        "Protocol.\n\nsubcommands (acp-conformance SUBCOMMAND --help):\n" + commands,
        epilog="exit codes: 0 no fail, 1 at least one fail, 2 usage or input error, "
               "3 internal error")
    t = p.add_argument_group("target")
    add_target_options(t, timeout=10.0, commands=subcommand != "demo")
    t.add_argument("--turn-timeout", type=float, default=None, metavar="SECONDS",
                   help="longest any single wait may last even while the target keeps "
                        "writing, e.g. a stream that never ends (default: 6 x --timeout)")
    t.add_argument("-j", "--jobs", type=parse_jobs, default="auto", metavar="N",
                   help="cases run at the same time (default auto: the number of cores; "
                        "-j 1 runs them one after another); the reports do not depend on it")
    t.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                   help="longest the whole run may last: then the case in progress is cut and "
                        "graded, the rest are not run, and the run exits 1")
    t.add_argument("--keep-going", action="store_true",
                   help="run every case even after two in a row hit the same target fault")
    t.add_argument("--cases", type=Path, metavar="DIR", help="case directory (default: bundled)")
    t.add_argument("--case", action="append", default=[], metavar="ID",
                   help="run only this case, case prefix (load-*) or requirement (repeatable)")
    m = p.add_argument_group("scripted model (offline runs of LLM-backed agents)")
    m.add_argument("--model-server", action="store_true",
                   help="serve scripted OpenAI/Anthropic/Gemini APIs on 127.0.0.1 for the run; "
                        "the agent gets OPENAI_BASE_URL, ANTHROPIC_BASE_URL, "
                        "GOOGLE_GEMINI_BASE_URL and dummy keys; {model_url} is filled in the "
                        "command, --agent-env values and --agent-config templates")
    m.add_argument("--model-script", type=find_model_script, metavar="NAME|FILE",
                   help="play this model script (a YAML file, or the name of a bundled one: "
                        "see 'acp-conformance list') in every case instead of the case's own "
                        "(implies --model-server)")
    m.add_argument("--agent-config", action="append", default=[], metavar="TEMPLATE=DEST",
                   help="write TEMPLATE to DEST with {model_url} filled in (repeatable)")
    common_options(p)
    return p


def cmd_agent(ns: argparse.Namespace, command: str | list[str], label: str) -> int:
    import contextlib
    import tempfile

    from conformance import cases as casemod
    from conformance.progress import Progress
    from conformance.runner import AgentRun, RunInterrupted, run_agent_suite
    from conformance.transport import split_command

    check_run_options(ns)
    all_cases = casemod.load_dir(ns.cases)
    baseline = load_baseline(ns, all_cases)
    cases = casemod.select(all_cases, ns.case)
    model, command, env = model_server(ns, command, cases)
    # The HTML report shows every case's wire transcript: without --transcripts they are
    # kept in a scratch folder until the report is written.
    scratch = (tempfile.TemporaryDirectory(prefix="acp-conformance-")
               if ns.html and not ns.transcripts else contextlib.nullcontext(None))
    progress = Progress()
    with scratch as tmp:
        try:
            run = AgentRun(command=split_command(command), protocols=protocols_of(ns),
                           options=grading_options(ns), timeout=ns.timeout, strict=ns.strict,
                           transcripts=Path(tmp) if tmp else ns.transcripts,
                           schema_dir=ns.schema_dir, env=env,
                           progress=progress if progress.enabled else None,
                           model=model, model_script=getattr(ns, "model_script", None),
                           turn_timeout=ns.turn_timeout, handle_signals=True,
                           jobs=ns.jobs,
                           deadline=ns.deadline, keep_going=ns.keep_going)
            result = run_agent_suite(run, cases, label)
        except RunInterrupted as exc:
            progress.close()
            return interrupted(ns, exc, baseline=baseline, cases=all_cases, scratch=bool(tmp))
        finally:
            progress.close()
            if model is not None:
                model.stop()
        return report_run(ns, result, baseline=baseline, cases=all_cases, scratch=bool(tmp))


def model_server(ns: argparse.Namespace, command: str | list[str],
                  cases: Any) -> tuple[Any, str | list[str], dict[str, str]]:
    """--model-server: start the scripted model server and fill in {model_url}."""
    from conformance.modelserver.cases import prepare_run

    configs = [(Path(a), Path(b)) for a, b in env_pairs(getattr(ns, "agent_config", []),
                                                   "--agent-config").items()]
    return prepare_run(command, env_pairs(ns.agent_env), cases,
                       enabled=getattr(ns, "model_server", False),
                       script=getattr(ns, "model_script", None), configs=configs)


def cmd_client(ns: argparse.Namespace, command: str | None = None, label: str | None = None,
               profile: Any = None) -> int:
    """The client suite: the suite plays the agent (see conformance/client/)."""
    from conformance import cases as casemod
    from conformance.client.adapter import AdapterError
    from conformance.client.profile import ProfileError, load
    from conformance.client.runner import ClientRun, ClientSetupError, run_client_suite
    from conformance.progress import Progress
    from conformance.runner import RunInterrupted

    check_run_options(ns)
    if ns.agent and command is None:
        raise UsageError("--agent and --client test different sides: run them separately")
    command = command or ns.client
    if command and ns.client_adapter:
        raise UsageError("give --client CMD or --client-adapter MODULE:FACTORY, not both")
    try:
        if profile is None and ns.client_profile is not None:
            profile = load(ns.client_profile)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    if profile is not None and ns.client_adapter:
        raise UsageError("--client-profile drives a client process; an adapter reports its "
                         "messages itself")
    all_cases = casemod.load_dir(ns.cases)
    baseline = load_baseline(ns, all_cases)
    cases = casemod.select(all_cases, ns.case)
    progress = Progress()
    run = ClientRun(protocols=protocols_of(ns), options=grading_options(ns), command=command,
                    adapter=ns.client_adapter if not command else None, profile=profile,
                    timeout=ns.timeout, strict=ns.strict, transcripts=ns.transcripts,
                    env=env_pairs(ns.agent_env), progress=progress if progress.enabled else None,
                    turn_timeout=ns.turn_timeout, handle_signals=True,
                    jobs=ns.jobs, deadline=ns.deadline, keep_going=ns.keep_going)
    try:
        result = run_client_suite(run, cases, label or command or ns.client_adapter)
    except RunInterrupted as exc:
        progress.close()
        return interrupted(ns, exc, baseline=baseline, cases=all_cases)
    except (ClientSetupError, AdapterError, ProfileError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        progress.close()
    return report_run(ns, result, baseline=baseline, cases=all_cases)


def main(args: Sequence[str]) -> int:
    ns = build_parser().parse_args(list(args))
    default_outputs(ns)
    if ns.client or ns.client_adapter:
        return cmd_client(ns)
    if not ns.agent:
        raise UsageError("nothing to test: give --agent CMD (or a subcommand: "
                         f"{', '.join(SUBCOMMANDS)})")
    return cmd_agent(ns, ns.agent, ns.agent)
