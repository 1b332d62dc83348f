"""The suite run (no subcommand): ``--agent CMD``, or ``--client CMD`` / ``--client-adapter``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import (
    SUBCOMMANDS,
    Parser,
    add_options,
    add_target_options,
    announce_out,
    build_masker,
    certify_options,
    check_run_options,
    common_options,
    default_outputs,
    grading_options,
    is_stdout,
    protocols_of,
    table_values,
)
from conformance.cli.output import interrupted, load_baseline, report_run
from conformance.settings.table import check_values, role_of
from conformance.usage import UsageError, env_pairs


def build_parser(subcommand: str | None = None) -> argparse.ArgumentParser:
    """The suite's options; ``subcommand="demo"`` for ``demo --help``."""
    commands = "\n".join(f"  {name:<11} {what}" for name, what in SUBCOMMANDS.items())
    p = Parser(
        prog="acp-conformance" + (f" {subcommand}" if subcommand else ""),
        usage=None if subcommand else (
            "%(prog)s --agent CMD | --client CMD | --client-adapter M:F [options]\n"
            "       %(prog)s --proxy CMD [--agent CMD] [options]\n"
            "       %(prog)s SUBCOMMAND [options]"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=SUBCOMMANDS[subcommand].capitalize() + "." if subcommand else
        "Conformance suite for message identity (messageId) in the Agent Client "
        "Protocol.\n\nsubcommands (acp-conformance SUBCOMMAND --help):\n" + commands,
        epilog="exit codes: 0 no fail, 1 at least one fail, 2 usage or input error,\n"
               "            3 internal error, 128+N interrupted by signal N (never a pass)")
    if subcommand is None:
        from conformance import __version__

        p.add_argument("--version", action="version", version=f"acp-conformance {__version__}")
    t = p.add_argument_group("target")
    add_target_options(t, commands=subcommand != "demo")
    if subcommand != "demo":
        add_options(t, "proxy", "proxy-adapts")
    else:
        t.set_defaults(proxy=None, proxy_adapts=False)
        t.add_argument("--broken", action="store_true",
                       help="run against a bundled broken agent and broken client instead: "
                            "see what a failure looks like (exits 1)")
    add_options(t, "turn-timeout", "grace", "jobs", "deadline", "repeat", "keep-going", "cases",
                "case")
    add_options(p.add_argument_group("scripted model (offline runs of LLM-backed agents)"),
                "model-server", "model-script", "agent-config")
    common_options(p)
    if subcommand != "demo":  # demo runs two targets: no one bundle
        certify_options(p.add_argument_group("certification (docs/certify.md)"))
    return p


def transcripts_folder(ns: argparse.Namespace) -> Any:
    """Where a run keeps its transcripts: --transcripts (set by default whenever a report
    is written, see ``options.keep_transcripts``), or a scratch folder kept until the
    reports are written (the findings' wire lines and the HTML report's transcripts come
    from it; no report names it). A context manager giving a path or None."""
    import contextlib
    import tempfile

    if not ns.transcripts:
        return tempfile.TemporaryDirectory(prefix="acp-conformance-")
    return contextlib.nullcontext(None)


def cmd_agent(ns: argparse.Namespace, command: str | list[str], label: str,
              masker: Any = None) -> int:
    from conformance import cases as casemod
    from conformance.agent.runner import AgentRun, run_agent_suite
    from conformance.engine import RunInterrupted
    from conformance.progress import Progress
    from conformance.transport import split_command

    check_run_options(ns)
    masker = masker if masker is not None else build_masker(ns)
    all_cases = casemod.load_dir(ns.cases)
    baseline = load_baseline(ns, all_cases)
    cases = casemod.select(all_cases, ns.case)
    model, command, env = model_server(ns, command, cases, masker)
    progress = Progress()
    with transcripts_folder(ns) as tmp:
        try:
            run = AgentRun(command=split_command(command), protocols=protocols_of(ns),
                           options=grading_options(ns), timeout=ns.timeout, strict=ns.strict,
                           transcripts=Path(tmp) if tmp else ns.transcripts,
                           schema_dir=ns.schema_dir, env=env,
                           progress=progress if progress.enabled else None,
                           model=model, model_script=getattr(ns, "model_script", None),
                           turn_timeout=ns.turn_timeout, handle_signals=True,
                           jobs=ns.jobs, repeat=ns.repeat, grace=ns.grace,
                           deadline=ns.deadline, keep_going=ns.keep_going, masker=masker)
            result = run_agent_suite(run, cases, label, all_cases, lambda: announce_out(ns))
        except RunInterrupted as exc:
            progress.close()
            return interrupted(ns, exc, baseline=baseline, cases=all_cases, scratch=bool(tmp),
                               masker=masker)
        finally:
            progress.close()
            if model is not None:
                model.stop()
                notice = model.tool_notice()
                if notice:  # once per run: its tool turns were played without a tool
                    print(notice, file=sys.stderr, flush=True)
        return report_run(ns, result, baseline=baseline, cases=all_cases, scratch=bool(tmp),
                          masker=masker)


def model_server(ns: argparse.Namespace, command: str | list[str], cases: Any,
                 masker: Any = None) -> tuple[Any, str | list[str], dict[str, str]]:
    """--model-server: start the scripted model server and fill in {model_url}; the server's
    request log is masked with ``masker`` as it records."""
    from conformance.modelserver.cases import prepare_run

    configs = [(Path(a), Path(b)) for a, b in env_pairs(getattr(ns, "agent_config", []),
                                                   "--agent-config").items()]
    return prepare_run(command, env_pairs(ns.agent_env), cases,
                       enabled=getattr(ns, "model_server", False),
                       script=getattr(ns, "model_script", None), configs=configs,
                       masker=masker)


def cmd_client(ns: argparse.Namespace, command: str | None = None, label: str | None = None,
               profile: Any = None, masker: Any = None) -> int:
    """The client suite: the suite plays the agent (see conformance/client/)."""
    from conformance import cases as casemod
    from conformance.client.adapter import AdapterError
    from conformance.client.profile import ProfileError, load
    from conformance.client.runner import ClientRun, ClientSetupError, run_client_suite
    from conformance.engine import RunInterrupted
    from conformance.progress import Progress

    check_run_options(ns)  # --agent, --client-adapter and --client-profile: the table's rules
    masker = masker if masker is not None else build_masker(ns)
    command = command or ns.client
    try:
        if profile is None and ns.client_profile is not None:
            profile = load(ns.client_profile)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    all_cases = casemod.load_dir(ns.cases)
    baseline = load_baseline(ns, all_cases)
    cases = casemod.select(all_cases, ns.case)
    progress = Progress()
    with transcripts_folder(ns) as tmp:
        run = ClientRun(protocols=protocols_of(ns), options=grading_options(ns),
                        command=command, adapter=ns.client_adapter if not command else None,
                        profile=profile, timeout=ns.timeout, strict=ns.strict,
                        transcripts=Path(tmp) if tmp else ns.transcripts,
                        env=env_pairs(ns.agent_env),
                        progress=progress if progress.enabled else None,
                        turn_timeout=ns.turn_timeout, handle_signals=True,
                        jobs=ns.jobs, deadline=ns.deadline, keep_going=ns.keep_going,
                        masker=masker, repeat=ns.repeat)
        try:
            def started() -> None:
                announce_out(ns)
                if command and profile is None and not ns.quiet:  # what it cannot measure
                    print(no_profile_line(), flush=True)

            result = run_client_suite(run, cases, label or command or ns.client_adapter,
                                      all_cases, started)
        except RunInterrupted as exc:
            progress.close()
            return interrupted(ns, exc, baseline=baseline, cases=all_cases, scratch=bool(tmp),
                               masker=masker)
        except (ClientSetupError, AdapterError, ProfileError) as exc:
            raise UsageError(str(exc)) from None
        finally:
            progress.close()
        return report_run(ns, result, baseline=baseline, cases=all_cases, scratch=bool(tmp),
                          masker=masker)


def no_profile_line() -> str:
    """What a client run without --client-profile cannot observe, in one line."""
    from conformance.checks import all_rules
    from conformance.checks.observe import NO_PROFILE

    shown = sorted({r.id.split("/", 1)[0] for r in all_rules().values()
                    if r.untested == NO_PROFILE})
    return ("no --client-profile: the suite cannot read what the client shows, so "
            f"{', '.join(shown)} are not exercised (the verdict says partial)")


def cmd_proxy(ns: argparse.Namespace) -> int:
    """The proxy suite: the suite plays both ends (see conformance/proxy/)."""
    from conformance import cases as casemod
    from conformance.engine import RunInterrupted
    from conformance.progress import Progress
    from conformance.proxy.runner import (
        ProxyRun,
        ProxySetupError,
        proxy_template,
        run_proxy_suite,
    )
    from conformance.transport import split_command

    check_run_options(ns)  # --proxy-adapts with --protocol 1: the table's rule
    if getattr(ns, "certify", None) is not None and ns.transcripts is None:
        raise UsageError("--certify keeps every transcript: not with --no-transcripts")
    all_cases = casemod.load_dir(ns.cases)
    baseline = load_baseline(ns, all_cases)
    cases = casemod.select(all_cases, ns.case)
    masker = build_masker(ns)
    model, agent, env = None, ns.agent, env_pairs(ns.agent_env)
    if ns.agent:  # a real agent behind the proxy may need the scripted model
        model, agent, env = model_server(ns, ns.agent, cases, masker)
    elif getattr(ns, "model_server", False) or getattr(ns, "model_script", None):
        raise UsageError("--model-server serves a real agent behind the proxy: give --agent CMD")
    progress = Progress()
    run = ProxyRun(proxy=ns.proxy, protocols=protocols_of(ns), options=grading_options(ns),
                   agent=split_command(agent) if agent else None, model=model,
                   model_script=getattr(ns, "model_script", None),
                   adapts=ns.proxy_adapts, timeout=ns.timeout, strict=ns.strict,
                   transcripts=ns.transcripts, schema_dir=ns.schema_dir,
                   env=env, progress=progress if progress.enabled else None,
                   turn_timeout=ns.turn_timeout, handle_signals=True, jobs=ns.jobs,
                   deadline=ns.deadline, keep_going=ns.keep_going, masker=masker,
                   repeat=ns.repeat, grace=ns.grace)
    try:
        proxy_template(ns.proxy)  # a command without {agent}: one error line, nothing more
        results = run_proxy_suite(run, cases, ns.proxy, all_cases, lambda: announce_out(ns))
    except RunInterrupted as exc:
        progress.close()
        return interrupted(ns, exc, baseline=baseline, cases=all_cases, masker=masker)
    except ProxySetupError as exc:
        raise UsageError(str(exc)) from None
    finally:
        progress.close()
        if model is not None:
            model.stop()
    status = report_run(ns, results, baseline=baseline, cases=all_cases, masker=masker)
    if results.behind is not None:
        report_agent_behind(ns, masker.data(results.behind))  # apart: the run grades the proxy
    return status


def report_agent_behind(ns: argparse.Namespace, result: Any) -> int:
    """The real agent's own findings, apart from the proxy's: a console section and, with
    --json, a JSON report beside the proxy's (``NAME.agent.json``)."""
    import sys

    from conformance.report import console_summary, write_json
    from conformance.report.catalogue import run_date

    result.date = result.date or run_date()
    print("\nThe agent behind the proxy (its own findings, graded on what it wrote before "
          "the proxy; not the proxy's):")
    print(console_summary(result, colour=sys.stdout.isatty() and not ns.no_color,
                          verbose=ns.verbose, show=getattr(ns, "show", None) or "failures"))
    if getattr(ns, "json", None) and not is_stdout(ns.json):  # stdout holds the proxy's
        path = Path(ns.json)
        write_json(result, path.with_name(path.stem + ".agent" + path.suffix))
    return 1 if result.failed else 0  # the agent's own verdict (the run's is the proxy's)


def main(args: Sequence[str]) -> int:
    ns = build_parser().parse_args(list(args))
    default_outputs(ns)
    values = table_values(ns)
    role = role_of(values)
    if role is None:
        raise UsageError("nothing to test: give --agent CMD (or a subcommand: "
                         f"{', '.join(SUBCOMMANDS)})")
    check_values(values, "cli", role=role)  # an option of another role is refused
    if role == "proxy":
        return cmd_proxy(ns)
    if role == "client":
        return cmd_client(ns)
    return cmd_agent(ns, ns.agent, ns.agent)
