# long: the one table of run options is data (each option's help is a paragraph); the checks that read it are short
"""The one table of run options, and the one check of each.

Every option of a suite run is one :class:`Option` row here: its name, its type
(``kind``), default, help, check, the roles it applies to and the shells that have it.
The command line's argparse options (:mod:`conformance.cli.options`; the ``fuzz``
subcommand's own, shell ``fuzz``, in :mod:`conformance.cli.fuzz`), the pytest plugin's
``--acp-*`` options (:mod:`conformance.pytest_plugin`), the GitHub Action's inputs
(``action.yml``, checked by :mod:`conformance.github_action`) and ``docs/options.md``
are rendered from these rows
(:mod:`conformance.settings.render`), and ``tests/test_option_table.py`` fails when
any of them drifts from the table.

A help text is one text for every shell. Where a shell differs (a default that is a
folder on the command line and pytest's temp dir in the plugin), the part that only
one shell prints is marked ``<cli>...</cli>``, ``<fuzz>...</fuzz>``, ``<plugin>...</plugin>``
or ``<action>...</action>``. An option named in a help (``--agent``) is spelled as each
shell spells it (``--acp-agent`` in the plugin, ``the input agent`` in the Action). A
fact another room owns (the fuzzer's named efforts) is a blank (``{efforts}``) that the
shell fills (:func:`help_for`'s ``fill``).

The checks (:func:`check_values`): a value's own check (``Option.check``), the
rules that tie two options together (:data:`RULES`), and an option given with a role
it does not apply to (``Option.roles``). Each has one message, with the options
spelled as the shell spells them, so ``--proxy-adapts`` with ``--protocol 1``,
``--acp-proxy-adapts`` with ``--acp-protocol 1`` and the Action's inputs proxy-adapts
and protocol 1 are refused by the same words.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.report.formats import FORMATS
from conformance.usage import UsageError

__all__ = ["GROUPS", "OPTIONS", "RULES", "SHELLS", "Clash", "Option", "argument", "check_values",
           "for_shell", "help_for", "option", "parse_jobs", "parse_repeat", "spelling"]

SHELLS = ("cli", "fuzz", "plugin", "action")  # fuzz: the command line's fuzz subcommand
CLI, PLUGIN = frozenset({"cli"}), frozenset({"cli", "plugin"})
ACTION, CLI_ACTION = frozenset({"cli", "plugin", "action"}), frozenset({"cli", "action"})
FUZZ = frozenset({"fuzz"})


# argparse reports a ``type`` callable's ArgumentTypeError with its message; pytest's parser
# is argparse. Raising argparse's own class keeps that message without importing argparse here.
def _argument_error(message: str) -> Exception:
    import argparse

    return argparse.ArgumentTypeError(message)


def _count(text: str, expected: str) -> int:
    """A whole number from 1; ``expected`` says what the option takes when it is not one."""
    try:
        n = int(text)
    except ValueError:
        raise _argument_error(f"expected {expected}, got {text!r}") from None
    if n < 1:
        raise _argument_error(f"expected at least 1, got {n}")
    return n


def parse_repeat(text: str) -> int:
    """``--repeat N``: a whole number from 1."""
    return _count(text, "a whole number")


def parse_jobs(text: str) -> int:
    """``--jobs N`` or ``auto`` (the number of cores)."""
    if text == "auto":
        return os.cpu_count() or 1
    return _count(text, "a whole number or auto")


def find_model_script(value: str) -> Path:
    """``--model-script NAME|FILE``: a bundled script's name, or a file."""
    from conformance.modelserver.cases import find_script

    return find_script(value)


def positive_seconds(value: Any) -> str | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        return "{option} must be a positive number of seconds"
    return None


def at_least_one(value: Any) -> str | None:
    if value is not None and value < 1:
        return "{option} must be at least 1"
    return None


def pairs(value: Any) -> str | None:
    for pair in value or ():
        if "=" not in pair:
            return "{option} " + repr(pair).replace("{", "{{").replace("}", "}}") \
                + ": expected KEY=VALUE"
    return None


@dataclass(frozen=True)
class Option:
    """One run option, as every shell has it."""

    name: str  # the command line's long name, without "--" (the Action's input name)
    help: str
    kind: str = "text"  # text | path | float | int | flag | list | choice
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    parse: Callable[[str], Any] | None = None  # a value's form, when not the kind's
    check: Callable[[Any], str | None] | None = None  # a parsed value's problem ({option})
    # the roles it applies to (entries of conformance.roles.ROLES; None: every role); given
    # with another, refused (conformance.roles.check_options)
    roles: frozenset[str] | None = None
    shells: frozenset[str] = CLI  # cli, fuzz, plugin, action
    group: str = "target"  # the command line's --help group (the fuzz subcommand's, in fuzz)
    short: str | None = None  # "-j"
    plugin: str | None = None  # the plugin's name, when not "acp-" + name
    needs: str | None = None  # an option it means nothing without (one message)

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    def flags(self, shell: str) -> list[str]:
        """How ``shell`` spells it: ``["-j", "--jobs"]``, ``["--acp-timeout"]``."""
        if shell == "plugin":
            return [f"--{self.plugin or 'acp-' + self.name}"]
        return ([self.short] if self.short else []) + [f"--{self.name}"]


GROUPS = {  # the command line's --help groups of the suite run, then of fuzz, in --help order
    "target": "target",
    "model": "scripted model (offline runs of LLM-backed agents)",
    "grading": "grading",
    "output": "output",
    "certify": "certification (docs/certify.md)",
    "fuzz": "fuzzing (the plugin's --fuzz)",
    "demo": "try it",
    "effort": "effort",
    "regressions": "regressions",
}

_SECONDS = "SECONDS"
OPTIONS: tuple[Option, ...] = (
    # -- target --------------------------------------------------------------------
    Option("agent", "agent command to test, e.g. 'my-agent --acp'<action>; give this, client "
           "or proxy (with proxy, the agent behind the proxy)</action>", metavar="CMD",
           shells=ACTION),
    Option("agent-env", "extra environment for the agent (repeatable)", kind="list",
           default=[], metavar="K=V", check=pairs, shells=PLUGIN),
    Option("client", "client command to test; {agent} marks where the suite's agent double "
           "goes, {prompt} makes it a one-shot client, e.g. "
           "'my-editor --headless --agent-cmd {agent}'", metavar="CMD",
           roles=frozenset({"client"}), shells=ACTION),
    Option("client-profile", "how to drive the client through a pty and read its messages "
           "(YAML); without it only wire checks and liveness are graded", kind="path",
           metavar="FILE", roles=frozenset({"client"}), shells=ACTION),
    Option("client-adapter", "test an in-process library client through the adapter API"
           "<plugin>; with --fuzz, fuzz it (coverage-guided under HypoFuzz: its code runs "
           "in the worker)</plugin>", metavar="MODULE:FACTORY",
           roles=frozenset({"client"}), shells=PLUGIN),
    Option("timeout", "longest silence allowed while waiting for the target (default 10)",
           kind="float", default=10.0, metavar=_SECONDS, check=positive_seconds,
           shells=PLUGIN),
    Option("proxy", "proxy, bridge or gateway command to test; {agent} marks where the "
           "agent command goes (the suite's agent double, or --agent CMD<plugin>: then the "
           "agent cases run through the proxy</plugin>), e.g. 'my-bridge --upstream {agent}'",
           metavar="CMD", shells=ACTION),
    Option("proxy-adapts", "the proxy is a declared v2-to-v1 adapter: v2 behind it, v1 in "
           "front (the v2 cases run; MID-V2-10 is graded)", kind="flag", default=False,
           roles=frozenset({"proxy"}), shells=ACTION),
    Option("turn-timeout", "longest any single wait may last even while the target keeps "
           "writing, e.g. a stream that never ends (default: 6 x --timeout)", kind="float",
           metavar=_SECONDS, check=positive_seconds),
    Option("grace", "silence that closes a cancelled turn, a replay or a retry before the "
           "next step (default 0.25): what the target writes later is read as the next "
           "step's; a finding that rests on it says so (lengthen it on a slow machine)",
           kind="float", metavar=_SECONDS, check=positive_seconds,
           roles=frozenset({"agent", "proxy"})),
    Option("jobs", "cases run at the same time (default auto: the number of cores; -j 1 "
           "runs them one after another); the reports do not depend on it", default="auto",
           metavar="N", parse=parse_jobs, short="-j", shells=CLI_ACTION),
    Option("deadline", "longest the whole run may last: then the case in progress is cut "
           "and graded, the rest are not run, and the run <cli>exits 1</cli><plugin>fails"
           "</plugin>", kind="float", metavar=_SECONDS, check=positive_seconds,
           shells=PLUGIN),
    Option("repeat", "play every case N times (default 1): a rule whose outcome differs "
           "between them is reported as unstable ('fails in 2 of 5 runs') with a transcript "
           "of each outcome; a fault seen in any run still counts", default=1, metavar="N",
           parse=parse_repeat, shells=ACTION),
    Option("keep-going", "run every case even after two in a row hit the same target fault",
           kind="flag", default=False),
    Option("cases", "case directory (default: bundled)", kind="path", metavar="DIR",
           shells=PLUGIN),
    Option("case", "run only the cases this selects: a case, requirement or sub-rule ID, or "
           "a glob of any of them ('load-*', 'MID-A-0*') (repeatable)", kind="list",
           default=[], metavar="SELECTOR", shells=PLUGIN),
    # -- the scripted model ---------------------------------------------------------
    Option("model-server", "serve scripted OpenAI/Anthropic/Gemini APIs on 127.0.0.1 for the "
           "run; the agent gets OPENAI_BASE_URL, ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL "
           "and dummy keys; {model_url} is filled in the command, --agent-env values and "
           "--agent-config templates", kind="flag", default=False,
           roles=frozenset({"agent", "proxy"}), shells=CLI_ACTION, group="model"),
    Option("model-script", "play this model script (a YAML file, or the name of a bundled "
           "one: see 'acp-conformance list') in every case instead of the case's own "
           "(implies --model-server)", metavar="NAME|FILE", parse=find_model_script,
           roles=frozenset({"agent", "proxy"}), group="model"),
    Option("agent-config", "write TEMPLATE to DEST with {model_url} filled in (repeatable)",
           kind="list", default=[], metavar="TEMPLATE=DEST", check=pairs,
           roles=frozenset({"agent", "proxy"}), group="model"),
    # -- grading ------------------------------------------------------------------
    Option("protocol", "protocol version(s) to test (default: both, as negotiated)",
           kind="choice", default="both", choices=("1", "2", "both"), shells=ACTION,
           group="grading"),
    Option("profile", "v2 rule profile: acp-sdk-2.4.0 (default, newest published rules), "
           "acp-repo-2026-08-22, or acp-schema-1.21 (the Rust schema crate's v2 Preview: "
           "replay marker, prompt idempotency keys)", metavar="NAME", shells=ACTION,
           group="grading"),
    Option("strict", "turn every warn into a fail", kind="flag", default=False, shells=PLUGIN,
           group="grading"),
    Option("require-full", "fail a run whose verdict is only 'PASS, partial' (a MUST "
           "requirement of the side tested was not exercised), as certification programs ask",
           kind="flag", default=False, group="grading"),
    Option("strict-ids", "grade MID-A-05/no-ids (a v1 agent that sends no IDs at all) warn "
           "instead of info; IDs are optional in v1", kind="flag", default=False,
           group="grading"),
    Option("cross-turn-reuse", "grade of MID-A-02/cross-turn-reuse (default fail)",
           kind="choice", default="fail", choices=("fail", "warn"), group="grading"),
    Option("schema-dir", "validate every frame against the official ACP JSON Schemas in DIR "
           "(a folder with v1/schema.json and v2/schema.json)", kind="path", metavar="DIR",
           group="grading"),
    # -- output -------------------------------------------------------------------
    *(Option(f.name, f.help, kind="path", metavar="PATH", shells=f.shells, group="output")
      for f in FORMATS),  # the report formats' table: one row there makes the option
    Option("transcripts", "write one transcript per case into DIR (default: <cli>a "
           "transcripts/ folder under --out, or beside the first report named, whenever a "
           "report is written</cli><plugin>pytest's temp dir</plugin>)", kind="path",
           metavar="DIR", shells=PLUGIN, group="output"),
    Option("no-transcripts", "keep no transcripts (the reports then name none; the HTML "
           "report still shows each case's wire lines)", kind="flag", default=False,
           group="output"),
    Option("baseline", "expected failures (case:requirement per entry): listed fails do not "
           "fail the run<plugin> (they are xfail)</plugin>, unlisted ones do, listed entries "
           "that now pass are stale and fail the run", kind="path", metavar="FILE",
           shells=ACTION, group="output"),
    Option("write-baseline", "write this run's fails as a baseline FILE (the catalogue "
           "revision and the date in a comment): the same target run with --baseline FILE "
           "then passes until it changes", kind="path", metavar="FILE", group="output"),
    Option("github-annotations", "print one GitHub ::error annotation per failing rule (at "
           "its case file and line; at most ten, then a count); the GitHub Action passes it",
           kind="flag", default=False, group="output"),
    Option("no-color", "plain console output", kind="flag", default=False, group="output"),
    Option("target-name", "the target's name as the reports head it (default: what it "
           "reported in initialize, then its command); the reported one is kept beside it",
           metavar="NAME", shells=PLUGIN, group="output"),
    Option("target-version", "the target's version as the reports head it (default: what it "
           "reported in initialize)", metavar="VERSION", shells=PLUGIN, group="output"),
    Option("mask", "replace VALUE by *** in every report, transcript and console line "
           "(repeatable; values shorter than 6 characters are not masked); the values of "
           "secret-looking variables (*KEY*, *TOKEN*, *SECRET*, *PASSWORD*, ...) are masked "
           "without it", kind="list", default=[], metavar="VALUE", group="output"),
    Option("mask-env", "mask the value of environment variable NAME too (repeatable)",
           kind="list", default=[], metavar="NAME", group="output"),
    Option("no-mask", "write secrets as they are (local debugging only; warns)", kind="flag",
           default=False, group="output"),
    Option("out", "the one folder a run writes to: reports and transcripts (when no report "
           "option names a file), the fuzz regression library and Hypothesis's data (default "
           "./acp-conformance-reports/; in a checkout of this repository its reports/)",
           kind="path", metavar="DIR", group="output"),
    Option("show", "console table: the rules that failed or warned, or every rule (default "
           "failures)", kind="choice", default="failures", choices=("failures", "all"),
           group="output"),
    Option("verbose", "every rule, each version's column explained by its worst finding",
           kind="flag", default=False, short="-v", group="output"),
    Option("quiet", "print only the verdict line and errors (reports are written as asked)",
           kind="flag", default=False, short="-q", group="output"),
    # -- certification ----------------------------------------------------------------
    Option("certify", "write a submission bundle into DIR (and DIR.tar.gz): statement, JSON "
           "report, every transcript, run description and a manifest of SHA-256 digests (an "
           "in-toto Statement) that 'acp-conformance verify' checks offline", kind="path",
           metavar="DIR", shells=PLUGIN, group="certify"),
    Option("badge", "write the verdict as a self-contained SVG badge here (protocol versions, "
           "verdict, catalogue revision, date)", kind="path", metavar="PATH", shells=PLUGIN,
           group="certify"),
    # -- the plugin's fuzzing (the command line has the fuzz subcommand) ------------------
    Option("fuzz", "collect the fuzzer (one Hypothesis test per role and protocol) instead of "
           "the cases: pytest runs each once, HypoFuzz runs them as a campaign", kind="flag",
           default=False, shells=frozenset({"plugin"}), group="fuzz"),
    Option("fuzz-effort", "--fuzz: examples and steps per run under pytest (default ci)",
           kind="choice", default="ci", choices=("ci", "dev", "deep"),
           shells=frozenset({"plugin"}), group="fuzz"),
    Option("fuzz-model-server", "--fuzz with --agent: serve the scripted model APIs and draw "
           "what the model says in every run ({model_url} filled in the command and "
           "--agent-env values)", kind="flag", default=False, roles=frozenset({"agent"}),
           shells=frozenset({"plugin"}), group="fuzz", plugin="acp-model-server",
           needs="fuzz"),
    Option("regressions", "<plugin>--fuzz: save each shrunk failure here, once per "
           "fingerprint (default: not saved)</plugin><fuzz>where failures are saved (default: "
           "regressions/ in the --out folder)</fuzz>", kind="path", metavar="DIR",
           shells=frozenset({"plugin", "fuzz"}), group="fuzz", needs="fuzz"),
    Option("hypothesis-db", "<plugin>--fuzz: the Hypothesis example database every worker "
           "shares</plugin><fuzz>a Hypothesis example database shared with other runs, "
           "workers and machines</fuzz>: a directory, redis://host:port/db (the redis extra) or "
           "github:OWNER/REPO[/ARTIFACT] (<plugin>read-only, with a local folder</plugin><fuzz>"
           "a CI job's uploaded database, read-only, with writes to hypothesis/examples in the "
           "--out folder</fuzz>)<fuzz>; its counterexamples are replayed first, new ones are "
           "added</fuzz>", metavar="DIR|URL", shells=frozenset({"plugin", "fuzz"}), group="fuzz",
           needs="fuzz"),
    # -- the fuzz subcommand (its target, grading and output options are the run's) ------
    Option("demo", "fuzz a bundled broken agent (its message IDs come from a counter that "
           "restarts at every prompt): see what a finding, its shrinking and its regression "
           "file look like (exits 1)", kind="flag", default=False, shells=FUZZ, group="demo"),
    Option("effort", "named Hypothesis settings: {efforts} (default dev)", kind="choice",
           default="dev", choices=("ci", "dev", "deep"), shells=FUZZ, group="effort"),
    Option("max-examples", "generated runs (overrides the effort's number)", kind="int",
           metavar="N", check=at_least_one, shells=FUZZ, group="effort"),
    Option("time-budget", "stop generating after this long (for the whole run, all workers)",
           kind="float", metavar=_SECONDS, check=positive_seconds, shells=FUZZ,
           group="effort"),
    Option("shrink-budget", "stop shrinking after this long, keeping the smallest "
           "counterexample so far (default: half the time budget, at least 30 s; 600 s when "
           "there is no time budget)", kind="float", metavar=_SECONDS, check=positive_seconds,
           shells=FUZZ, group="effort"),
    Option("workers", "generate on N worker processes sharing one example database (agents; "
           "default 1): --max-examples and --time-budget are for the whole run, each worker's "
           "seed derives from --seed, each broken rule is shrunk and saved once", kind="int",
           default=1, metavar="N", check=at_least_one, shells=FUZZ, group="effort"),
    Option("seed", "the run's seed (printed either way; the same seed repeats the run)",
           kind="int", metavar="N", shells=FUZZ, group="effort"),
    Option("runs-per-process", "persistent mode: one agent process serves up to N "
           "generated runs, each in sessions of its own; a fresh one is started for a load or "
           "resume on a fresh process, after a crash, hang or broken rule, and after N runs "
           "(default {runs_per_process}); an interactive client takes each run as a turn of "
           "its own", kind="int", metavar="N", check=at_least_one,
           shells=FUZZ, group="effort"),
    Option("fresh-process", "a fresh agent (or client) process for every generated run (as before "
           "persistent mode; the same as --runs-per-process 1)", kind="flag", default=False,
           shells=FUZZ, group="effort"),
    Option("max-failures", "stop generating once N rules broke (default: go on to the end)",
           kind="int", metavar="N", check=at_least_one, shells=FUZZ, group="effort"),
    Option("no-save", "do not save failures", kind="flag", default=False, shells=FUZZ,
           group="regressions"),
    Option("emit-case", "also write each shrunk counterexample as a case of one case file "
           "(run it with --cases DIR; docs/fuzzing-campaigns.md)", kind="path",
           metavar="FILE.yaml", shells=FUZZ, group="regressions"),
)

_BY_NAME = {o.name: o for o in OPTIONS}


def option(name: str) -> Option:
    """The row named ``name`` (its command-line name)."""
    return _BY_NAME[name]


def for_shell(shell: str) -> list[Option]:
    """The rows ``shell`` has, in table order."""
    return [o for o in OPTIONS if shell in o.shells]


_FRAGMENT = re.compile(r"<(cli|fuzz|plugin|action)>(.*?)</\1>", re.DOTALL)
_NAMED = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
_NAMED_WITH_METAVAR = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)(?: [A-Z][A-Z:|=]*\b)?")
_BLANK = re.compile(r"\{([a-z_]+)\}")


def spelling(shell: str) -> Callable[[str], str]:
    """``name -> how shell spells the option``: ``timeout -> --acp-timeout`` in the plugin,
    ``agent -> the input agent`` in the Action; a name the shell does not have (``--out``
    in the plugin) is left as the command line spells it."""
    def spell(name: str) -> str:
        row = _BY_NAME.get(name)
        if row is not None and shell in ("plugin", "action") and shell in row.shells:
            return row.flags("plugin")[0] if shell == "plugin" else f"the input {name}"
        return f"--{name}"
    return spell


def help_for(row: Option, shell: str, fill: Mapping[str, str] | None = None) -> str:
    """The row's help as ``shell`` prints it: its own fragments kept, the others' dropped,
    the options it names spelled as ``shell`` spells them (an Action input takes no
    metavar: ``--agent CMD`` is ``the input agent``), its blanks (``{efforts}``) filled
    from ``fill``."""
    text = _FRAGMENT.sub(lambda m: m.group(2) if m.group(1) == shell else "", row.help)
    spell = spelling(shell)
    named = _NAMED_WITH_METAVAR if shell == "action" else _NAMED
    text = named.sub(lambda m: spell(m.group(1)), text)
    if fill:
        text = _BLANK.sub(lambda m: fill.get(m.group(1), m.group(0)), text)
    return text


_TYPES: dict[str, Any] = {"path": Path, "float": float, "int": int}


def argument(row: Option, shell: str, fill: Mapping[str, str] | None = None,
             **override: Any) -> dict[str, Any]:
    """The keyword arguments of argparse's ``add_argument`` (and pytest's ``addoption``,
    which takes the same) that render ``row`` in ``shell`` (its help's blanks filled from
    ``fill``); ``override`` for a subcommand's variant of it (``report``'s ``--show``
    prints nothing by default)."""
    kwargs: dict[str, Any] = {"help": help_for(row, shell, fill)}
    if row.kind == "flag":
        kwargs["action"] = "store_true"
    elif row.kind == "list":
        kwargs.update(action="append", default=list(row.default or []))
    else:
        if row.parse is not None or row.kind in _TYPES:
            kwargs["type"] = row.parse or _TYPES[row.kind]
        if row.choices:
            kwargs["choices"] = list(row.choices)
        if row.default is not None:
            kwargs["default"] = row.default
    if row.metavar:
        kwargs["metavar"] = row.metavar
    kwargs.update(override)
    return kwargs


# -- the checks ---------------------------------------------------------------------


@dataclass(frozen=True)
class Clash:
    """Two (or more) options that do not go together, with the one message that says so;
    ``{name}`` in the message is the option as the shell spells it."""

    names: tuple[str, ...]
    applies: Callable[[Mapping[str, Any]], bool]
    message: str


RULES: tuple[Clash, ...] = (
    Clash(("proxy-adapts", "protocol"),
         lambda v: bool(v["proxy-adapts"]) and v["protocol"] == "1",
         "{proxy-adapts} runs the v2 cases (v2 behind the proxy, v1 in front): not with "
         "{protocol} 1"),
    Clash(("client", "client-adapter"), lambda v: bool(v["client"] and v["client-adapter"]),
         "give {client} CMD or {client-adapter} MODULE:FACTORY, not both"),
    Clash(("client-profile", "client-adapter"),
         lambda v: bool(v["client-profile"] and v["client-adapter"]),
         "{client-profile} drives a client process; an adapter reports its messages itself"),
    Clash(("agent", "client", "client-adapter"),
         lambda v: bool(v["agent"] and (v["client"] or v["client-adapter"])),
         "{agent} and {client} test different sides: run them separately"),
    # the fuzz subcommand's
    Clash(("demo", "agent", "client", "client-adapter"),
          lambda v: bool(v["demo"] and (v["agent"] or v["client"] or v["client-adapter"])),
          "{demo} fuzzes a bundled broken agent: not with {agent}, {client} or "
          "{client-adapter}"),
    Clash(("workers", "client", "client-adapter"),
          lambda v: (v["workers"] or 1) > 1 and bool(v["client"] or v["client-adapter"]),
          "{workers} fuzzes an agent; a client is fuzzed by one process"),
    Clash(("fresh-process", "runs-per-process"),
          lambda v: bool(v["fresh-process"]) and v["runs-per-process"] not in (None, 1),
          "{fresh-process} and {runs-per-process} N > 1 contradict each other"),
)


def _given(row: Option, value: Any) -> bool:
    return bool(value) and value != row.default


def _format(message: str, spell: Callable[[str], str]) -> str:
    return re.sub(r"\{([a-z][a-z0-9-]*)\}",
                  lambda m: spell(m.group(1)) if m.group(1) in _BY_NAME else m.group(0),
                  message)


def check_values(values: Mapping[str, Any], shell: str) -> None:
    """Raise :class:`UsageError` (one line, options spelled as ``shell`` spells them) for
    the first problem of ``values`` (table name -> parsed value; a name missing is an
    option this command does not have): a value's own check, a rule of two options, an
    option that needs another. An option given with a role it does not apply to is the
    roles table's to refuse (:func:`conformance.roles.check_options`)."""
    spell = spelling(shell)
    have = {n: v for n, v in values.items() if n in _BY_NAME}
    for name, value in have.items():
        row = _BY_NAME[name]
        problem = row.check(value) if row.check is not None else None
        if problem:
            raise UsageError(problem.format(option=spell(name)))
        if row.needs and row.needs in values and _given(row, value) \
                and not values[row.needs]:  # a shell without it (fuzz) needs no --fuzz
            raise UsageError(f"{spell(name)} needs {spell(row.needs)}")
    for rule in RULES:
        if rule.applies({n: have.get(n) for n in rule.names}):  # missing: not given
            raise UsageError(_format(rule.message, spell))
