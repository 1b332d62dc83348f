"""pytest plugin: the conformance cases as pytest items, and fixtures for vendor tests.

``pytest --acp-agent CMD`` collects every agent case of the suite once per
protocol version as an item named by its case ID (``ids-across-turns[v1]``);
``pytest --acp-client CMD --acp-client-profile FILE`` (or ``--acp-client-adapter
MODULE:FACTORY``, in-process) does the same with the client cases, and
``pytest --acp-proxy "CMD {agent}"`` with the proxy cases (the suite's agent double
behind the proxy; with ``--acp-agent CMD`` the agent cases run through the proxy to
that real agent, whose own findings are reported apart, never as the proxy's;
``--acp-proxy-adapts`` declares a v2-to-v1 adapter). ``-k``, ``-x``, ``-m acp_v2``,
``--junitxml`` and pytest-xdist's ``-n`` work as for any test. A case fails when it
has a fail finding the baseline does not list; the failure shows the findings with
their evidence, the transcript path and the tail of the target's stderr. Every item is
independent: its own target process, temporary working directory and
transcript file, so items can run in any order on any worker.

Vendors who write their own tests get ``acp_session``: a driven session with
the suite's client driver, graded by the suite's checkers.

The plugin is a thin shell over the run engine (``conformance.engine``) and the
roles table (``conformance.roles``: each role's settings and suite, looked up, never
tested by name); it is inert unless ``--acp-agent``, ``--acp-client`` or
``--acp-proxy`` is given. It registers the ``pytest11`` entry point
``acp_conformance``. This module holds the hooks; ``state`` reads the options
into the run and its plan, ``items`` collects the cases as items, ``reports``
writes the suite's own reports, ``session`` has ``acp_session`` and its fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conformance.pytest_plugin import fuzzing
from conformance.pytest_plugin.items import AcpCase, AcpSuite, payload
from conformance.pytest_plugin.reports import Reports
from conformance.pytest_plugin.session import (  # noqa: F401  (fixtures the plugin provides)
    SESSION,
    acp_agent_command,
    acp_protocol,
    acp_session,
)
from conformance.pytest_plugin.state import STATE, load_state


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's ``--acp-*`` options, rendered from the option table
    (:mod:`conformance.settings.table`) as the command line's are."""
    from conformance.settings.table import argument, for_shell

    g = parser.getgroup("acp-conformance", "ACP messageId conformance (acp-conformance)")
    for row in for_shell("plugin"):
        g.addoption(*row.flags("plugin"), **argument(row, "plugin"))


def option_values(config: pytest.Config) -> dict[str, Any]:
    """The table's options as the plugin parsed them, by table name."""
    from conformance.settings.table import for_shell

    return {row.name: config.getoption(row.flags("plugin")[0][2:].replace("-", "_"))
            for row in for_shell("plugin")}


def pytest_configure(config: pytest.Config) -> None:
    from conformance.roles import ROLES, check_options, role_of
    from conformance.usage import UsageError

    config.addinivalue_line("markers", "acp: a case of the acp-conformance suite")
    config.addinivalue_line("markers", "acp_v1: an acp-conformance case run over protocol v1")
    config.addinivalue_line("markers", "acp_v2: an acp-conformance case run over protocol v2")
    values = option_values(config)
    try:  # the option table's checks, with the command line's words
        check_options(values, "plugin")
    except UsageError as exc:
        raise pytest.UsageError(f"acp-conformance: {exc}") from None
    role = role_of(values)
    if role is not None and not role.fuzz and values["fuzz"]:
        fuzzed = " or ".join(f"{r.article} {r.name}" for r in ROLES.values() if r.fuzz)
        raise pytest.UsageError(f"acp-conformance: --acp-fuzz fuzzes {fuzzed}, not "
                                f"{role.article} {role.name}: run the {role.name} cases "
                                f"without --acp-fuzz")
    if fuzzing.configure(config):  # --acp-fuzz: the fuzz tests instead of the cases
        return
    if role is None:
        return
    # the target under test: a command, or an in-process adapter (the proxy's --acp-agent,
    # if given, is the real agent behind it)
    config.stash[STATE] = load_state(config, role, values)
    config.pluginmanager.register(Reports(config), "acp-conformance-reports")


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselection, so both apply to the cases
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if fuzzing.FUZZ in config.stash:
        collected = fuzzing.collect(session)
        parent = collected[0].parent if collected else None
        session.ihook.pytest_collectreport(report=pytest.CollectReport(
            parent.nodeid if parent is not None else "", "passed", None, list(collected)))
        items.extend(collected)
        return
    if STATE not in config.stash:
        return
    name = f"acp-{config.stash[STATE].role}"
    suite = AcpSuite.from_parent(session, name=name, nodeid=name)
    collected = suite.collect()
    # The items come after pytest's own collection: report them, so the terminal counts them.
    session.ihook.pytest_collectreport(
        report=pytest.CollectReport(suite.nodeid, "passed", None, list(collected)))
    items.extend(collected)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome: Any = yield
    report = outcome.get_result()
    if call.when == "call" and isinstance(item, AcpCase) and item.result is not None:
        report.acp_case = payload(item)
    session = item.stash.get(SESSION, None)
    if session is not None and report.failed and call.when == "call":
        path = session.save()
        report.sections.append(("acp-conformance transcript", str(path)))
        tail = session.stderr_tail
        if tail.strip():
            report.sections.append(("Captured stderr (target, tail)", tail))
