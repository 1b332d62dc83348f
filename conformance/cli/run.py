"""The suite run (no subcommand): one run command for every role (``--agent CMD``,
``--client CMD`` / ``--client-adapter``, ``--proxy CMD``), looked up in the roles table
(:mod:`conformance.roles`)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    protocols_of,
    table_values,
)
from conformance.cli.output import interrupted, load_baseline, report_run
from conformance.settings.table import spelling
from conformance.usage import UsageError, env_pairs

if TYPE_CHECKING:
    from conformance.roles import Role


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
    import tempfile

    if not ns.transcripts:
        return tempfile.TemporaryDirectory(prefix="acp-conformance-")
    return contextlib.nullcontext(None)


def cmd_run(ns: argparse.Namespace, role: Role, *, target: Any = None, label: str | None = None,
            masker: Any = None, values: Mapping[str, Any] | None = None) -> int:
    """The suite run of ``role`` (an entry of :data:`conformance.roles.ROLES`): its target the
    options name, or ``target`` (demo's bundled ones, named ``label``); ``values`` add to the
    option values (demo's reference client profile)."""
    from conformance import cases as casemod
    from conformance.engine import RunInterrupted, run_suite
    from conformance.progress import Progress
    from conformance.roles import Given, make_run

    check_run_options(ns)
    values = {**table_values(ns), **(values or {})}
    role.check(values, spelling("cli"))
    masker = masker if masker is not None else build_masker(ns)
    target = target if target is not None else role.target(values)
    all_cases = casemod.load_dir(ns.cases)
    baseline = load_baseline(ns, all_cases)
    cases = casemod.select(all_cases, ns.case)
    model, served, env = None, role.served(target, values), env_pairs(ns.agent_env)
    if served:  # an agent the scripted model may serve
        model, served, env = model_server(ns, served, cases, masker)
    progress = Progress()
    folder = transcripts_folder(ns) if role.scratch else contextlib.nullcontext(None)
    with folder as tmp:
        try:
            shared = dict(protocols=protocols_of(ns), options=grading_options(ns),
                          timeout=ns.timeout, strict=ns.strict,
                          transcripts=Path(tmp) if tmp else ns.transcripts, env=env,
                          progress=progress if progress.enabled else None,
                          turn_timeout=ns.turn_timeout, handle_signals=True, jobs=ns.jobs,
                          repeat=ns.repeat, deadline=ns.deadline, keep_going=ns.keep_going,
                          masker=masker)
            run = make_run(role, Given(values, target, shared, model=model, served=served))
            suite = role.suite(run, cases, label or str(target), all_cases)

            def started() -> None:
                announce_out(ns)
                notice = role.notice(run)
                if notice and not ns.quiet:  # what the run cannot measure
                    print(notice, flush=True)

            result = run_suite(suite, run, started=started)
        except RunInterrupted as exc:
            progress.close()
            return interrupted(ns, exc, baseline=baseline, cases=all_cases, scratch=bool(tmp),
                               masker=masker)
        except role.errors() as exc:
            raise UsageError(str(exc)) from None
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


def main(args: Sequence[str]) -> int:
    from conformance.roles import check_options, role_of

    ns = build_parser().parse_args(list(args))
    default_outputs(ns)
    values = table_values(ns)
    role = role_of(values)
    if role is None:
        raise UsageError("nothing to test: give --agent CMD (or a subcommand: "
                         f"{', '.join(SUBCOMMANDS)})")
    check_options(values, "cli", role)  # an option of another role is refused
    return cmd_run(ns, role)
