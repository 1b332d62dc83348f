"""The roles, one table (``conformance/roles.py``): no shell tests a role's name, and every
other list of the roles (the option table's, the case schema's, ``list``'s order, the
plugin's suites) comes from the table or is held to it here."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from conformance.roles import ROLES, check_options, role_of
from conformance.settings.table import OPTIONS, for_shell, option
from conformance.usage import UsageError

PACKAGE = REPO_ROOT / "conformance"
NAMES = set(ROLES)
SHELLS = ("cli", "pytest_plugin", "certify", "github_action.py", "__main__.py")

#: The fuzz subcommand's roads name the fuzzer's kind (an agent fuzzer or a client fuzzer:
#: ``FuzzResult.role``, a regression's ``fuzz``), not a run's role; they are not run
#: through the roles table yet. Held to these counts: a new test of a role's name fails.
FUZZ_ROADS = {"cli/fuzz.py": 4, "cli/replay.py": 1}


def shell_modules() -> list[Path]:
    found: list[Path] = []
    for name in SHELLS:
        path = PACKAGE / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def _mentions_role(node: ast.AST) -> bool:
    return "role" in ast.unparse(node).lower()


def _role_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_role_constant(e) for e in node.elts)
    return False


def role_tests(source: str) -> list[int]:
    """The lines of ``source`` that test a role by its name: a comparison of something
    named role with a literal (``role == "proxy"``, ``state.role != "agent"``,
    ``role in ("agent", "client")``), or a role's name compared with something named
    role; and a mapping keyed by role names (``{"proxy": ..., "agent": ...}[role]``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            literal = any(_role_constant(o) for o in operands)
            named = any(_mentions_role(o) for o in operands if not _role_constant(o))
            if literal and named or named and any(
                    isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _by_role(node.value) \
                and _mentions_role(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and _by_role(node.func.value) \
                and any(_mentions_role(a) for a in node.args):
            lines.append(node.lineno)
    return sorted(set(lines))


def _by_role(node: ast.AST) -> bool:
    """A mapping literal keyed by role names."""
    return isinstance(node, ast.Dict) and sum(
        isinstance(k, ast.Constant) and k.value in NAMES for k in node.keys) >= 2


def test_the_scan_finds_a_test_of_a_role_name_and_not_a_recorded_side() -> None:
    assert role_tests('if role == "proxy":\n    pass\n') == [1]
    assert role_tests('x = state.role != "agent"\n') == [1]
    assert role_tests('x = role in ("agent", "client")\n') == [1]
    assert role_tests('x = "client" == result.role\n') == [1]
    assert role_tests('c = {"proxy": a, "agent": b, "client": c}[role]\n') == [1]
    assert role_tests('c = {"proxy": a, "agent": b}.get(state.role)\n') == [1]
    # a recorded side, a role looked up in the table, two roles compared: not a test
    assert role_tests('x = h.get("side") == "agent"\n') == []
    assert role_tests('r = ROLES["agent"]\n') == []
    assert role_tests('x = [c for c in cases if c.role == role]\n') == []
    assert role_tests('who = {"client": "c", "agent": "a"}.get(e.src)\n') == []


def test_no_shell_tests_a_role_name() -> None:
    """The command line, the pytest plugin, the Action and certify look a role up in the
    roles table (its entry says what to do); none branches on the role's name."""
    found: dict[str, list[int]] = {}
    for path in shell_modules():
        lines = role_tests(path.read_text(encoding="utf-8"))
        if lines:
            found[path.relative_to(PACKAGE).as_posix()] = lines
    fuzz = {name: len(found.pop(name, [])) for name in FUZZ_ROADS}
    assert found == {}, "a shell tests a role's name; ask its entry in conformance/roles.py"
    assert fuzz == FUZZ_ROADS


def test_the_run_command_and_the_plugin_have_one_road_for_every_role() -> None:
    """One run command (``cmd_run``) and one builder (``load_state``): the three copies are
    gone, and both take the role's entry."""
    run = (PACKAGE / "cli" / "run.py").read_text(encoding="utf-8")
    state = (PACKAGE / "pytest_plugin" / "state.py").read_text(encoding="utf-8")
    for gone in ("def cmd_agent", "def cmd_client", "def cmd_proxy", "report_agent_behind"):
        assert gone not in run
    for gone in ("def _agent_run", "def _client_run", "def _proxy_run", "ROLE_RUNS"):
        assert gone not in state
    assert "def cmd_run(ns: argparse.Namespace, role: Role" in run
    assert "def load_state(config: pytest.Config, role: Role" in state


def test_every_list_of_the_roles_is_the_tables() -> None:
    from conformance.cli import listing

    for row in OPTIONS:  # the option table names roles of the table, or none (every role)
        assert row.roles is None or (row.roles and row.roles <= NAMES), row.name
    schema = json.loads((PACKAGE / "data" / "case.schema.json").read_text(encoding="utf-8"))
    applies = schema["$defs"]["case"]["properties"]["applies"]["properties"]
    assert applies["role"]["enum"] == list(ROLES)  # a case's role
    assert listing.ROLES == tuple(ROLES)  # list's order
    cli, plugin = {o.name for o in for_shell("cli")}, {o.name for o in for_shell("plugin")}
    for role in ROLES.values():
        assert role.name in ROLES and ROLES[role.name] is role
        assert set(role.tested) <= cli and set(role.tested) <= plugin, role.name
        if role.behind is not None:
            assert role.behind.role in ROLES and option(role.behind.option) is not None
        if role.model_option is not None:
            assert option(role.model_option) is not None
    assert sum(r.session for r in ROLES.values()) == 1  # acp_session drives one role


def test_the_role_is_the_first_given_and_a_proxy_holds_its_agent_behind() -> None:
    assert role_of({}) is None
    assert role_of({"agent": "a"}) is ROLES["agent"]
    assert role_of({"client-adapter": "m:f"}) is ROLES["client"]
    assert role_of({"proxy": "p {agent}", "agent": "a"}) is ROLES["proxy"]
    assert role_of({"proxy": "p {agent}", "client": "c {agent}"}) is ROLES["proxy"]
    assert ROLES["proxy"].target({"proxy": "p {agent}", "agent": "a"}) == "p {agent}"
    assert ROLES["client"].target({"client": None, "client-adapter": "m:f"}) == "m:f"


@pytest.mark.parametrize("values,message", [
    ({"client": "c {agent}", "model-server": True},
     r"^--model-server does not apply to the client role \(--client/--client-adapter\)"),
    ({"agent": "a", "proxy-adapts": True},
     r"^--proxy-adapts does not apply to the agent role \(--agent\)"),
    ({"grace": 1.0}, r"^--grace needs --agent or --proxy$"),
])
def test_an_option_of_another_role_is_refused_by_the_table(values: dict[str, object],
                                                            message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check_options(values, "cli")


def test_the_proxy_checks_its_settings_with_each_shells_words() -> None:
    from conformance.settings.table import spelling

    proxy = ROLES["proxy"]
    with pytest.raises(UsageError, match=r"^--acp-proxy: the command must say where"):
        proxy.check({"proxy": "bridge"}, spelling("plugin"))
    with pytest.raises(UsageError, match=r"^--model-server serves a real agent behind the "
                                         r"proxy: give --agent CMD$"):
        proxy.check({"proxy": "p {agent}", "model-server": True}, spelling("cli"))
    with pytest.raises(UsageError, match=r"^--certify keeps every transcript"):
        proxy.check({"proxy": "p {agent}", "certify": Path("b"), "no-transcripts": True,
                     "transcripts": None}, spelling("cli"))
