"""The options the subcommands share, and their checks before anything starts.

Parsers are built here from named groups (target, grading, output); values are
turned into what the engines take (:class:`conformance.checks.Options`, protocol
lists) and options a run would trip over only at its end are refused up front.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from conformance.usage import UsageError, env_pairs

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
SUBCOMMANDS = {  # name: what it does, for --help (one line each; each has its own --help)
    "demo": "the suite against the bundled reference agent and client",
    "check": "grade recorded transcripts (files or folders) offline",
    "list": "cases, rules and bundled model scripts (--traceability)",
    "lint-cases": "lint the case files against the requirement catalogue",
    "report": "rebuild a run's reports from its JSON report (--from FILE)",
    "fuzz": "generated sessions or streams until a rule breaks; shrunk, saved",
    "replay": "replay saved regression files: FIXED or STILL FAILING",
    "show": "print a transcript readably, a finding's lines marked (FILE#N)",
    "verify": "check a --certify bundle: digests, and its verdict re-graded offline",
}
DEFAULT_REPORTS = Path("reports")
DEFAULT_TIMEOUT = 10.0  # seconds of silence; one default for the suite, fuzz and replay


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (option and problem), exit 2, no usage dump;
    and no abbreviated options (``demo --agent X`` would otherwise be ``--agent-config X``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse calls it and expects no return
        raise UsageError(f"{message} (see {self.prog} --help)")


def common_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("grading")
    g.add_argument("--protocol", choices=["1", "2", "both"], default="both",
                   help="protocol version(s) to test (default: both, as negotiated)")
    g.add_argument("--profile", default=None,
                   help="v2 rule profile: acp-sdk-2.4.0 (default, newest published rules), "
                        "acp-repo-2026-08-22, or acp-schema-1.21 (the Rust schema crate's v2 "
                        "Preview: replay marker, prompt idempotency keys)")
    g.add_argument("--strict", action="store_true", help="turn every warn into a fail")
    g.add_argument("--require-full", action="store_true",
                   help="fail a run whose verdict is only 'PASS, partial' (a MUST requirement "
                        "of the side tested was not exercised), as certification programs ask")
    g.add_argument("--strict-ids", action="store_true",
                   help="grade MID-A-05/no-ids (a v1 agent that sends no IDs at all) warn "
                        "instead of info; IDs are optional in v1")
    g.add_argument("--cross-turn-reuse", choices=["fail", "warn"], default="fail",
                   help="grade of MID-A-02/cross-turn-reuse (default fail)")
    g.add_argument("--schema-dir", type=Path,
                   help="validate every frame against the official ACP JSON Schemas in DIR "
                        "(a folder with v1/schema.json and v2/schema.json)")
    o = p.add_argument_group("output")
    o.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report here (-: stdout)")
    o.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML here (-: stdout)")
    transcripts_options(o)
    report_outputs(o)
    out_option(o)
    show_options(o, default="failures")


def transcripts_options(o: Any) -> None:
    """Where the transcripts go: a run that writes a report keeps them unless told not to."""
    o.add_argument("--transcripts", type=Path, metavar="DIR",
                   help="write one transcript per case into DIR (default: a transcripts/ "
                        "folder under --out, or beside the first report named, whenever a "
                        "report is written)")
    o.add_argument("--no-transcripts", action="store_true",
                   help="keep no transcripts (the reports then name none; the HTML report "
                        "still shows each case's wire lines)")


def show_options(o: Any, *, default: str | None) -> None:
    """What the console shows: the rules that failed or warned (then a Failures section), or
    every rule; ``report`` prints nothing unless asked."""
    o.add_argument("--show", choices=["failures", "all"], default=default,
                   help="console table: the rules that failed or warned, or every rule "
                        + ("(default failures)" if default else "(default: print nothing)"))
    o.add_argument("-v", "--verbose", action="store_true",
                   help="every rule, each version's column explained by its worst finding")
    o.add_argument("-q", "--quiet", action="store_true",
                   help="print only the verdict line and errors (reports are written as asked)")


def report_outputs(o: Any) -> None:
    o.add_argument("--html", type=Path, metavar="PATH",
                   help="write a self-contained HTML report (statement, requirements, findings, "
                        "wire transcripts) here")
    o.add_argument("--markdown", type=Path, metavar="PATH",
                   help="write a Markdown summary with the certification statement here "
                        "(e.g. $GITHUB_STEP_SUMMARY; -: stdout)")
    o.add_argument("--baseline", type=Path, metavar="FILE",
                   help="expected failures (case:requirement per entry): listed fails do not "
                        "fail the run, unlisted ones do, listed entries that now pass are stale "
                        "and fail the run")
    o.add_argument("--write-baseline", type=Path, metavar="FILE",
                   help="write this run's fails as a baseline FILE (the catalogue revision "
                        "and the date in a comment): the same target run with --baseline "
                        "FILE then passes until it changes")
    o.add_argument("--github-annotations", action="store_true",
                   help="print one GitHub ::error annotation per failing rule (at its case "
                        "file and line; at most ten, then a count); the GitHub Action "
                        "passes it")
    o.add_argument("--no-color", action="store_true", help="plain console output")
    o.add_argument("--target-name", metavar="NAME",
                   help="the target's name as the reports head it (default: what it reported "
                        "in initialize, then its command); the reported one is kept beside it")
    o.add_argument("--target-version", metavar="VERSION",
                   help="the target's version as the reports head it (default: what it "
                        "reported in initialize)")
    masking_options(o)


def masking_options(o: Any) -> None:
    """Secrets kept out of every file and console line (docs/masking.md); every subcommand
    that runs a target or writes a report has them."""
    o.add_argument("--mask", action="append", default=[], metavar="VALUE",
                   help="replace VALUE by *** in every report, transcript and console line "
                        "(repeatable; values shorter than 6 characters are not masked); the "
                        "values of secret-looking variables (*KEY*, *TOKEN*, *SECRET*, "
                        "*PASSWORD*, ...) are masked without it")
    o.add_argument("--mask-env", action="append", default=[], metavar="NAME",
                   help="mask the value of environment variable NAME too (repeatable)")
    o.add_argument("--no-mask", action="store_true",
                   help="write secrets as they are (local debugging only; warns)")


def certify_options(o: Any) -> None:
    """A run's submission bundle and badge (docs/certify.md)."""
    o.add_argument("--certify", type=Path, metavar="DIR",
                   help="write a submission bundle into DIR (and DIR.tar.gz): statement, "
                        "JSON report, every transcript, run description and a manifest of "
                        "SHA-256 digests (an in-toto Statement) that 'acp-conformance verify' "
                        "checks offline")
    o.add_argument("--badge", type=Path, metavar="PATH",
                   help="write the verdict as a self-contained SVG badge here (protocol "
                        "versions, verdict, catalogue revision, date)")


def build_masker(ns: argparse.Namespace) -> Any:
    """The run's masker, built once from the options and the suite's environment and handed
    to everything that records text; ``--no-mask`` says on stderr that nothing is masked."""
    import sys

    from conformance import masking

    if getattr(ns, "no_mask", False):
        print("acp-conformance: warning: --no-mask: secrets in the environment and the "
              "target's output are written as they are; do not publish these reports",
              file=sys.stderr)
        return masking.NO_MASK
    target_env: dict[str, str] = {}
    for option in ("agent_env", "client_env"):
        pairs = [p for p in getattr(ns, option, None) or [] if "=" in p]
        target_env.update(env_pairs(pairs))
    configs = []
    for pair in getattr(ns, "agent_config", None) or []:
        try:
            configs.append(Path(pair.split("=", 1)[0]).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            pass  # the run refuses it with its own message
    return masking.build(environ=os.environ, target_env=target_env, configs=configs,
                         values=getattr(ns, "mask", None) or [],
                         names=getattr(ns, "mask_env", None) or [])


def parse_repeat(text: str) -> int:
    """``--repeat N``: a whole number from 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {n}")
    return n


def parse_jobs(text: str) -> int:
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


def add_target_options(t: Any, *, timeout: float, commands: bool = True) -> None:
    """The options that name the target; shared by the suite and the fuzzer. Without
    ``commands`` (``demo``: its targets are bundled) only ``--timeout``."""
    if not commands:
        t.set_defaults(agent=None, agent_env=[], client=None, client_profile=None,
                       client_adapter=None)
        _timeout_option(t, timeout)
        return
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
    _timeout_option(t, timeout)


def _timeout_option(t: Any, timeout: float) -> None:
    t.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                   help="longest silence allowed while waiting for the target "
                        f"(default {timeout:g})")


def find_model_script(value: str) -> Path:
    from conformance.modelserver.cases import find_script

    return find_script(value)


DEFAULT_OUT = Path("acp-conformance-reports")


def default_out_dir() -> Path:
    """``./acp-conformance-reports/``; in a checkout of this repository, its ``reports/``
    folder (the layout's home for generated reports, never committed)."""
    here = Path.cwd()
    if (here / "reports" / "README.md").is_file() and (here / "conformance" / "cli").is_dir():
        return DEFAULT_REPORTS
    return DEFAULT_OUT


def out_option(o: Any) -> None:
    o.add_argument("--out", type=Path, metavar="DIR",
                   help="the one folder a run writes to: reports and transcripts (when no "
                        "report option names a file), the fuzz regression library and "
                        "Hypothesis's data (default ./acp-conformance-reports/; in a checkout "
                        "of this repository its reports/)")


def use_out(ns: argparse.Namespace, *, hypothesis: bool = True) -> Path:
    """The run's output folder (``--out`` or the default); Hypothesis keeps its data under
    it (``hypothesis/``) instead of ``./.hypothesis``. ``hypothesis=False``: a command that
    runs no Hypothesis (``check``) does not import it (about 19 MB and 0.1 s)."""
    out = Path(getattr(ns, "out", None) or default_out_dir())
    ns.out = out
    if hypothesis:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(out / "hypothesis")
    return out


def default_outputs(ns: argparse.Namespace, stem: str = "acp-conformance", *,
                    hypothesis: bool = True) -> None:
    """A run with no report option writes JSON, JUnit and the transcripts under the output
    folder (``--out``, default ./acp-conformance-reports/), and says so as it starts."""
    explicit = getattr(ns, "out", None) is not None
    out = use_out(ns, hypothesis=hypothesis)
    if explicit or not any(getattr(ns, o, None) for o in REPORT_OPTIONS):
        ns.json = ns.json or out / f"{stem}.json"
        ns.junit = ns.junit or out / f"{stem}.xml"
        if getattr(ns, "transcripts", None) is None and not getattr(ns, "no_transcripts", False):
            ns.transcripts = out / "transcripts"
        ns.default_reports = True
    keep_transcripts(ns)


#: The report options, in the order whose first named report the transcripts go beside.
REPORT_OPTIONS = ("json", "junit", "html", "markdown")


def keep_transcripts(ns: argparse.Namespace) -> None:
    """A run that writes a report keeps the transcripts its findings point at: in a
    ``transcripts/`` folder beside the first report named (``--json``, ``--junit``,
    ``--html``, ``--markdown`` in that order), unless ``--transcripts DIR`` says where or
    ``--no-transcripts`` says not to. So every path a console line or report names exists
    after the run."""
    if getattr(ns, "no_transcripts", False):
        if getattr(ns, "transcripts", None) is not None:
            raise UsageError("--transcripts DIR and --no-transcripts: give one of them")
        return
    if getattr(ns, "transcripts", None) is not None:
        return
    named = [Path(getattr(ns, o)) for o in REPORT_OPTIONS
             if getattr(ns, o, None) and str(getattr(ns, o)) != "-"]  # -: stdout
    if named:
        ns.transcripts = named[0].parent / "transcripts"


def announce_out(ns: argparse.Namespace) -> None:
    """As a run starts (its input checked), where its default reports go: one stderr line."""
    import sys

    if getattr(ns, "default_reports", False) and not getattr(ns, "out_announced", False) \
            and not getattr(ns, "quiet", False):
        ns.out_announced = True
        print(f"acp-conformance: writing the reports and transcripts under {ns.out}/ "
              "(--out DIR to change)", file=sys.stderr)


def grading_options(ns: argparse.Namespace, header_profile: str | None = None) -> Any:
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


def protocols_of(ns: argparse.Namespace) -> list[int]:
    return [1, 2] if ns.protocol == "both" else [int(ns.protocol)]


def _writable(option: str, folder: Path) -> None:
    """The nearest existing folder on the way to ``folder`` must take new files: a file is
    made there and removed (permission bits do not tell for root, nor for /proc)."""
    import tempfile

    existing = folder.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option}: cannot write into {existing}")
    try:
        tempfile.TemporaryFile(dir=existing, prefix=".acp-conformance-probe-").close()
    except OSError as exc:
        raise UsageError(f"{option}: cannot write into {existing} ({exc.strerror or exc})") from None


def check_run_options(ns: argparse.Namespace) -> None:
    """Options a run would trip over only at its end: refused before anything starts."""
    import math

    for opt in ("timeout", "turn_timeout", "deadline", "grace"):
        value = getattr(ns, opt, None)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"--{opt.replace('_', '-')} must be a positive number of seconds")
    from conformance.cli.output import claim_stdout, is_stdout

    claim_stdout(ns)
    # folders made if need be: --out where the reports or fuzz's findings go into it
    writes_out = getattr(ns, "default_reports", False) or hasattr(ns, "regressions")
    for opt in ("out", "regressions") if writes_out else ():
        if getattr(ns, opt, None) is not None:
            _writable(f"--{opt}", Path(getattr(ns, opt)))
    for opt in ("json", "junit", "html", "markdown", "write_baseline"):
        path = getattr(ns, opt, None)
        if is_stdout(path):
            continue
        option = "--" + opt.replace("_", "-")
        if path is not None and Path(path).is_dir():
            raise UsageError(f"{option} {path}: is a directory, expected a file path")
        if path is not None:
            _writable(option, Path(path).parent)
    if getattr(ns, "certify", None) is not None:
        from conformance.certify import BundleError
        from conformance.certify.bundle import check_folder

        try:
            check_folder(ns.certify)
        except BundleError as exc:
            raise UsageError(str(exc)) from None
        _writable("--certify", Path(ns.certify))
    if getattr(ns, "badge", None) is not None:
        if Path(ns.badge).is_dir():
            raise UsageError(f"--badge {ns.badge}: is a directory, expected a file path")
        _writable("--badge", Path(ns.badge).parent)
    transcripts = getattr(ns, "transcripts", None)
    if transcripts is not None and Path(transcripts).exists() and not Path(transcripts).is_dir():
        raise UsageError(f"--transcripts {transcripts}: exists and is not a directory")
    if transcripts is not None:
        _writable("--transcripts", Path(transcripts))
    if getattr(ns, "schema_dir", None) is not None:
        from conformance.schema import schema_path

        options = grading_options(ns)  # also refuses a missing folder or an unknown profile
        for protocol in protocols_of(ns):
            schema_path(ns.schema_dir, protocol, options.profile)


def target_group(p: argparse.ArgumentParser, *, required_hint: str) -> None:
    """fuzz and replay: the target options, as a group with its own hint."""
    add_target_options(p.add_argument_group("target", required_hint), timeout=DEFAULT_TIMEOUT)


def model_group(p: argparse.ArgumentParser, *, fuzz: bool) -> None:
    """fuzz and replay: the scripted model behind an agent."""
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


def client_choice(ns: argparse.Namespace, masker: Any = None) -> Any:
    """fuzz and replay: the client the options name, as the client fuzzer takes it."""
    from conformance.fuzz.client_fuzz import ClientChoice

    return ClientChoice(ns.client, ns.client_adapter, ns.client_profile,
                        env_pairs(ns.agent_env), ns.timeout, masker)
