"""Command line: a thin shell over the runner. Exit codes:

0  no fail;  1  at least one fail (including a target that crashed, hung or
broke framing);  2  usage error or invalid input (bad option, unknown case,
malformed case file or transcript, target command not found);  3  internal
error of the suite.

Heavy imports (jsonschema, hypothesis, pexpect) happen only in the commands
that need them, so ``--help`` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
SUBCOMMANDS = {  # name: what it does, for --help (one line each; each has its own --help)
    "demo": "the suite against the bundled reference agent and client",
    "check": "grade recorded transcripts (files or folders) offline",
    "list": "cases, rules and bundled model scripts (--traceability)",
    "lint-cases": "lint the case files against the requirement catalogue",
    "report": "rebuild a run's reports from its JSON report (--from FILE)",
    "fuzz": "generated sessions or streams until a rule breaks; shrunk, saved",
    "replay": "replay saved regression files: FIXED or STILL FAILING",
}


class UsageError(Exception):
    """Bad options or input: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (option and problem), exit 2, no usage dump."""

    def error(self, message: str) -> Any:  # argparse calls it and expects no return
        raise UsageError(f"{message} (see {self.prog} --help)")


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("grading")
    g.add_argument("--protocol", choices=["1", "2", "both"], default="both",
                   help="protocol version(s) to test (default: both, as negotiated)")
    g.add_argument("--profile", default=None,
                   help="v2 rule profile: acp-sdk-2.4.0 (default, newest published rules) "
                        "or acp-repo-2026-08-22")
    g.add_argument("--strict", action="store_true", help="turn every warn into a fail")
    g.add_argument("--strict-ids", action="store_true",
                   help="a v1 agent that sends no IDs at all is warn instead of info (C-10)")
    g.add_argument("--cross-turn-reuse", choices=["fail", "warn"], default="fail",
                   help="grade of MID-A-02/cross-turn-reuse (default fail)")
    g.add_argument("--schema-dir", type=Path,
                   help="validate every frame against the official ACP JSON Schemas in DIR "
                        "(a folder with v1/schema.json and v2/schema.json)")
    o = p.add_argument_group("output")
    o.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report here")
    o.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML here")
    o.add_argument("--transcripts", type=Path, metavar="DIR",
                   help="write one transcript per case into DIR")
    _report_outputs(o)
    o.add_argument("-v", "--verbose", action="store_true", help="show every requirement's finding")


def _report_outputs(o: Any) -> None:
    o.add_argument("--html", type=Path, metavar="PATH",
                   help="write a self-contained HTML report (statement, requirements, findings, "
                        "wire transcripts) here")
    o.add_argument("--markdown", type=Path, metavar="PATH",
                   help="write a Markdown summary with the certification statement here "
                        "(e.g. $GITHUB_STEP_SUMMARY)")
    o.add_argument("--baseline", type=Path, metavar="FILE",
                   help="expected failures (case:requirement per entry): listed fails do not "
                        "fail the run, unlisted ones do, listed entries that now pass are stale "
                        "and fail the run")
    o.add_argument("--no-color", action="store_true", help="plain console output")


def _jobs(text: str) -> int:
    """``--jobs N`` or ``auto`` (the number of cores)."""
    if text == "auto":
        return os.cpu_count() or 1
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {n}")
    return n


def add_target_options(t: Any, *, timeout: float) -> None:
    """The options that name the target; shared by the suite and the fuzzer."""
    t.add_argument("--agent", metavar="CMD", help="agent command to test, e.g. 'my-agent --acp'")
    t.add_argument("--agent-env", action="append", default=[], metavar="K=V",
                   help="extra environment for the agent (repeatable)")
    t.add_argument("--client", metavar="CMD",
                   help="client command to test; {agent} marks where the suite's agent double "
                        "goes, {prompt} makes it a one-shot client, e.g. "
                        "'my-editor --headless --agent-cmd {agent}'")
    t.add_argument("--client-profile", type=Path, metavar="FILE",
                   help="how to drive the client through a pty and read its messages (YAML); "
                        "without it only wire checks and liveness are graded")
    t.add_argument("--client-adapter", metavar="MODULE:FACTORY",
                   help="test an in-process library client through the adapter API")
    t.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                   help="longest silence allowed while waiting for the target "
                        f"(default {timeout:g})")


def _model_script(value: str) -> Path:
    from conformance.modelserver.cases import find_script

    return find_script(value)


def build_parser(subcommand: str | None = None) -> argparse.ArgumentParser:
    """The suite's options; ``subcommand="demo"`` for ``demo --help``."""
    commands = "\n".join(f"  {name:<11} {what}" for name, what in SUBCOMMANDS.items())
    p = _Parser(
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
    add_target_options(t, timeout=10.0)
    t.add_argument("--turn-timeout", type=float, default=None, metavar="SECONDS",
                   help="longest any single wait may last even while the target keeps "
                        "writing, e.g. a stream that never ends (default: 6 x --timeout)")
    t.add_argument("-j", "--jobs", type=_jobs, default="auto", metavar="N",
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
    m.add_argument("--model-script", type=_model_script, metavar="NAME|FILE",
                   help="play this model script (a YAML file, or the name of a bundled one: "
                        "see 'acp-conformance list') in every case instead of the case's own "
                        "(implies --model-server)")
    m.add_argument("--agent-config", action="append", default=[], metavar="TEMPLATE=DEST",
                   help="write TEMPLATE to DEST with {model_url} filled in (repeatable)")
    _common(p)
    return p


def build_check_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="acp-conformance check",
                                description="Grade recorded transcripts offline (no process).")
    p.add_argument("files", nargs="+", type=Path, help="transcript files (.jsonl) or folders")
    _common(p)
    return p


def build_list_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="acp-conformance list",
                                description="List cases and requirements.")
    p.add_argument("--cases", type=Path, metavar="DIR", help="case directory (default: bundled)")
    p.add_argument("--traceability", action="store_true",
                   help="map every catalogue requirement to its cases, rules, checkers and "
                        "broken fixtures, with what is excluded and why")
    return p


def build_report_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="acp-conformance report",
                                description="Rebuild the reports of a run from its JSON report.")
    p.add_argument("--from", dest="source", type=Path, required=True, metavar="FILE",
                   help="a JSON report written with --json")
    p.add_argument("--cases", type=Path, metavar="DIR",
                   help="case directory for the traceability section (default: bundled)")
    o = p.add_argument_group("output")
    o.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML here")
    _report_outputs(o)
    o.add_argument("-v", "--verbose", action="store_true", help="show every requirement's finding")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # text from a target never crashes the console
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        if args and args[0] == "list":
            return cmd_list(build_list_parser().parse_args(args[1:]))
        if args and args[0] == "lint-cases":
            return cmd_lint_cases(build_list_parser().parse_args(args[1:]))
        if args and args[0] == "check":
            return cmd_check(build_check_parser().parse_args(args[1:]))
        if args and args[0] == "report":
            return cmd_report(build_report_parser().parse_args(args[1:]))
        if args and args[0] in ("fuzz", "replay"):  # Hypothesis loads only when a run starts
            from conformance.fuzz import commands

            return (commands.cmd_fuzz if args[0] == "fuzz" else commands.cmd_replay)(args[1:])
        if args and args[0] == "demo":
            ns = build_parser("demo").parse_args(args[1:])
            _default_outputs(ns)
            return cmd_demo(ns)
        ns = build_parser().parse_args(args)
        _default_outputs(ns)
        if ns.client or ns.client_adapter:
            return cmd_client(ns)
        if not ns.agent:
            raise UsageError("nothing to test: give --agent CMD (or a subcommand: "
                             f"{', '.join(SUBCOMMANDS)})")
        return cmd_agent(ns, ns.agent, ns.agent)
    except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        print("acp-conformance: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the three error families are sorted here
        return _error_exit(exc)


DEFAULT_REPORTS = Path("reports")


def _default_outputs(ns: argparse.Namespace) -> None:
    """A run with no report option writes JSON and JUnit under ./reports/."""
    if not any(getattr(ns, o, None) for o in ("json", "junit", "html", "markdown")):
        ns.json = DEFAULT_REPORTS / "acp-conformance.json"
        ns.junit = DEFAULT_REPORTS / "acp-conformance.xml"
        ns.default_reports = True


def _error_exit(exc: Exception) -> int:
    from conformance.baseline import BaselineError
    from conformance.cases import CaseError
    from conformance.report.jsonreport import ReportFormatError
    from conformance.transcript import TranscriptError
    from conformance.transport import TargetCommandError

    if isinstance(exc, (UsageError, CaseError, TranscriptError, TargetCommandError,
                        BaselineError, ReportFormatError)):
        print(f"acp-conformance: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if os.environ.get("ACP_CONFORMANCE_DEBUG"):
        raise exc
    print(f"acp-conformance: internal error: {type(exc).__name__}: {str(exc)[:300]} "
          "(set ACP_CONFORMANCE_DEBUG=1 for the traceback)", file=sys.stderr)
    return EXIT_INTERNAL


def _options(ns: argparse.Namespace, header_profile: str | None = None) -> Any:
    from conformance import profiles
    from conformance.checks import Options
    from conformance.results import Outcome

    name = ns.profile or header_profile or profiles.DEFAULT_PROFILE
    try:
        profile = profiles.get(name)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    if ns.schema_dir is not None and not ns.schema_dir.is_dir():
        raise UsageError(f"--schema-dir {ns.schema_dir}: no such directory")
    return Options(profile=profile, cross_turn_reuse=Outcome(ns.cross_turn_reuse),
                   strict_ids=ns.strict_ids)


def _protocols(ns: argparse.Namespace) -> list[int]:
    return [1, 2] if ns.protocol == "both" else [int(ns.protocol)]


def _env(pairs: list[str], option: str = "--agent-env") -> dict[str, str]:
    env = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"{option} {pair!r}: expected KEY=VALUE")
        k, v = pair.split("=", 1)
        env[k] = v
    return env


def _writable(option: str, folder: Path) -> None:
    """The nearest existing folder on the way to ``folder`` must take new files."""
    existing = folder.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option}: cannot write into {existing}")


def _check_run_options(ns: argparse.Namespace) -> None:
    """Options a run would trip over only at its end: refused before anything starts."""
    import math

    for opt in ("timeout", "turn_timeout", "deadline"):
        value = getattr(ns, opt, None)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"--{opt.replace('_', '-')} must be a positive number of seconds")
    for opt in ("json", "junit", "html", "markdown"):
        path = getattr(ns, opt, None)
        if path is not None and Path(path).is_dir():
            raise UsageError(f"--{opt} {path}: is a directory, expected a file path")
        if path is not None:
            _writable(f"--{opt}", Path(path).parent)
    transcripts = getattr(ns, "transcripts", None)
    if transcripts is not None and Path(transcripts).exists() and not Path(transcripts).is_dir():
        raise UsageError(f"--transcripts {transcripts}: exists and is not a directory")
    if transcripts is not None:
        _writable("--transcripts", Path(transcripts))
    if getattr(ns, "schema_dir", None) is not None:
        from conformance.schema import schema_path

        options = _options(ns)  # also refuses a missing folder or an unknown profile
        for protocol in _protocols(ns):
            schema_path(ns.schema_dir, protocol, options.profile)


def _interrupted(ns: argparse.Namespace, exc: Any, **report: Any) -> int:
    """SIGINT/SIGTERM: the reports cover what was graded; exit 128 + signal number."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not tear the reports
    _report(ns, exc.result, **report)
    print(f"acp-conformance: {exc}; the reports cover the {len(exc.result.cases)} case(s) "
          "graded so far", file=sys.stderr)
    return 128 + int(exc.signum)


def cmd_agent(ns: argparse.Namespace, command: str | list[str], label: str) -> int:
    import contextlib
    import tempfile

    from conformance import cases as casemod
    from conformance.progress import Progress
    from conformance.runner import AgentRun, RunInterrupted, run_agent_suite
    from conformance.transport import split_command

    _check_run_options(ns)
    all_cases = casemod.load_dir(ns.cases)
    baseline = _baseline(ns, all_cases)
    cases = casemod.select(all_cases, ns.case)
    model, command, env = _model_server(ns, command, cases)
    # The HTML report shows every case's wire transcript: without --transcripts they are
    # kept in a scratch folder until the report is written.
    scratch = (tempfile.TemporaryDirectory(prefix="acp-conformance-")
               if ns.html and not ns.transcripts else contextlib.nullcontext(None))
    progress = Progress()
    with scratch as tmp:
        try:
            run = AgentRun(command=split_command(command), protocols=_protocols(ns),
                           options=_options(ns), timeout=ns.timeout, strict=ns.strict,
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
            return _interrupted(ns, exc, baseline=baseline, cases=all_cases, scratch=bool(tmp))
        finally:
            progress.close()
            if model is not None:
                model.stop()
        return _report(ns, result, baseline=baseline, cases=all_cases, scratch=bool(tmp))


def _baseline(ns: argparse.Namespace, cases: Any) -> Any:
    from conformance import baseline

    if getattr(ns, "baseline", None) is None:
        return None
    return baseline.load(ns.baseline, known_cases=[c.id for c in cases])


def _model_server(ns: argparse.Namespace, command: str | list[str],
                  cases: Any) -> tuple[Any, str | list[str], dict[str, str]]:
    """--model-server: start the scripted model server and fill in {model_url}."""
    from conformance.modelserver.cases import prepare_run

    configs = [(Path(a), Path(b)) for a, b in _env(getattr(ns, "agent_config", []),
                                                   "--agent-config").items()]
    return prepare_run(command, _env(ns.agent_env), cases,
                       enabled=getattr(ns, "model_server", False),
                       script=getattr(ns, "model_script", None), configs=configs)


def _report(ns: argparse.Namespace, result: Any, *, baseline: Any = None, cases: Any = None,
            scratch: bool = False) -> int:
    """Print the summary, write every report asked for; the exit status (baseline-aware)."""
    from conformance.report import console_summary, write_json, write_junit
    from conformance.report.catalogue import run_date, traceability

    if result.date is None:
        result.date = run_date()
    colour = sys.stdout.isatty() and not ns.no_color
    print(console_summary(result, colour=colour, verbose=ns.verbose))
    verdict = baseline.evaluate(result.cases) if baseline is not None else None
    if verdict is not None:
        print("\n".join(verdict.lines()))
        print("verdict with baseline: " + ("FAIL" if verdict.failed else "PASS"))
    trace = None
    if ns.html or ns.markdown:
        if cases is None:
            from conformance import cases as casemod

            cases = casemod.load_dir(getattr(ns, "cases", None))
        trace = traceability(cases)
    saved = {c.case: c.transcript_path for c in result.cases}
    if scratch:  # the scratch transcripts go with the run; reports must not point at them
        for c in result.cases:
            c.transcript_path = None
    if ns.html:
        from conformance.report.html import read_transcript, write_html

        write_html(result, ns.html, baseline=verdict, trace=trace,
                   transcripts=lambda c: read_transcript(saved.get(c.case)))
    if getattr(ns, "json", None):
        write_json(result, ns.json)
    if ns.junit:
        write_junit(result, ns.junit)
    if ns.markdown:
        from conformance.report.markdown import write_markdown

        write_markdown(result, ns.markdown, baseline=verdict, trace=trace)
    written = [str(p) for p in (ns.html, getattr(ns, "json", None), ns.junit, ns.markdown) if p]
    if written and getattr(ns, "default_reports", False):  # say where they went
        print("reports: " + ", ".join(written), file=sys.stderr)
    if result.cut:  # never green by accident: a cut run has not tested everything
        print(f"acp-conformance: run cut: {result.cut}", file=sys.stderr)
        return EXIT_FAIL
    if verdict is not None:
        return EXIT_FAIL if verdict.failed else EXIT_OK
    return EXIT_FAIL if result.failed else EXIT_OK


def cmd_report(ns: argparse.Namespace) -> int:
    """``report --from out.json``: the same reports as the run, rebuilt from its JSON."""
    from conformance import cases as casemod
    from conformance.report.jsonreport import read_json

    result = read_json(ns.source)
    all_cases = casemod.load_dir(ns.cases)
    return _report(ns, result, baseline=_baseline(ns, all_cases), cases=all_cases)


def reference_agent_command() -> list[str]:
    """The bundled reference agent, runnable from any working directory."""
    import conformance

    root = str(Path(conformance.__file__).resolve().parent.parent)
    return [sys.executable, "-c",
            (f"import sys; sys.path.insert(0, {root!r}); "
            "from conformance.reference.agent import main; sys.exit(main())")]


def cmd_demo(ns: argparse.Namespace) -> int:
    print("Running the agent suite against the bundled reference agent.\n")
    status = cmd_agent(ns, reference_agent_command(), "acp-conformance reference agent")
    if status > EXIT_INTERNAL:  # interrupted (128 + signal): the client suite does not start
        return status
    print("\nRunning the client suite against the bundled reference client (through a pty).\n")
    from conformance.client.runner import reference_client

    for opt in ("json", "junit", "html", "markdown"):  # the client reports go beside the agent's
        path = getattr(ns, opt, None)
        if path is not None:
            setattr(ns, opt, path.with_name(f"{path.stem}-client{path.suffix}"))
    command, profile = reference_client()
    return max(status, cmd_client(ns, command, "acp-conformance reference client", profile))


def cmd_client(ns: argparse.Namespace, command: str | None = None, label: str | None = None,
               profile: Any = None) -> int:
    """The client suite: the suite plays the agent (see conformance/client/)."""
    from conformance import cases as casemod
    from conformance.client.adapter import AdapterError
    from conformance.client.profile import ProfileError, load
    from conformance.client.runner import ClientRun, ClientSetupError, run_client_suite
    from conformance.progress import Progress
    from conformance.runner import RunInterrupted

    _check_run_options(ns)
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
    baseline = _baseline(ns, all_cases)
    cases = casemod.select(all_cases, ns.case)
    progress = Progress()
    run = ClientRun(protocols=_protocols(ns), options=_options(ns), command=command,
                    adapter=ns.client_adapter if not command else None, profile=profile,
                    timeout=ns.timeout, strict=ns.strict, transcripts=ns.transcripts,
                    env=_env(ns.agent_env), progress=progress if progress.enabled else None,
                    turn_timeout=ns.turn_timeout, handle_signals=True,
                    jobs=ns.jobs, deadline=ns.deadline)
    try:
        result = run_client_suite(run, cases, label or command or ns.client_adapter)
    except RunInterrupted as exc:
        progress.close()
        return _interrupted(ns, exc, baseline=baseline, cases=all_cases)
    except (ClientSetupError, AdapterError, ProfileError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        progress.close()
    return _report(ns, result, baseline=baseline, cases=all_cases)


def cmd_check(ns: argparse.Namespace) -> int:
    from conformance import __version__
    from conformance import transcript as tmod
    from conformance.checks import grade
    from conformance.results import CaseResult, RunResult, apply_strict

    _check_run_options(ns)
    files = tmod.jsonl_files(ns.files, lambda f: UsageError(f"{f}: no such transcript"))
    if not files:
        raise UsageError("no transcript files given")
    headers = [tmod.read_header(f) for f in files]
    roles = {h.get("role", "agent") for h in headers}
    protocols = sorted({int(h.get("protocol", 1)) for h in headers})
    result = RunResult(__version__, ", ".join(str(f) for f in files), "/".join(sorted(roles)),
                       protocols, "", ns.strict)
    for f, header in zip(files, headers):
        options = _options(ns, header.get("profile"))
        result.profile = options.profile.name
        protocol = int(header.get("protocol", 1))
        if ns.protocol != "both":
            protocol = int(ns.protocol)
        _, entries = tmod.iter_entries(f)
        findings = grade(entries, protocol=protocol, options=options,
                         role=header.get("role", "agent"))
        name = str(header.get("case") or f.stem)
        cr = CaseResult(name, f"recorded transcript {f.name}", [], protocol,
                        transcript_path=str(f))
        # A fuzz regression records whether it was found under --strict.
        strict = ns.strict or header.get("strict") is True
        cr.findings = [x.with_case(name) for x in apply_strict(findings, strict)]
        result.cases.append(cr)
    baseline = None
    if ns.baseline is not None:  # the cases (and jsonschema) load only for the baseline's IDs
        from conformance import cases as casemod

        baseline = _baseline(ns, casemod.load_dir())
    return _report(ns, result, baseline=baseline)


def cmd_list(ns: argparse.Namespace) -> int:
    from conformance import cases as casemod
    from conformance.checks import all_rules

    if ns.traceability:
        from conformance.report.catalogue import format_traceability, traceability

        print(format_traceability(traceability(casemod.load_dir(ns.cases))))
        return EXIT_OK
    cases = casemod.load_dir(ns.cases)  # a bad case file: one error line, nothing printed
    print("Cases:")
    for c in cases:
        versions = "/".join(f"v{p}" for p in c.protocols)
        print(f"  {c.id:<32} {c.role:<6} {versions:<6} {', '.join(c.requirements)}")
        print(f"  {'':<32} {c.description}")
    print("\nRules (requirement/sub-rule, grade of a violation, versions, side):")
    for rid, rule in sorted(all_rules().items()):
        versions = "/".join(f"v{p}" for p in rule.versions)
        print(f"  {rid:<40} {rule.outcome.value:<5} {versions:<6} {rule.role:<6} {rule.title}")
    _list_model_scripts()
    return EXIT_OK


def _list_model_scripts() -> None:
    from conformance.modelserver.cases import bundled_scripts
    from conformance.modelserver.script import load_script

    print("\nModel scripts (--model-script NAME):")
    for name, path in bundled_scripts().items():
        print(f"  {name:<32} {load_script(path).description}")


def cmd_lint_cases(ns: argparse.Namespace) -> int:
    """Lint the case files: schema, unique IDs, known rules, catalogue coverage."""
    from conformance import cases as casemod
    from conformance.checks import all_rules
    from conformance.requirements import lint

    cases = casemod.load_dir(ns.cases)  # schema and duplicate IDs: CaseError, exit 2
    problems = lint(cases, all_rules())
    for p in problems:
        print(p)
    print(f"{len(cases)} cases, {len(problems)} problem(s)")
    return EXIT_FAIL if problems else EXIT_OK
