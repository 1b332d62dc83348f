"""pytest plugin: the conformance cases as pytest items, and fixtures for vendor tests.

``pytest --acp-agent CMD`` collects every agent case of the suite once per
protocol version as an item named by its case ID (``ids-across-turns[v1]``);
``pytest --acp-client CMD --acp-client-profile FILE`` does the same with the
client cases. ``-k``, ``-x``, ``-m acp_v2``, ``--junitxml`` and pytest-xdist's
``-n`` work as for any test. A case fails when it has a fail finding the baseline
does not list; the failure shows the findings with their evidence, the
transcript path and the tail of the target's stderr. Every item is
independent: its own target process, temporary working directory and
transcript file, so items can run in any order on any worker.

Vendors who write their own tests get ``acp_session``: a driven session with
the suite's client driver, graded by the suite's checkers.

The plugin is a thin shell over ``conformance.runner`` and
``conformance.client.runner``; it is inert unless ``--acp-agent`` or
``--acp-client`` is given. It registers the ``pytest11`` entry point
``acp_conformance``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conformance.baseline import Baseline
    from conformance.cases import Case
    from conformance.checks import Options
    from conformance.results import CaseResult, Finding


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("acp-conformance", "ACP messageId conformance (acp-conformance)")
    g.addoption("--acp-agent", metavar="CMD",
                help="collect the agent conformance cases against this agent command")
    g.addoption("--acp-client", metavar="CMD",
                help="collect the client conformance cases against this client command; "
                     "{agent} marks where the suite's agent double goes")
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
    g.addoption("--acp-cases", metavar="DIR", help="case directory (default: bundled)")
    g.addoption("--acp-case", action="append", default=[], metavar="ID",
                help="collect only this case, case prefix (load-*) or requirement (repeatable)")
    g.addoption("--acp-transcripts", metavar="DIR",
                help="write one transcript per case into DIR (default: pytest's temp dir)")
    g.addoption("--acp-baseline", metavar="FILE",
                help="expected failures (case:requirement): listed fails become xfail, "
                     "listed entries that now pass fail as stale")
    g.addoption("--acp-json", metavar="PATH", help="write the suite's JSON report here")
    g.addoption("--acp-html", metavar="PATH", help="write the suite's HTML report here")
    g.addoption("--acp-markdown", metavar="PATH",
                help="write the Markdown summary and certification statement here")


@dataclasses.dataclass
class _State:
    role: str  # "agent" | "client": the side under test
    run: Any  # AgentRun or ClientRun
    label: str
    plan: list[tuple[int, Case]]
    cases: list[Case]
    baseline: Baseline | None
    transcripts: Path | None  # --acp-transcripts; None: under pytest's basetemp
    deadline_at: float | None = None  # --acp-deadline as a time.monotonic() value


STATE = pytest.StashKey[_State]()
SESSION = pytest.StashKey["AgentSession"]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "acp: a case of the acp-conformance suite")
    config.addinivalue_line("markers", "acp_v1: an acp-conformance case run over protocol v1")
    config.addinivalue_line("markers", "acp_v2: an acp-conformance case run over protocol v2")
    agent, client = config.getoption("acp_agent"), config.getoption("acp_client")
    if not agent and not client:
        if config.getoption("acp_client_profile"):
            raise pytest.UsageError("acp-conformance: --acp-client-profile needs --acp-client")
        return
    if agent and client:
        raise pytest.UsageError("acp-conformance: --acp-agent and --acp-client test different "
                                "sides: run them separately")
    config.stash[STATE] = _state(config, "agent" if agent else "client", agent or client)
    config.pluginmanager.register(_Reports(config), "acp-conformance-reports")


def _state(config: pytest.Config, role: str, command: str) -> _State:
    from conformance import baseline as baselinemod
    from conformance import cases as casemod
    from conformance.client.profile import ProfileError
    from conformance.client.runner import ClientSetupError
    from conformance.transport import TargetCommandError

    opt = config.getoption
    try:
        all_cases = casemod.load_dir(Path(opt("acp_cases")) if opt("acp_cases") else None)
        cases = casemod.select(all_cases, opt("acp_case"))
        base = (baselinemod.load(Path(opt("acp_baseline")), [c.id for c in all_cases])
                if opt("acp_baseline") else None)
        if opt("acp_timeout") <= 0:
            raise ValueError("--acp-timeout must be a positive number of seconds")
        if opt("acp_deadline") is not None and not opt("acp_deadline") > 0:
            raise ValueError("--acp-deadline must be a positive number of seconds")
        env = {}
        for pair in opt("acp_agent_env"):
            if "=" not in pair:
                raise ValueError(f"--acp-agent-env {pair!r}: expected KEY=VALUE")
            key, value = pair.split("=", 1)
            env[key] = value
        protocols = [1, 2] if opt("acp_protocol") == "both" else [int(opt("acp_protocol"))]
        options = _options(opt("acp_profile"))
        if role == "agent":
            run, plan = _agent_run(command, protocols, options, env, opt, cases)
        else:
            run, plan = _client_run(command, protocols, options, env, opt, cases)
    except (casemod.CaseError, baselinemod.BaselineError, TargetCommandError, ValueError,
            ProfileError, ClientSetupError) as exc:
        raise pytest.UsageError(f"acp-conformance: {exc}") from None
    transcripts = Path(opt("acp_transcripts")) if opt("acp_transcripts") else None
    deadline = opt("acp_deadline")
    deadline_at = time.monotonic() + deadline if deadline else None
    return _State(role, run, command, plan, all_cases, base, transcripts, deadline_at)


def _agent_run(command: str, protocols: list[int], options: Options, env: dict[str, str],
               opt: Any, cases: Sequence[Case]) -> tuple[Any, list[tuple[int, Case]]]:
    from conformance.runner import AgentRun, agent_plan
    from conformance.transport import split_command

    run = AgentRun(command=split_command(command), protocols=protocols, options=options,
                   timeout=opt("acp_timeout"), strict=opt("acp_strict"), env=env)
    return run, agent_plan(run, cases)


def _client_run(command: str, protocols: list[int], options: Options, env: dict[str, str],
                opt: Any, cases: Sequence[Case]) -> tuple[Any, list[tuple[int, Case]]]:
    from conformance.client.profile import load
    from conformance.client.runner import ClientRun, template_of
    from conformance.client.script import check_case

    profile = load(Path(opt("acp_client_profile"))) if opt("acp_client_profile") else None
    template_of(command, profile)  # a bad command is a usage error now, not in every item
    run = ClientRun(protocols=protocols, options=options, command=command, profile=profile,
                    timeout=opt("acp_timeout"), strict=opt("acp_strict"), env=env)
    chosen = [c for c in cases if c.role == "client"]
    for c in chosen:
        check_case(c)
    return run, [(p, c) for p in protocols for c in chosen
                 if c.applies_to(p, options.profile.name)]


def _options(profile: str | None) -> Options:
    from conformance import profiles
    from conformance.checks import Options

    try:
        return Options(profile=profiles.get(profile or profiles.DEFAULT_PROFILE))
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None


def _transcripts_dir(config: pytest.Config, state: _State) -> Path:
    if state.transcripts is not None:
        return state.transcripts
    # pytest's own temp dir (one per xdist worker); the fixture API is not reachable from an Item.
    factory = config._tmp_path_factory  # type: ignore[attr-defined]
    return Path(factory.getbasetemp()) / "acp-transcripts"


# -- collection ----------------------------------------------------------------------


class AcpSuite(pytest.Collector):
    """The suite's cases for one target, in the order a CLI run executes them."""

    def collect(self) -> list[pytest.Item]:
        state = self.config.stash[STATE]
        return [AcpCase.from_parent(self, name=f"{case.id}[v{protocol}]", case=case,
                                    protocol=protocol, order=i)
                for i, (protocol, case) in enumerate(state.plan)]


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselection, so both apply to the cases
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if STATE not in config.stash:
        return
    name = f"acp-{config.stash[STATE].role}"
    suite = AcpSuite.from_parent(session, name=name, nodeid=name)
    collected = suite.collect()
    # The items come after pytest's own collection: report them, so the terminal counts them.
    session.ihook.pytest_collectreport(
        report=pytest.CollectReport(suite.nodeid, "passed", None, list(collected)))
    items.extend(collected)


class CaseFailed(Exception):
    """A case with fails the baseline does not list, or with stale baseline entries."""

    def __init__(self, result: CaseResult, unexpected: Sequence[Finding],
                 stale: Sequence[Any]) -> None:
        super().__init__(result.case)
        self.result = result
        self.unexpected = list(unexpected)
        self.stale = list(stale)


def describe_failure(exc: CaseFailed) -> str:
    from conformance.report.text import safe

    cr = exc.result
    lines = [f"{cr.case}: {cr.description}"]
    if exc.unexpected:
        lines.append(f"{len(exc.unexpected)} fail finding(s):")
    for f in exc.unexpected:
        lines.append(f"  FAIL {f.requirement}: {safe(f.shown_message, 300)}")
        evidence = []
        if f.entries:
            evidence.append("entries " + ", ".join(f"#{e}" for e in f.entries))
        if f.expected is not None:
            evidence.append(f"expected {safe(f.expected, 120)}")
        if f.actual is not None:
            evidence.append(f"actual {safe(f.actual, 120)}")
        if evidence:
            lines.append(f"       {'; '.join(evidence)}")
    for e in exc.stale:
        lines.append(f"  STALE baseline entry {e} ({e.where}): it no longer fails; remove it")
    if cr.note:
        lines.append(f"note: {safe(cr.note, 300)}")
    lines.append(f"transcript: {cr.transcript_path or '(not saved)'}")
    if cr.stderr_tail.strip():
        tail = cr.stderr_tail.strip("\n").split("\n")[-20:]
        lines.append("target stderr (tail):")
        lines.extend(f"  {safe(line, 300)}" for line in tail)
    return "\n".join(lines)


class AcpCase(pytest.Item):
    """One case over one protocol version against the target."""

    def __init__(self, *, case: Case, protocol: int, order: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.protocol = protocol
        self.order = order
        self.result: CaseResult | None = None
        self.add_marker("acp")
        self.add_marker(f"acp_v{protocol}")
        self.extra_keyword_matches.update(case.requirements)  # -k MID-A-07

    def runtest(self) -> None:
        from conformance.results import Outcome

        state = self.config.stash[STATE]
        run = dataclasses.replace(state.run, transcripts=_transcripts_dir(self.config, state))
        if state.deadline_at is not None and time.monotonic() >= state.deadline_at:
            from conformance.runner import DEADLINE_NOTE, not_run

            self.result = not_run(self.case, self.protocol, DEADLINE_NOTE)
            pytest.fail(f"{DEADLINE_NOTE} (--acp-deadline passed)", pytrace=False)
        if state.role == "agent":
            from conformance.driver import Cutoff
            from conformance.runner import CUT_NOTE, run_agent_case

            run = dataclasses.replace(run, deadline=self.config.getoption("acp_deadline"))
            cr = run_agent_case(run, self.case, self.protocol, cutoff=Cutoff(state.deadline_at))
            if cr.note.startswith(CUT_NOTE):
                self.result = cr
                pytest.fail(f"{cr.case}: {cr.note}", pytrace=False)
        else:
            from conformance.client.runner import run_client_case

            cr = run_client_case(run, self.case, self.protocol, state.label)
        self.result = cr
        if cr.transcript_path:
            self.user_properties.append(("transcript", cr.transcript_path))
        if cr.stderr_tail.strip():
            self.add_report_section("call", "stderr (target, tail)", cr.stderr_tail)
        for f in cr.findings:
            if f.outcome is Outcome.WARN:
                self.user_properties.append(("warn", f"{f.requirement}: {f.shown_message}"))
        fails = [f for f in cr.findings if f.outcome is Outcome.FAIL]
        verdict = state.baseline.evaluate([cr]) if state.baseline is not None else None
        unexpected = verdict.unexpected if verdict is not None else fails
        stale = verdict.stale if verdict is not None else []
        if unexpected or stale:
            raise CaseFailed(cr, unexpected, stale)
        if verdict is not None and verdict.expected:
            listed = sorted({f.requirement for f in verdict.expected})
            pytest.xfail(f"baseline lists {len(verdict.expected)} failure(s): {', '.join(listed)}")
        if cr.note and not cr.note.startswith("aborted"):
            pytest.skip(f"not testable: {cr.note}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            return describe_failure(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        path, _, line = self.case.source.rpartition(":")
        return Path(path), max(int(line) - 1, 0) if line.isdigit() else 0, \
            f"{self.case.id} v{self.protocol}"


# -- results across workers, and the suite's own reports --------------------------------


def _payload(item: AcpCase) -> dict[str, Any]:
    """A case result as plain JSON data: it travels from xdist workers in the report."""
    from conformance.report.jsonreport import case_to_json

    assert item.result is not None
    data = {"order": item.order, "case": case_to_json(item.result),
            "results": [f.to_json() for f in item.result.findings],
            "target_info": item.result.target_info}
    return dict(json.loads(json.dumps(data, ensure_ascii=True, default=str)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome: Any = yield
    report = outcome.get_result()
    if call.when == "call" and isinstance(item, AcpCase) and item.result is not None:
        report.acp_case = _payload(item)
    session = item.stash.get(SESSION, None)
    if session is not None and report.failed and call.when == "call":
        path = session.save()
        report.sections.append(("acp-conformance transcript", str(path)))
        tail = session.stderr_tail
        if tail.strip():
            report.sections.append(("Captured stderr (target, tail)", tail))


class _Reports:
    """Gathers case results (from xdist workers too) and writes the suite's reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.cases: dict[int, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "acp_case", None)
        if isinstance(data, dict) and report.when == "call":
            self.cases[int(data["order"])] = data

    def result(self) -> Any:
        from conformance import __version__
        from conformance.report.catalogue import run_date
        from conformance.report.jsonreport import case_from_json
        from conformance.results import RunResult

        state = self.config.stash[STATE]
        result = RunResult(__version__, state.label, state.role, list(state.run.protocols),
                           state.run.options.profile.name, state.run.strict, date=run_date())
        for order in sorted(self.cases):
            data = self.cases[order]
            cr = case_from_json(data["case"], data["results"])
            cr.target_info = dict(data.get("target_info") or {})
            result.cases.append(cr)
            if not result.target_info and cr.target_info.get("name"):
                result.target_info = dict(cr.target_info)
        return result

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller reports
            return
        opt = self.config.getoption
        if not (opt("acp_json") or opt("acp_html") or opt("acp_markdown")):
            return
        from conformance.report.catalogue import traceability
        from conformance.report.jsonreport import write_json

        state = self.config.stash[STATE]
        result = self.result()
        verdict = state.baseline.evaluate(result.cases) if state.baseline is not None else None
        trace = traceability(state.cases)
        if opt("acp_json"):
            write_json(result, Path(opt("acp_json")))
        if opt("acp_html"):
            from conformance.report.html import write_html

            write_html(result, Path(opt("acp_html")), baseline=verdict, trace=trace)
        if opt("acp_markdown"):
            from conformance.report.markdown import write_markdown

            write_markdown(result, Path(opt("acp_markdown")), baseline=verdict, trace=trace)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput") or not self.cases:
            return
        state = self.config.stash[STATE]
        result = self.result()
        counts = result.counts()
        terminalreporter.section("acp-conformance")
        terminalreporter.write_line(
            f"{len(result.cases)} case(s) against {state.label}: "
            + ", ".join(f"{counts[k]} {k}" for k in ("fail", "warn", "info", "pass") if counts[k]))
        if state.baseline is not None:
            for line in state.baseline.evaluate(result.cases).lines():
                terminalreporter.write_line(line)
        for key in ("acp_json", "acp_html", "acp_markdown"):
            if self.config.getoption(key):
                terminalreporter.write_line(f"{key[4:]} report: {self.config.getoption(key)}")


# -- fixtures for vendor tests ----------------------------------------------------------


class AgentSession:
    """A session driven by the suite's client driver, for tests a vendor writes.

    Steps are methods (``start``, ``new_session``, ``prompt``, ``load``,
    ``resume``) or the declarative steps of a case file (``step("start")``,
    ``step({"prompt": {"text": "hi"}})``). ``findings()`` grades what was
    recorded so far with the suite's checkers; ``assert_conformant()`` fails
    the test with the evidence when any selected rule fails.
    """

    def __init__(self, command: Sequence[str], *, protocol: int, options: Options,
                 timeout: float, workdir: Path, env: dict[str, str] | None = None) -> None:
        from conformance.driver import ClientDriver
        from conformance.transcript import Transcript

        self.protocol = protocol
        self.options = options
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir.parent / "acp-transcript.jsonl"
        self.transcript = Transcript({"role": "agent", "protocol": protocol,
                                      "profile": options.profile.name,
                                      "target": " ".join(command), "case": "pytest"})
        self.driver = ClientDriver(list(command), self.transcript, protocol=protocol,
                                   timeout=timeout, cwd=str(workdir), env=env)
        self._stderr = ""

    def start(self) -> None:
        self.driver.start()

    def new_session(self) -> str:
        return self.driver.new_session()

    def prompt(self, text: str, **kwargs: Any) -> None:
        self.driver.prompt(text, **kwargs)

    def load(self) -> None:
        self.driver.load()

    def resume(self, replay: str | None = "start") -> None:
        self.driver.resume(replay)

    def step(self, step: Any) -> None:
        from conformance.runner import perform

        perform(self.driver, step)

    def findings(self, *select: str) -> list[Finding]:
        from conformance.checks import grade

        return grade(self.transcript.entries, protocol=self.protocol, options=self.options,
                     select=list(select) or None)

    def failures(self, *select: str) -> list[Finding]:
        from conformance.results import Outcome

        return [f for f in self.findings(*select) if f.outcome is Outcome.FAIL]

    def assert_conformant(self, *select: str) -> None:
        from conformance.report.text import safe

        fails = self.failures(*select)
        if fails:
            pytest.fail("\n".join(f"FAIL {f.requirement}: {safe(f.shown_message, 300)} "
                                  f"(entries {list(f.entries)})" for f in fails), pytrace=False)

    @property
    def stderr_tail(self) -> str:
        proc = self.driver.proc
        return proc.stderr_text() if proc is not None else self._stderr

    def save(self) -> Path:
        self.transcript.save(self.path)
        return self.path

    def close(self) -> None:
        if self.driver.proc is not None:
            self._stderr = self.driver.proc.stderr_text()
        self.driver.stop()
        self.save()


@pytest.fixture
def acp_agent_command(pytestconfig: pytest.Config) -> list[str]:
    """The ``--acp-agent`` command as argv; the test is skipped without one."""
    state = pytestconfig.stash.get(STATE, None)
    if state is None or state.role != "agent":
        pytest.skip("no agent to test: run pytest with --acp-agent CMD")
    return list(state.run.command)


@pytest.fixture
def acp_protocol(pytestconfig: pytest.Config) -> int:
    """The protocol version for ``acp_session``: the first of ``--acp-protocol``.
    Parametrize it (``@pytest.mark.parametrize("acp_protocol", [1, 2])``) to run both."""
    state = pytestconfig.stash.get(STATE, None)
    return state.run.protocols[0] if state is not None else 1


@pytest.fixture
def acp_session(request: pytest.FixtureRequest, acp_agent_command: list[str],
                acp_protocol: int, tmp_path: Path) -> Iterator[AgentSession]:
    """A driven session against the agent under test; stopped and saved at teardown.
    On failure the report carries the transcript path and the agent's stderr tail."""
    state = request.config.stash[STATE]
    session = AgentSession(acp_agent_command, protocol=acp_protocol, options=state.run.options,
                           timeout=state.run.timeout, workdir=tmp_path / "cwd",
                           env=dict(state.run.env))
    request.node.stash[SESSION] = session
    try:
        yield session
    finally:
        session.close()
