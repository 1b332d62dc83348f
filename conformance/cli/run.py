"""The suite run (no subcommand): ``--agent CMD``, or ``--client CMD`` / ``--client-adapter``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import (
    DEFAULT_TIMEOUT,
    SUBCOMMANDS,
    Parser,
    add_target_options,
    announce_out,
    build_masker,
    certify_options,
    check_run_options,
    common_options,
    default_outputs,
    find_model_script,
    grading_options,
    parse_jobs,
    parse_repeat,
    protocols_of,
)
from conformance.cli.output import interrupted, is_stdout, load_baseline, report_run
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
    add_target_options(t, timeout=DEFAULT_TIMEOUT, commands=subcommand != "demo")
    if subcommand != "demo":
        t.add_argument("--proxy", metavar="CMD",
                       help="proxy, bridge or gateway command to test; {agent} marks where the "
                            "agent command goes (the suite's agent double, or --agent CMD), "
                            "e.g. 'my-bridge --upstream {agent}'")
        t.add_argument("--proxy-adapts", action="store_true",
                       help="the proxy is a declared v2-to-v1 adapter: v2 behind it, v1 in "
                            "front (the v2 cases run; MID-V2-10 is graded)")
    else:
        t.set_defaults(proxy=None, proxy_adapts=False)
        t.add_argument("--broken", action="store_true",
                       help="run against a bundled broken agent and broken client instead: "
                            "see what a failure looks like (exits 1)")
    t.add_argument("--turn-timeout", type=float, default=None, metavar="SECONDS",
                   help="longest any single wait may last even while the target keeps "
                        "writing, e.g. a stream that never ends (default: 6 x --timeout)")
    t.add_argument("--grace", type=float, default=None, metavar="SECONDS",
                   help="silence that closes a cancelled turn, a replay or a retry before the "
                        "next step (default 0.25): what the target writes later is read as "
                        "the next step's; a finding that rests on it says so (lengthen it on "
                        "a slow machine)")
    t.add_argument("-j", "--jobs", type=parse_jobs, default="auto", metavar="N",
                   help="cases run at the same time (default auto: the number of cores; "
                        "-j 1 runs them one after another); the reports do not depend on it")
    t.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                   help="longest the whole run may last: then the case in progress is cut and "
                        "graded, the rest are not run, and the run exits 1")
    t.add_argument("--repeat", type=parse_repeat, default=1, metavar="N",
                   help="play every case N times (default 1): a rule whose outcome differs "
                        "between them is reported as unstable ('fails in 2 of 5 runs') with "
                        "a transcript of each outcome; a fault seen in any run still counts")
    t.add_argument("--keep-going", action="store_true",
                   help="run every case even after two in a row hit the same target fault")
    t.add_argument("--cases", type=Path, metavar="DIR", help="case directory (default: bundled)")
    t.add_argument("--case", action="append", default=[], metavar="SELECTOR",
                   help="run only the cases this selects: a case, requirement or sub-rule ID, "
                        "or a glob of any of them ('load-*', 'MID-A-0*') (repeatable)")
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

    check_run_options(ns)
    masker = masker if masker is not None else build_masker(ns)
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

    check_run_options(ns)
    if ns.client or ns.client_adapter:
        raise UsageError("--proxy and --client test different sides: run them separately")
    if getattr(ns, "certify", None) is not None and ns.transcripts is None:
        raise UsageError("--certify keeps every transcript: not with --no-transcripts")
    if ns.proxy_adapts and protocols_of(ns) == [1]:
        raise UsageError("--proxy-adapts runs the v2 cases (v2 behind the proxy, v1 in front): "
                         "not with --protocol 1")
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


#: The options a role does not use: given with it, they are refused (one line naming the
#: option and the role), not silently ignored. Demo runs both roles, so it is not held to it.
NOT_FOR_ROLE = {
    "agent": ("client_profile", "client_adapter", "proxy_adapts"),
    "client": ("proxy_adapts", "grace", "model_server", "model_script", "agent_config"),
    "proxy": ("client", "client_profile", "client_adapter"),
}


def refuse_other_roles(ns: argparse.Namespace, role: str) -> None:
    for opt in NOT_FOR_ROLE[role]:
        if getattr(ns, opt, None):
            tested = {"agent": "--agent", "client": "--client/--client-adapter",
                      "proxy": "--proxy"}[role]
            raise UsageError(f"--{opt.replace('_', '-')} does not apply to the {role} role "
                             f"({tested}): leave it out")


def main(args: Sequence[str]) -> int:
    ns = build_parser().parse_args(list(args))
    default_outputs(ns)
    if ns.proxy:
        refuse_other_roles(ns, "proxy")
        return cmd_proxy(ns)
    if ns.client or ns.client_adapter:
        refuse_other_roles(ns, "client")
        return cmd_client(ns)
    if not ns.agent:
        raise UsageError("nothing to test: give --agent CMD (or a subcommand: "
                         f"{', '.join(SUBCOMMANDS)})")
    refuse_other_roles(ns, "agent")
    return cmd_agent(ns, ns.agent, ns.agent)
