"""The runner: cases x protocol versions -> processes -> transcripts -> checkers -> results.

The CLI and the pytest plugin are thin shells over this module.
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.agent.driver import Cutoff, RequestRefused, _RpcError
from conformance.agent.player import StepDriver, perform
from conformance.cases import Case
from conformance.checks import Options
from conformance.lifecycle import (
    CUT_NOTE,
    DEADLINE_NOTE,
    INTERRUPT_GRACE,
    Ending,
    case_scope,
    conclude,
    keep_stand_ins,
    new_transcript,
    play_case,
    safe_name,
    stand_in,
)
from conformance.masking import Masker
from conformance.results import CaseResult, Reason, RunResult
from conformance.transcript import Transcript
from conformance.transport import owner_of_connection

__all__ = ["CUT_NOTE", "DEADLINE_NOTE", "AgentRun", "RunInterrupted", "Shortcut", "agent_plan",
           "not_run", "perform", "run_agent_case", "run_agent_suite", "run_plan", "safe_name"]


class RunInterrupted(Exception):
    """SIGINT (Ctrl-C) or SIGTERM ended the run early.

    The case in progress was stopped (its target's process group ended), graded
    on what was recorded and saved; ``result`` holds every case graded so far.
    """

    def __init__(self, result: RunResult, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.result = result
        self.signum = signum


class _Signals:
    """While a run lasts, SIGINT and SIGTERM stop the case being driven, not the grading.

    The first signal raises KeyboardInterrupt only while a case drives its
    target in this thread (so a blocked wait ends at once); otherwise it is
    noted, cases driven by other threads are cut through the run's Cutoff, and
    the run stops after them. Later signals are noted only: cleanup and the
    reports are bounded and must not be torn.
    """

    def __init__(self, enabled: bool, cutoff: Cutoff) -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: int | None = None
        self.driving = False
        self.cutoff = cutoff
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:  # noqa: PYI034 - typing.Self needs Python 3.11
        if self.enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        self.cutoff.cut(signal.Signals(signum).name)
        if first and self.driving:
            raise KeyboardInterrupt


@dataclass
class AgentRun:
    command: Sequence[str]
    protocols: Sequence[int]
    options: Options
    timeout: float = 10.0
    strict: bool = False
    transcripts: Path | None = None
    schema_dir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    progress: Callable[[int, int, str], None] | None = None
    turn_timeout: float | None = None  # longest single wait; None: 6 x timeout
    handle_signals: bool = False  # SIGINT/SIGTERM end the run cleanly (RunInterrupted)
    model: Any = None  # a running ModelServer (--model-server), or None
    model_script: Path | None = None  # --model-script: one script for every case
    jobs: int = 1  # cases run at the same time (--jobs)
    deadline: float | None = None  # seconds the whole run may last (--deadline)
    keep_going: bool = False  # --keep-going: run every case even after a repeated fault
    masker: Masker | None = None  # masks secrets where transcripts record them (None: off)


class Shortcut:
    """Which cases of a protocol version are not run, decided from the cases before
    them in plan order (so a concurrent run decides exactly as a serial one).

    One negotiation answer ("v2 unsupported", or a failed negotiation: the driver's
    ``NegotiationFailed``) settles a version. So does a fault
    every case would repeat: one known from a single case (``SameForEveryCase``),
    or the same target fault at the same step in two consecutive cases. The
    cases that ran keep their findings; the rest say why they were not run.
    """

    def __init__(self, keep_going: bool = False) -> None:
        self.keep_going = keep_going
        self.stopped: dict[int, tuple[str, Reason]] = {}  # protocol -> (note, reason)
        self.last: dict[int, CaseResult] = {}  # the previous case of each version

    def skip(self, case: Case, protocol: int) -> CaseResult | None:
        """The result that stands in for ``case``, or None when it is to be run."""
        if protocol not in self.stopped:
            return None
        note, reason = self.stopped[protocol]
        return not_run(case, protocol, note, reason)

    def after(self, cr: CaseResult) -> None:
        p, previous = cr.protocol, self.last.get(cr.protocol)
        self.last[p] = cr
        if p in self.stopped:
            return
        if cr.reason is Reason.VERSION_UNSUPPORTED:
            self.stopped[p] = (cr.note, Reason.VERSION_UNSUPPORTED)
        elif cr.reason is Reason.NOT_RUN and cr.every_case:  # the negotiation failed
            self.stopped[p] = (f"{cr.note} in {cr.case}", Reason.NOT_RUN)
        elif self.keep_going or not cr.fault:
            return
        elif cr.every_case:
            self.stopped[p] = (f"not run: {cr.fault} in {cr.case}", Reason.NOT_RUN)
        elif previous is not None and previous.fault == cr.fault:
            why = f"the target {cr.fault} in {previous.case} and {cr.case}"
            self.stopped[p] = (f"not run: {why}", Reason.NOT_RUN)


def run_agent_suite(run: AgentRun, cases: Sequence[Case], target_label: str) -> RunResult:
    result = RunResult(__version__, target_label, "agent", list(run.protocols),
                       run.options.profile.name, run.strict)

    def play(protocol: int, case: Case, signals: _Signals | None, cutoff: Cutoff) -> CaseResult:
        return run_agent_case(run, case, protocol, signals=signals, cutoff=cutoff)

    if run.model is not None:  # a request naming no case's route: whose target sent it
        run.model.resolver = _model_route_of(run.model.port)

    plan = agent_plan(run, cases)
    signum = run_plan(result, plan, play, handle_signals=run.handle_signals,
                      progress=run.progress, jobs=run.jobs, deadline=run.deadline,
                      shortcut=Shortcut(run.keep_going))
    keep_stand_ins(run.transcripts, result.cases, plan, "agent", run.options, run.strict,
                   " ".join(run.command), run.masker)
    conclude(result)
    if result.target_info == {}:
        result.target_info = _target_info(result)
    if signum:
        raise RunInterrupted(result, signum)
    return result


Play = Callable[[int, Case, "_Signals | None", Cutoff], CaseResult]


def run_plan(result: RunResult, plan: Sequence[tuple[int, Case]], play: Play, *,
             handle_signals: bool, progress: Callable[[int, int, str], None] | None,
             jobs: int = 1, deadline: float | None = None,
             shortcut: Shortcut | None = None) -> int | None:
    """Play each (protocol, case) of ``plan`` into ``result.cases``, in plan order, until
    done or until SIGINT/SIGTERM (with ``handle_signals``); returns the signal that ended it.

    ``jobs`` cases run at a time; what lands in ``result`` is what a serial run
    (``jobs=1``) gives. Past ``deadline`` seconds the case in progress is cut and
    graded, the rest are "not run: deadline" and ``result.cut`` says so.
    """
    run_cut = Cutoff(time.monotonic() + deadline if deadline else None)
    with _Signals(handle_signals, run_cut) as signals:
        if jobs <= 1 or len(plan) <= 1:
            for i, (protocol, case) in enumerate(plan):
                if signals.signum:
                    break
                cr = _stand_in(shortcut, case, protocol, run_cut)
                if cr is None:
                    if progress:
                        progress(i, len(plan), f"{case.id} v{protocol}")
                    cr = play(protocol, case, signals, Cutoff(parent=run_cut))
                _record(result, shortcut, cr)
        else:
            from conformance.parallel import play_concurrently

            play_concurrently(result, plan, play, jobs=jobs, signals=signals, run_cut=run_cut,
                              progress=progress, stand_in=lambda c, p, started: _stand_in(
                                  shortcut, c, p, None if started else run_cut),
                              record=lambda cr: _record(result, shortcut, cr))
    not_run_count = sum(c.reason is Reason.NOT_RUN and c.cut == "deadline" for c in result.cases)
    cut_count = sum(c.reason is Reason.CUT and c.cut == "deadline" for c in result.cases)
    if not_run_count or cut_count:
        result.cut = (f"the run passed its --deadline of {deadline:g} s: {cut_count} case(s) "
                      f"in progress cut and graded, {not_run_count} not run")
    return signals.signum


def _stand_in(shortcut: Shortcut | None, case: Case, protocol: int,
              run_cut: Cutoff | None) -> CaseResult | None:
    """The result for a case that is not to be run (a repeated fault; with ``run_cut``, for
    a case not started yet, the deadline), or None."""
    cr = shortcut.skip(case, protocol) if shortcut is not None else None
    if cr is None and run_cut is not None and run_cut.reason() == "deadline":
        cr = not_run(case, protocol, DEADLINE_NOTE, cut="deadline")
    return cr


def _record(result: RunResult, shortcut: Shortcut | None, cr: CaseResult) -> None:
    if shortcut is not None:
        shortcut.after(cr)
    result.cases.append(cr)


def _model_route_of(server_port: int) -> Callable[[int], str | None]:
    def resolve(client_port: int) -> str | None:
        target = owner_of_connection(client_port, server_port)
        return safe_name(str(target.transcript.header.get("case"))) if target else None
    return resolve


def agent_plan(run: AgentRun, cases: Sequence[Case]) -> list[tuple[int, Case]]:
    """The (protocol, case) pairs a run executes, in report order."""
    return [(p, c) for p in run.protocols for c in cases
            if c.role == "agent" and c.applies_to(p, run.options.profile.name)]


def not_run(case: Case, protocol: int, note: str, reason: Reason = Reason.NOT_RUN,
            cut: str = "") -> CaseResult:
    """A case the run did not play: every requirement of it says why (never a pass)."""
    return stand_in(case, protocol, note, reason, cut)


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
        self.driver = StepDriver(command, transcript, protocol=protocol, timeout=run.timeout,
                                   cwd=self.cwd.name, env=env, turn_timeout=run.turn_timeout,
                                   cutoff=cutoff)
        self.stderr = ""

    def play(self) -> None:
        play_steps(self.driver, self.case.drive, perform)

    def stop(self, hurry: bool) -> None:
        self.stderr = stop_driver(self.driver, self.transcript, hurry, self.run.model,
                                  self.name, self.run.jobs)
        self.cwd.cleanup()

    def conn(self) -> int:
        return self.driver.conn

    def ended(self, ending: Ending) -> Ending:
        return ending


def run_agent_case(run: AgentRun, case: Case, protocol: int, *,
                   signals: _Signals | None = None, cutoff: Cutoff | None = None) -> CaseResult:
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


def _target_info(result: RunResult) -> dict[str, Any]:
    for c in result.cases:
        if c.target_info.get("name"):
            return dict(c.target_info)
    return {}
