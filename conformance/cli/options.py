"""The options the subcommands share, and their checks before anything starts.

Parsers are built here from named groups (target, grading, output); values are
turned into what the engines take (:class:`conformance.checks.Options`, protocol
lists) and options a run would trip over only at its end are refused up front.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from conformance.report.formats import STDOUT, names
from conformance.settings.table import OPTIONS, argument, check_values, help_for, option
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
DEFAULT_TIMEOUT: float = option("timeout").default  # one default for the suite, fuzz and replay


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (option and problem), exit 2, no usage dump;
    and no abbreviated options (``demo --agent X`` would otherwise be ``--agent-config X``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse calls it and expects no return
        raise UsageError(f"{message} (see {self.prog} --help)")


def add_option(group: Any, name: str, *, shell: str = "cli",
               fill: Mapping[str, str] | None = None, **override: Any) -> None:
    """The run option ``name`` of the option table (:mod:`conformance.settings.table`) as an
    argparse option of ``group``, as ``shell`` has it (``fuzz``: the fuzz subcommand's; a
    row it shares with the run is the run's), its help's blanks filled from ``fill``;
    ``override`` for a subcommand's variant of it."""
    row = option(name)
    how = shell if shell in row.shells else "cli"
    group.add_argument(*row.flags(how), **argument(row, how, fill, **override))


def add_options(group: Any, *names: str, shell: str = "cli",
                fill: Mapping[str, str] | None = None) -> None:
    for name in names:
        add_option(group, name, shell=shell, fill=fill)


def table_values(ns: argparse.Namespace) -> dict[str, Any]:
    """The parsed values of the table's options this command has, by table name."""
    return {row.name: getattr(ns, row.dest) for row in OPTIONS
            if {"cli", "fuzz"} & row.shells and hasattr(ns, row.dest)}


def common_options(p: argparse.ArgumentParser) -> None:
    add_options(p.add_argument_group("grading"), "protocol", "profile", "strict", "require-full",
                "strict-ids", "cross-turn-reuse", "schema-dir")
    o = p.add_argument_group("output")
    add_options(o, "json", "junit")
    transcripts_options(o)
    report_outputs(o)
    out_option(o)
    show_options(o, default="failures")


def transcripts_options(o: Any) -> None:
    """Where the transcripts go: a run that writes a report keeps them unless told not to."""
    add_options(o, "transcripts", "no-transcripts")


def show_options(o: Any, *, default: str | None) -> None:
    """What the console shows: the rules that failed or warned (then a Failures section), or
    every rule; ``report`` prints nothing unless asked."""
    if default is not None:
        add_option(o, "show", default=default)
    else:
        add_option(o, "show", default=None, help=help_for(option("show"), "cli").replace(
            "(default failures)", "(default: print nothing)"))
    add_options(o, "verbose", "quiet")


def report_outputs(o: Any) -> None:
    add_options(o, "html", "markdown", "baseline", "write-baseline", "github-annotations",
                "no-color", "target-name", "target-version")
    masking_options(o)


def masking_options(o: Any) -> None:
    """Secrets kept out of every file and console line (docs/masking.md); every subcommand
    that runs a target or writes a report has them."""
    add_options(o, "mask", "mask-env", "no-mask")


def certify_options(o: Any) -> None:
    """A run's submission bundle and badge (docs/certify.md)."""
    add_options(o, "certify", "badge")


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
    for dest in ("agent_env", "client_env"):
        pairs = [p for p in getattr(ns, dest, None) or [] if "=" in p]
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


def add_target_options(t: Any, *, commands: bool = True) -> None:
    """The options that name the target; shared by the suite and the fuzzer. Without
    ``commands`` (``demo``: its targets are bundled) only ``--timeout``."""
    if not commands:
        t.set_defaults(agent=None, agent_env=[], client=None, client_profile=None,
                       client_adapter=None)
        add_option(t, "timeout")
        return
    add_options(t, "agent", "agent-env", "client", "client-profile", "client-adapter",
                "timeout")


DEFAULT_OUT = Path("acp-conformance-reports")


def default_out_dir() -> Path:
    """``./acp-conformance-reports/``; in a checkout of this repository, its ``reports/``
    folder (the layout's home for generated reports, never committed)."""
    here = Path.cwd()
    if (here / "reports" / "README.md").is_file() and (here / "conformance" / "cli").is_dir():
        return DEFAULT_REPORTS
    return DEFAULT_OUT


def out_option(o: Any) -> None:
    add_option(o, "out")


def use_out(ns: argparse.Namespace, *, hypothesis: bool = False) -> Path:
    """The run's output folder (``--out`` or the default). ``hypothesis=True``, for a
    command that draws (``fuzz``, ``replay``): Hypothesis keeps its data under it
    (``hypothesis/``) instead of ``./.hypothesis``. Any other command does not import
    Hypothesis (about 19 MB and 0.15 s of CPU, a third of a live run's start-up)."""
    out = Path(getattr(ns, "out", None) or default_out_dir())
    ns.out = out
    if hypothesis:
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(out / "hypothesis")
    return out


def default_outputs(ns: argparse.Namespace, stem: str = "acp-conformance") -> None:
    """A run with no report option writes JSON, JUnit and the transcripts under the output
    folder (``--out``, default ./acp-conformance-reports/), and says so as it starts."""
    explicit = getattr(ns, "out", None) is not None
    out = use_out(ns)  # no command that writes these reports draws
    if explicit or not any(getattr(ns, o, None) for o in REPORT_OPTIONS):
        ns.json = ns.json or out / f"{stem}.json"
        ns.junit = ns.junit or out / f"{stem}.xml"
        if getattr(ns, "transcripts", None) is None and not getattr(ns, "no_transcripts", False):
            ns.transcripts = out / "transcripts"
        ns.default_reports = True
    keep_transcripts(ns)


#: The report options, in the order whose first named report the transcripts go beside.
REPORT_OPTIONS = names()  # the report formats' table

STDOUT_REPORTS = names(stdout=True)  # --json -: to standard output


def is_stdout(path: Any) -> bool:
    return path is not None and str(path) == STDOUT


def claim_stdout(ns: argparse.Namespace) -> None:
    """A report named ``-`` takes standard output; what the run would print there goes to
    stderr. One report only; ``--html -`` is refused (the HTML report is a file)."""
    named = [o for o in (*names(), "write_baseline") if is_stdout(getattr(ns, o, None))]
    wrong = [o for o in named if o not in STDOUT_REPORTS]
    if wrong:
        raise UsageError(f"--{wrong[0].replace('_', '-')} -: this output is a file; only "
                         "--json, --junit or --markdown can go to standard output")
    if len(named) > 1:
        raise UsageError(" and ".join(f"--{o} -" for o in named) + ": only one report "
                         "can go to standard output")
    if named and getattr(ns, "report_stdout", None) is None:
        ns.report_stdout = sys.stdout
        sys.stdout = sys.stderr  # restored by the command line's main



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
    """Options a run would trip over only at its end: refused before anything starts. The
    option table's checks first (:func:`conformance.settings.table.check_values`: each
    value's own, and the options that do not go together), as every shell checks them."""
    check_values(table_values(ns), "cli")
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
    add_target_options(p.add_argument_group("target", required_hint))


def model_group(p: argparse.ArgumentParser, *, fuzz: bool) -> None:
    """fuzz and replay: the scripted model behind an agent (their variants of the run's
    --model-server and --agent-config)."""
    m = p.add_argument_group("scripted model (LLM-backed agents, offline)")
    if fuzz:
        add_option(m, "model-server",
                   help="serve scripted OpenAI/Anthropic/Gemini APIs on 127.0.0.1 (as in "
                        "suite runs) and draw what the model says in every generated run: "
                        "reasoning, text parts, tool calls, chunking, pauses, provider "
                        "item IDs; {model_url} is filled in the command, --agent-env "
                        "values and --agent-config templates")
    add_option(m, "agent-config", help=help_for(option("agent-config"), "cli") + (
        "" if fuzz else "; a file with a model script starts the scripted model server by "
                        "itself"))


def client_choice(ns: argparse.Namespace, masker: Any = None) -> Any:
    """fuzz and replay: the client the options name, as the client fuzzer takes it."""
    from conformance.fuzz.client_fuzz import ClientChoice

    return ClientChoice(ns.client, ns.client_adapter, ns.client_profile,
                        env_pairs(ns.agent_env), ns.timeout, masker)
