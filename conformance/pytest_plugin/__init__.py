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
roles' suites (``conformance.agent.runner``, ``conformance.client.runner``,
``conformance.proxy.runner``); it is inert unless ``--acp-agent``, ``--acp-client``
or ``--acp-proxy`` is given. It registers the ``pytest11`` entry point
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
    g = parser.getgroup("acp-conformance", "ACP messageId conformance (acp-conformance)")
    g.addoption("--acp-agent", metavar="CMD",
                help="collect the agent conformance cases against this agent command")
    g.addoption("--acp-client", metavar="CMD",
                help="collect the client conformance cases against this client command; "
                     "{agent} marks where the suite's agent double goes")
    g.addoption("--acp-proxy", metavar="CMD",
                help="collect the proxy conformance cases against this proxy, bridge or "
                     "gateway command; {agent} marks where the agent goes (the suite's agent "
                     "double, or --acp-agent CMD: then the agent cases run through the proxy)")
    g.addoption("--acp-proxy-adapts", action="store_true",
                help="the proxy is a declared v2-to-v1 adapter: v2 behind it, v1 in front "
                     "(the v2 cases run; MID-V2-10 is graded)")
    g.addoption("--acp-client-profile", metavar="FILE",
                help="how to drive the client through a pty and read its messages (YAML)")
    g.addoption("--acp-agent-env", action="append", default=[], metavar="K=V",
                help="extra environment for the target (repeatable)")
    g.addoption("--acp-protocol", choices=["1", "2", "both"], default="both",
                help="protocol version(s) to test (default: both)")
    g.addoption("--acp-profile", default=None, metavar="NAME",
                help="v2 rule profile (default: the newest published rules)")
    g.addoption("--acp-strict", action="store_true", help="turn every warn into a fail")
    g.addoption("--acp-timeout", type=float, default=10.0, metavar="SECONDS",
                help="longest silence allowed while waiting for the target (default 10)")
    g.addoption("--acp-deadline", type=float, default=None, metavar="SECONDS",
                help="longest the whole session may spend on the cases: then the case in "
                     "progress is cut and graded and the rest are not run; both fail")
    g.addoption("--acp-repeat", type=int, default=1, metavar="N",
                help="play every case N times: a rule whose outcome differs between them is "
                     "reported as unstable ('fails in 2 of 5 runs'); a fault in any run counts")
    g.addoption("--acp-cases", metavar="DIR", help="case directory (default: bundled)")
    g.addoption("--acp-case", action="append", default=[], metavar="SELECTOR",
                help="collect only the cases this selects: a case, requirement or sub-rule ID, "
                     "or a glob of any of them ('load-*') (repeatable)")
    g.addoption("--acp-transcripts", metavar="DIR",
                help="write one transcript per case into DIR (default: pytest's temp dir)")
    g.addoption("--acp-baseline", metavar="FILE",
                help="expected failures (case:requirement): listed fails become xfail, "
                     "listed entries that now pass fail as stale")
    g.addoption("--acp-json", metavar="PATH", help="write the suite's JSON report here")
    g.addoption("--acp-html", metavar="PATH", help="write the suite's HTML report here")
    g.addoption("--acp-markdown", metavar="PATH",
                help="write the Markdown summary and certification statement here")
    g.addoption("--acp-certify", metavar="DIR",
                help="write a submission bundle into DIR and DIR.tar.gz (statement, report, "
                     "every transcript, a manifest of SHA-256 digests); check it with "
                     "'acp-conformance verify' (docs/certify.md)")
    g.addoption("--acp-badge", metavar="PATH", help="write the verdict as an SVG badge here")
    g.addoption("--acp-target-name", metavar="NAME",
                help="the target's name as the reports head it (default: its initialize)")
    g.addoption("--acp-target-version", metavar="VERSION",
                help="the target's version as the reports head it (default: its initialize)")
    fuzzing.add_options(g)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "acp: a case of the acp-conformance suite")
    config.addinivalue_line("markers", "acp_v1: an acp-conformance case run over protocol v1")
    config.addinivalue_line("markers", "acp_v2: an acp-conformance case run over protocol v2")
    proxy = config.getoption("acp_proxy")
    if config.getoption("acp_proxy_adapts") and not proxy:
        raise pytest.UsageError("acp-conformance: --acp-proxy-adapts needs --acp-proxy")
    if proxy and config.getoption("acp_fuzz"):
        raise pytest.UsageError("acp-conformance: --acp-fuzz fuzzes an agent or a client, "
                                "not a proxy: run the proxy cases without --acp-fuzz")
    if fuzzing.configure(config):  # --acp-fuzz: the fuzz tests instead of the cases
        return
    agent, client = config.getoption("acp_agent"), config.getoption("acp_client")
    adapter = config.getoption("acp_client_adapter")
    if client and adapter:
        raise pytest.UsageError("acp-conformance: give --acp-client CMD or --acp-client-adapter "
                                "MODULE:FACTORY, not both")
    if config.getoption("acp_client_profile") and adapter:
        raise pytest.UsageError("acp-conformance: --acp-client-profile drives a client "
                                "process; an adapter reports its messages itself")
    if config.getoption("acp_client_profile") and not client:
        raise pytest.UsageError("acp-conformance: --acp-client-profile needs --acp-client")
    client = client or adapter  # the client under test: a command, or an in-process adapter
    if not agent and not client and not proxy:
        return
    if proxy and client:
        raise pytest.UsageError("acp-conformance: --acp-proxy and --acp-client test different "
                                "sides: run them separately")
    if agent and client:
        raise pytest.UsageError("acp-conformance: --acp-agent and --acp-client test different "
                                "sides: run them separately")
    if proxy:  # --acp-agent, if given, is the real agent behind the proxy
        config.stash[STATE] = load_state(config, "proxy", proxy)
    else:
        config.stash[STATE] = load_state(config, "agent" if agent else "client",
                                         agent or client)
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
