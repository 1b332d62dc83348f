"""Fixtures for vendor tests: ``acp_session``, a session driven by the suite's client driver."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conformance.pytest_plugin.state import STATE

if TYPE_CHECKING:
    from conformance.checks import Options
    from conformance.results import Finding


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
        from conformance.agent.player import StepDriver
        from conformance.grading import Scope
        from conformance.transcript import Transcript

        self.protocol = protocol
        self.options = options
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir.parent / "acp-transcript.jsonl"
        scope = Scope.of("agent", options, False)
        self.transcript = Transcript({"role": "agent", "protocol": protocol,
                                      "profile": scope.profile, "scope": scope.to_json(),
                                      "target": " ".join(command), "case": "pytest"})
        self.driver = StepDriver(list(command), self.transcript, protocol=protocol,
                                 timeout=timeout, cwd=str(workdir), env=env,
                                 profile=options.profile)
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
        from conformance.agent.player import perform

        perform(self.driver, step)

    def findings(self, *select: str) -> list[Finding]:
        from conformance.grading import grade_recorded

        return grade_recorded(self.transcript.header, self.transcript.entries,
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


SESSION = pytest.StashKey[AgentSession]()


@pytest.fixture
def acp_agent_command(pytestconfig: pytest.Config) -> list[str]:
    """The ``--acp-agent`` command as argv; the test is skipped without one."""
    from conformance.roles import ROLES
    from conformance.settings.table import spelling

    state = pytestconfig.stash.get(STATE, None)
    role = ROLES[state.role] if state is not None else None
    spell = spelling("plugin")
    driven = next(r for r in ROLES.values() if r.session)  # the role acp_session drives
    if role is not None and role.behind is not None and role.behind.role == driven.name:
        tested = spell(role.tested[0])
        pytest.skip(f"acp_session drives {driven.article} {driven.name} directly; "
                    f"{spell(role.behind.option)} is behind {tested} here: run without "
                    f"{tested}")
    if state is None or role is None or not role.session:
        pytest.skip(f"no {driven.name} to test: run pytest with {spell(driven.tested[0])} CMD")
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
