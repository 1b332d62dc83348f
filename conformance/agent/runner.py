"""The agent role: how one agent case is driven (the suite plays the client), and the
agent suite handed to the run engine (:mod:`conformance.engine`), which owns the loop.

The CLI and the pytest plugin are thin shells over the engine.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.agent.faults import RequestRefused, _RpcError
from conformance.agent.player import StepDriver, perform
from conformance.cases import Case
from conformance.engine import (
    Signals,
    Suite,
    run_suite,
)
from conformance.grading import Ending
from conformance.lifecycle import (
    INTERRUPT_GRACE,
    Cutoff,
    case_scope,
    new_transcript,
    play_case,
    safe_name,
)
from conformance.results import CaseResult, RunResult
from conformance.settings import RunSettings
from conformance.transcript import Transcript
from conformance.transport import owner_of_connection
from conformance.transport.home import case_env

__all__ = ["AgentRun", "agent_plan", "agent_suite", "run_agent_case", "run_agent_suite"]


@dataclass(kw_only=True)
class AgentRun(RunSettings):
    """The agent role's run: the shared settings and the agent's own."""

    command: Sequence[str]
    schema_dir: Path | None = None
    model: Any = None  # a running ModelServer (--model-server), or None
    model_script: Path | None = None  # --model-script: one script for every case
    grace: float | None = None  # --grace: MID-A-09's grace window (None: the driver's 0.25 s)


def agent_suite(run: AgentRun, cases: Sequence[Case], target_label: str,
                choices: Sequence[Case] | None = None) -> Suite:
    """The agent role as the engine runs it: its plan and how one case is played;
    ``choices`` (every case loaded) names what would run when the selection plans nothing."""
    def play(protocol: int, case: Case, signals: Signals | None, cutoff: Cutoff) -> CaseResult:
        return run_agent_case(run, case, protocol, signals=signals, cutoff=cutoff)

    if run.model is not None:  # a request naming no case's route: whose target sent it
        run.model.resolver = _model_route_of(run.model.port)
    return Suite("agent", target_label, agent_plan(run, cases), play,
                 scope=lambda case: case_scope("agent", run.options, run.strict, case),
                 target=" ".join(run.command), selected=[c.id for c in cases],
                 runnable=[c.id for _, c in agent_plan(run, choices or cases)])


def run_agent_suite(run: AgentRun, cases: Sequence[Case], target_label: str,
                    choices: Sequence[Case] | None = None,
                    started: Callable[[], None] | None = None) -> RunResult:
    return run_suite(agent_suite(run, cases, target_label, choices), run, started=started)


def _model_route_of(server_port: int) -> Callable[[int], str | None]:
    def resolve(client_port: int) -> str | None:
        target = owner_of_connection(client_port, server_port)
        return safe_name(str(target.transcript.header.get("case"))) if target else None
    return resolve


def agent_plan(run: AgentRun, cases: Sequence[Case]) -> list[tuple[int, Case]]:
    """The (protocol, case) pairs a run executes, in report order."""
    return [(p, c) for p in run.protocols for c in cases
            if c.role == "agent" and c.applies_to(p, run.options.profile.name)]


def play_steps(driver: Any, steps: Sequence[Any], step: Callable[[Any, Any], None]) -> None:
    """Play a case's steps with ``step``; a request the case needs that the target answered
    with an error ends the case as not run (RequestRefused), for every role that drives."""
    try:
        for s in steps:
            step(driver, s)
    except _RpcError as exc:
        raise RequestRefused(exc.method, str(exc)) from None


def stop_driver(driver: Any, transcript: Transcript, hurry: bool, model: Any, name: str,
                jobs: int) -> str:
    """End a driver's target (fast when ``hurry``) and record what the header keeps of it:
    the target's info and, behind the model server, what the model said. Its stderr."""
    stderr = driver.proc.stderr_text() if driver.proc else ""
    if hurry and driver.proc is not None:  # end it fast
        driver.proc.close(INTERRUPT_GRACE)
    driver.stop()
    info = driver.info
    transcript.header["target_info"] = {"name": info.name, "version": info.version,
                                        "protocol": info.protocol}
    if model is not None:  # what the model said while the agent made this traffic
        from conformance.modelserver.cases import end_case

        transcript.header["model_requests"] = end_case(model, safe_name(name),
                                                       shared=jobs <= 1)
    return stderr


class AgentDrive:
    """The agent role's drive: the suite plays the client (``StepDriver``) through a
    case's steps against one agent command, in a scratch working folder."""

    def __init__(self, run: AgentRun, case: Case, protocol: int, transcript: Transcript,
                 cutoff: Cutoff | None) -> None:
        self.run, self.case, self.transcript = run, case, transcript
        self.name = str(transcript.header["case"])
        command, env = list(run.command), dict(run.env)
        if run.model is not None:  # the case's own route of the model server
            from conformance.modelserver.cases import use_case_script

            url = use_case_script(run.model, case, safe_name(self.name), run.model_script,
                                  transcript.header)
            command = [a.replace(run.model.url, url) for a in command]
            env = {k: v.replace(run.model.url, url) for k, v in env.items()}
        self.cwd = tempfile.TemporaryDirectory(prefix="acp-conformance-")
        # the case's own HOME, XDG folders and TMPDIR: cases at once cannot race each other
        self.home = tempfile.TemporaryDirectory(prefix="acp-home-")
        env = case_env(env, self.home.name)
        self.driver = StepDriver(command, transcript, protocol=protocol, timeout=run.timeout,
                                   cwd=self.cwd.name, env=env, turn_timeout=run.turn_timeout,
                                   cutoff=cutoff, grace=run.grace, profile=run.options.profile)
        self.stderr = ""

    def drive(self) -> None:
        play_steps(self.driver, self.case.drive, perform)

    def stop(self, hurry: bool) -> None:
        self.stderr = stop_driver(self.driver, self.transcript, hurry, self.run.model,
                                  self.name, self.run.jobs)
        self.cwd.cleanup()
        self.home.cleanup()

    def conn(self) -> int:
        return self.driver.conn

    def ended(self, ending: Ending) -> Ending:
        return ending


def run_agent_case(run: AgentRun, case: Case, protocol: int, *,
                   signals: Signals | None = None, cutoff: Cutoff | None = None) -> CaseResult:
    name = f"{case.id}@v{protocol}"
    scope = case_scope("agent", run.options, run.strict, case)
    transcript = new_transcript("agent", protocol, scope, " ".join(run.command), name,
                                case.requirements, run.masker)
    drive = AgentDrive(run, case, protocol, transcript, cutoff)
    cr = play_case(case, protocol, "agent", drive, transcript, transcripts=run.transcripts,
                   signals=signals, deadline=run.deadline, schema_dir=run.schema_dir)
    cr.stderr_tail = drive.stderr
    cr.target_info = dict(transcript.header.get("target_info", {}))
    return cr
