"""One table of run options (conformance/settings/table.py): the command line (the run and
the fuzz subcommand), the pytest plugin, the GitHub Action and docs/options.md are
rendered from it, and each check says the same thing in every shell. Each test here fails
when one of them drifts.

After changing the table: python -m conformance.settings.render action.yml and
python -m conformance.cli.options_doc > docs/options.md
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT, cli_env, run_cli_in_process

from conformance.cli.fuzz import blanks
from conformance.github_action import ActionError, suite_arguments
from conformance.roles import check_options
from conformance.settings.render import action_default, action_description, action_yml
from conformance.settings.table import (
    GROUPS,
    OPTIONS,
    RULES,
    argument,
    check_values,
    for_shell,
    help_for,
    option,
    spelling,
)
from conformance.usage import UsageError

ACTION_YML = REPO_ROOT / "action.yml"

#: Options of the run's parser that are not run options: argparse's own, and demo's.
NOT_RUN_OPTIONS = {"help", "version", "broken"}

#: Subcommands whose option of a table name is their own variant of it, and why.
VARIANTS = {
    ("acp-conformance fuzz", "model-server"): "draws what the model says in generated runs",
    ("acp-conformance replay", "agent-config"): "a model script file starts the server",
    ("acp-conformance replay", "profile"): "grading as recorded in each file by default",
    ("acp-conformance replay", "strict"): "grading as recorded in each file by default",
    ("acp-conformance replay", "schema-dir"): "needed to replay a SCHEMA/official regression",
    ("acp-conformance replay", "no-color"): "in replay's grading group",
    ("acp-conformance replay", "emit-case"): "the regressions replayed, not fuzz's findings",
    ("acp-conformance report", "junit"): "report rebuilds a run's reports",
    ("acp-conformance report", "json"): "report --merge writes the matrix as JSON",
    ("acp-conformance report", "out"): "report writes its reports into DIR",
    ("acp-conformance report", "show"): "report prints nothing unless asked",
    ("acp-conformance report", "cases"): "the traceability section's cases",
    ("acp-conformance list", "json"): "list prints the register as JSON",
    ("acp-conformance lint-cases", "cases"): "a directory of extra cases is linted",
    ("acp-conformance verify", "schema-dir"): "the schemas a bundle's run validated against",
}


def rendered(action: argparse.Action) -> dict[str, Any]:
    """What an argparse (or pytest) option is, in the table's terms."""
    kind = type(action).__name__
    return {"help": action.help, "default": action.default, "type": action.type,
            "choices": list(action.choices) if action.choices else None,
            "metavar": action.metavar, "store_true": kind == "_StoreTrueAction",
            "append": kind == "_AppendAction"}


def expected(row: Any, shell: str, fill: dict[str, str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    return rendered(parser.add_argument(*row.flags(shell), **argument(row, shell, fill)))


def table_name(action: argparse.Action) -> str:
    return next((o[2:] for o in action.option_strings if o.startswith("--")), action.dest)


# -- the command line -------------------------------------------------------------------


def test_the_run_command_has_every_command_line_option_of_the_table_as_the_table_says() -> None:
    from conformance.cli.run import build_parser

    parser = build_parser()
    seen = {}
    for action in parser._actions:
        name = table_name(action)
        if name in NOT_RUN_OPTIONS:
            continue
        assert name in {o.name for o in OPTIONS}, f"--{name} is declared outside the table"
        row = option(name)
        assert action.option_strings == row.flags("cli"), name
        assert rendered(action) == expected(row, "cli"), name
        seen[name] = action
    assert sorted(seen) == sorted(o.name for o in for_shell("cli"))
    groups = {a.dest: g.title for g in parser._action_groups for a in g._group_actions}
    assert {n: groups[a.dest] for n, a in seen.items()} == {
        n: GROUPS[option(n).group] for n in seen}, "an option in another --help group"


def test_every_subcommand_takes_a_run_option_from_the_table_or_says_why_not() -> None:
    from conformance.cli.options_doc import parsers

    names = {o.name for o in for_shell("cli") + for_shell("fuzz")}
    drift = []
    for command, parser in parsers():
        shell = "fuzz" if command == "acp-conformance fuzz" else "cli"
        for action in parser._actions:
            name = table_name(action)
            if name not in names or (command, name) in VARIANTS:
                continue
            row = option(name)
            how = shell if shell in row.shells else "cli"
            if rendered(action) != expected(row, how, blanks() if how == "fuzz" else None):
                drift.append(f"{command} --{name}")
    assert drift == []


def test_the_fuzz_command_declares_no_option_outside_the_table() -> None:
    """Every option of ``acp-conformance fuzz`` is a row of the table (its own, shell fuzz,
    or the run's), and every fuzz row is there, in its --help group."""
    from conformance.cli.fuzz import build_fuzz_parser

    parser = build_fuzz_parser()
    table = {o.name for o in OPTIONS if {"cli", "fuzz"} & o.shells}
    seen = {table_name(a): a for a in parser._actions if table_name(a) not in NOT_RUN_OPTIONS}
    assert sorted(set(seen) - table) == [], "declared outside the table"
    assert sorted(o.name for o in for_shell("fuzz") if o.name not in seen) == []
    groups = {a.dest: g.title for g in parser._action_groups for a in g._group_actions}
    own = [o for o in for_shell("fuzz") if o.group in ("demo", "effort", "regressions")]
    assert {o.name: groups[o.dest] for o in own} == {o.name: GROUPS[o.group] for o in own}
    assert "{" not in "".join(help_for(o, "fuzz", blanks()) for o in own), "a blank unfilled"


def test_the_fuzz_efforts_of_the_table_are_the_fuzzers() -> None:
    """The table names the efforts (its rows cannot import the fuzzer: it stands above
    them); they are the fuzzer's, and its default."""
    from conformance.fuzz.settings import DEFAULT_EFFORT, EFFORTS

    assert option("effort").choices == tuple(EFFORTS)
    assert option("effort").default == DEFAULT_EFFORT
    assert f"(default {DEFAULT_EFFORT})" in option("effort").help
    assert set(option("fuzz-effort").choices) == set(EFFORTS)


@pytest.mark.parametrize("args,message", [
    (["--client", "c {agent}", "--workers", "2"],
     "--workers fuzzes an agent; a client is fuzzed by one process"),
    (["--agent", "a", "--fresh-process", "--runs-per-process", "3"],
     "--fresh-process and --runs-per-process N > 1 contradict each other"),
    (["--demo", "--agent", "a"],
     "--demo fuzzes a bundled broken agent: not with --agent, --client or --client-adapter"),
    (["--agent", "a", "--shrink-budget", "0"],
     "--shrink-budget must be a positive number of seconds"),
    (["--agent", "a", "--runs-per-process", "0"], "--runs-per-process must be at least 1"),
    (["--agent", "a", "--client-profile", "p.yaml"],
     "--client-profile does not apply to the agent role (--agent): leave it out"),
    (["--client", "c {agent}", "--model-server"],
     "--model-server does not apply to the client role (--client/--client-adapter): "
     "leave it out"),
    (["--agent", "a", "--timeout", "0"], "--timeout must be a positive number of seconds"),
], ids=["workers-client", "fresh-and-runs", "demo-and-agent", "shrink-zero", "runs-zero",
        "profile-agent", "model-client", "timeout-zero"])
def test_the_fuzz_command_refuses_with_the_tables_words(
        tmp_path: Path, args: list[str], message: str) -> None:
    assert cli_error(tmp_path, "fuzz", *args) == message


# -- the pytest plugin ------------------------------------------------------------------


class Recorder:
    """pytest's parser, as the plugin's pytest_addoption uses it."""

    def __init__(self) -> None:
        self.parser = argparse.ArgumentParser()
        self.actions: list[argparse.Action] = []

    def getgroup(self, *args: Any) -> Recorder:
        return self

    def addoption(self, *flags: str, **kwargs: Any) -> None:
        self.actions.append(self.parser.add_argument(*flags, **kwargs))


def test_the_plugin_has_every_plugin_option_of_the_table_as_the_table_says() -> None:
    from conformance.pytest_plugin import pytest_addoption

    recorder = Recorder()
    pytest_addoption(recorder)  # type: ignore[arg-type]
    rows = for_shell("plugin")
    assert [a.option_strings for a in recorder.actions] == [r.flags("plugin") for r in rows]
    for action, row in zip(recorder.actions, rows, strict=True):
        assert rendered(action) == expected(row, "plugin"), row.name
        assert action.option_strings[0].startswith("--acp-")


def test_a_help_names_each_option_as_its_shell_spells_it() -> None:
    proxy = option("proxy")
    assert "or --agent CMD)" in help_for(proxy, "cli")
    assert "or --acp-agent CMD: then the agent cases run" in help_for(proxy, "plugin")
    assert "(-: stdout)" in help_for(option("json"), "cli")
    assert "stdout" not in help_for(option("json"), "plugin")  # the plugin has no stdout
    for row in OPTIONS:
        for shell in row.shells:
            assert "<" not in help_for(row, shell), (row.name, shell)


# -- the GitHub Action ----------------------------------------------------------------


def test_action_yml_inputs_are_rendered_from_the_table() -> None:
    text = ACTION_YML.read_text(encoding="utf-8")
    assert action_yml(text) == text, \
        "action.yml drifted from the option table: python -m conformance.settings.render action.yml"
    inputs = yaml.safe_load(text)["inputs"]
    for row in for_shell("action"):
        assert inputs[row.name]["description"] == action_description(row)
        assert inputs[row.name]["default"] == action_default(row)


def _env_for(name: str) -> dict[str, str]:
    """Inputs that make ``name`` a valid input of a run (its role's target given)."""
    if name in ("client", "client-profile"):
        return {"INPUT_CLIENT": "my-cli {agent}"}
    if name in ("proxy", "proxy-adapts"):
        return {"INPUT_PROXY": "my-bridge {agent}"}
    return {"INPUT_AGENT": "my-agent --acp"}


@pytest.mark.parametrize("row", for_shell("action"), ids=lambda r: r.name)
def test_each_action_input_is_passed_to_the_run_and_forwarded_as_its_option(
        row: Any, tmp_path: Path) -> None:
    env_names = {k for s in yaml.safe_load(ACTION_YML.read_text(encoding="utf-8"))["runs"]["steps"]
                 for k in s.get("env", {})}
    variable = "INPUT_" + row.name.upper().replace("-", "_")
    assert variable in env_names, f"the run step does not pass the input {row.name}"
    value = "true" if row.kind == "flag" else row.choices[0] if row.choices else "3"
    argv = suite_arguments({**_env_for(row.name), variable: value}, tmp_path)
    flag = f"--{row.name}"
    assert flag in argv, (row.name, argv)
    if row.kind != "flag":
        assert argv[argv.index(flag) + 1] == value
    parsed = build_run_parser().parse_args(argv)  # the suite takes what the Action passes
    assert parsed is not None


@pytest.mark.parametrize("inputs,args", [
    ({"INPUT_PROXY": "p {agent}", "INPUT_PROXY_ADAPTS": "true", "INPUT_PROTOCOL": "1"},
     ["--proxy", "p {agent}", "--proxy-adapts", "--protocol", "1"]),
    ({"INPUT_AGENT": "a", "INPUT_CLIENT": "c {agent}"}, ["--agent", "a", "--client", "c {agent}"]),
    ({"INPUT_AGENT": "a", "INPUT_PROXY_ADAPTS": "true"}, ["--agent", "a", "--proxy-adapts"]),
    ({"INPUT_AGENT": "a", "INPUT_CLIENT_PROFILE": "p.yaml"},
     ["--agent", "a", "--client-profile", "p.yaml"]),
    ({"INPUT_PROXY": "p {agent}", "INPUT_CLIENT": "c {agent}"},
     ["--proxy", "p {agent}", "--client", "c {agent}"]),
    ({"INPUT_CLIENT": "c {agent}", "INPUT_MODEL_SERVER": "true"},
     ["--client", "c {agent}", "--model-server"]),
    ({"INPUT_CLIENT_PROFILE": "p.yaml", "INPUT_ARGS": "--client-adapter m:f"},
     ["--client-profile", "p.yaml", "--client-adapter", "m:f"]),
], ids=["adapts-v1", "agent-and-client", "adapts-agent", "profile-agent", "proxy-and-client",
        "model-client", "profile-adapter"])
def test_the_action_refuses_its_inputs_with_the_command_lines_words(
        tmp_path: Path, inputs: dict[str, str], args: list[str]) -> None:
    """The Action checks its inputs before the suite starts, with the table's one check:
    the command line's message, each option the Action has spelled as its input."""
    with pytest.raises(ActionError) as raised:
        suite_arguments(inputs, tmp_path)
    action = str(raised.value)
    assert action.startswith("the input ")
    cli = cli_error(tmp_path, *args)
    spell = spelling("action")
    assert action == re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)",
                            lambda m: spell(m.group(1)), cli)


def build_run_parser() -> argparse.ArgumentParser:
    from conformance.cli.run import build_parser

    return build_parser()


# -- docs/options.md --------------------------------------------------------------------


def test_the_reference_lists_every_run_option_as_every_shell_spells_it() -> None:
    text = (REPO_ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    table = text[text.index("## Run options, one table"):]
    for row in OPTIONS:
        line = next((ln for ln in table.splitlines()
                     if ln.startswith("| ") and (f"`--{row.name}`" in ln
                                                 or f"`{row.flags('plugin')[0]}`" in ln)), None)
        assert line is not None, row.name
        assert (f"`{row.flags('plugin')[0]}`" in line) == ("plugin" in row.shells), row.name
        assert (f"| `{row.name}` |" in line) == ("action" in row.shells), row.name


# -- one check, one message ------------------------------------------------------------


def plugin_error(tmp_path: Path, *args: str) -> str:
    """The plugin's one usage-error line for ``args`` (a real pytest process)."""
    env = dict(cli_env(), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), *args],
                          check=False, capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "acp-conformance: " in ln]
    assert len(lines) == 1, proc.stderr
    return lines[0].split("acp-conformance: ", 1)[1]


def cli_error(tmp_path: Path, *args: str) -> str:
    proc = run_cli_in_process(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0].removeprefix("acp-conformance: error: ")


@pytest.mark.parametrize("args", [
    ["--proxy", "p {agent}", "--proxy-adapts", "--protocol", "1"],
    ["--agent", "a", "--timeout", "0"],
    ["--agent", "a", "--agent-env", "NOVALUE"],
    ["--agent", "a", "--proxy-adapts"],
    ["--client", "c {agent}", "--client-adapter", "m:f"],
], ids=["adapts-v1", "timeout-zero", "env-pair", "other-role", "client-and-adapter"])
def test_the_command_line_and_the_plugin_refuse_with_the_same_words(
        tmp_path: Path, args: list[str]) -> None:
    cli = cli_error(tmp_path, *args)
    plugin = plugin_error(tmp_path, *[a.replace("--", "--acp-", 1) if a.startswith("--") else a
                                      for a in args])
    assert plugin.replace("--acp-", "--") == cli


def test_the_plugins_fuzzing_and_the_fuzz_command_refuse_with_the_same_words(
        tmp_path: Path) -> None:
    """--acp-fuzz's model server with a client is refused as fuzz's --model-server is."""
    cli = cli_error(tmp_path, "fuzz", "--client", "c {agent}", "--model-server")
    plugin = plugin_error(tmp_path, "--acp-fuzz", "--acp-client", "c {agent}",
                          "--acp-model-server")
    assert plugin.replace("--acp-", "--") == cli
    assert cli.startswith("--model-server does not apply to the client role")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: "+".join(r.names))
def test_each_rule_refuses_its_options_with_one_message_in_every_shell(rule: Any) -> None:
    import re

    first, second = rule.names[:2]
    values = {n: True if option(n).kind == "flag" else "1" if n == "protocol"
              else 2 if option(n).kind == "int" else "x" for n in (first, second)}
    for shell in ("cli", "plugin"):
        with pytest.raises(UsageError) as raised:
            check_values(values, shell)
        spell = spelling(shell)
        assert str(raised.value) == re.sub(r"\{([a-z-]+)\}",
                                           lambda m, spell=spell: spell(m.group(1)),
                                           rule.message)
        assert spell(first) in str(raised.value)


@pytest.mark.parametrize("row", [o for o in OPTIONS if o.check is not None],
                         ids=lambda r: r.name)
def test_each_value_check_refuses_a_bad_value_and_takes_a_good_one(row: Any) -> None:
    bad, good = ((0.0, 1.5) if row.kind == "float" else (0, 2) if row.kind == "int"
                 else (["NOVALUE"], ["K=V"]))
    with pytest.raises(UsageError, match=f"^--acp-{row.name} " if "plugin" in row.shells
                       else f"^--{row.name} "):
        check_values({row.name: bad}, "plugin" if "plugin" in row.shells else "cli")
    check_values({row.name: good}, "cli")


def test_an_option_of_another_role_is_refused_and_one_without_its_target_needs_it() -> None:
    with pytest.raises(UsageError, match=r"^--grace does not apply to the client role "
                                         r"\(--client/--client-adapter\): leave it out$"):
        check_options({"client": "c {agent}", "grace": 1.0}, "cli")
    with pytest.raises(UsageError, match=r"^--acp-proxy-adapts needs --acp-proxy$"):
        check_options({"proxy-adapts": True}, "plugin")
    with pytest.raises(UsageError, match=r"^--acp-regressions needs --acp-fuzz$"):
        check_options({"regressions": "r", "fuzz": False}, "plugin")
    check_options({"proxy": "p {agent}", "agent": "a", "grace": 1.0, "proxy-adapts": True},
                 "cli")  # a proxy's --agent is the agent behind it
