"""The runner: cases x protocol versions -> processes -> transcripts -> checkers -> results.

The CLI and the pytest plugin are thin shells over this module.
"""

from __future__ import annotations

import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.cases import Case
from conformance.checks import ALWAYS as checks_always
from conformance.checks import Options, grade
from conformance.driver import (
    ClientDriver,
    Cutoff,
    DriveAborted,
    DriveCut,
    NotTestable,
    SameForEveryCase,
    _RpcError,
)
from conformance.results import CaseResult, Finding, Outcome, RunResult, apply_strict
from conformance.transcript import Transcript
from conformance.transport import close_all, owner_of_connection

ALWAYS = checks_always["agent"]  # framing and liveness are graded in every case
INTERRUPT_GRACE = 0.5  # seconds an interrupted target gets before SIGTERM, and again before SIGKILL


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


class Shortcut:
    """Which cases of a protocol version are not run, decided from the cases before
    them in plan order (so a concurrent run decides exactly as a serial one).

    One negotiation answer ("v2 unsupported") settles a version. So does a fault
    every case would repeat: one known from a single case (``SameForEveryCase``),
    or the same target fault at the same step in two consecutive cases. The
    cases that ran keep their findings; the rest say why they were not run.
    """

    def __init__(self, keep_going: bool = False) -> None:
        self.keep_going = keep_going
        self.stopped: dict[int, tuple[str, bool]] = {}  # protocol -> (note, not testable)
        self.last: dict[int, CaseResult] = {}  # the previous case of each version

    def skip(self, case: Case, protocol: int) -> CaseResult | None:
        """The result that stands in for ``case``, or None when it is to be run."""
        if protocol not in self.stopped:
            return None
        note, not_testable = self.stopped[protocol]
        return (_not_testable(case, protocol, note) if not_testable
                else not_run(case, protocol, note))

    def after(self, cr: CaseResult) -> None:
        p, previous = cr.protocol, self.last.get(cr.protocol)
        self.last[p] = cr
        if p in self.stopped:
            return
        if cr.note.startswith(("v2 unsupported", "v1 unsupported")):
            self.stopped[p] = (cr.note, True)
        elif self.keep_going or not cr.fault:
            return
        elif cr.every_case:
            self.stopped[p] = (f"not run: {cr.fault} in {cr.case}", False)
        elif previous is not None and previous.fault == cr.fault:
            why = f"the target {cr.fault} in {previous.case} and {cr.case}"
            self.stopped[p] = (f"not run: {why}", False)


def run_agent_suite(run: AgentRun, cases: Sequence[Case], target_label: str) -> RunResult:
    result = RunResult(__version__, target_label, "agent", list(run.protocols),
                       run.options.profile.name, run.strict)

    def play(protocol: int, case: Case, signals: _Signals | None, cutoff: Cutoff) -> CaseResult:
        return run_agent_case(run, case, protocol, signals=signals, cutoff=cutoff)

    if run.model is not None:  # a request naming no case's route: whose target sent it
        run.model.resolver = _model_route_of(run.model.port)

    signum = run_plan(result, agent_plan(run, cases), play, handle_signals=run.handle_signals,
                      progress=run.progress, jobs=run.jobs, deadline=run.deadline,
                      shortcut=Shortcut(run.keep_going))
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
    not_run_count = sum(c.note == DEADLINE_NOTE for c in result.cases)
    cut_count = sum(c.note.startswith(CUT_NOTE) for c in result.cases)
    if not_run_count or cut_count:
        result.cut = (f"the run passed its --deadline of {deadline:g} s: {cut_count} case(s) "
                      f"in progress cut and graded, {not_run_count} not run")
    return signals.signum


DEADLINE_NOTE = "not run: deadline"
CUT_NOTE = "aborted: cut by --deadline"


def _stand_in(shortcut: Shortcut | None, case: Case, protocol: int,
              run_cut: Cutoff | None) -> CaseResult | None:
    """The result for a case that is not to be run (a repeated fault; with ``run_cut``, for
    a case not started yet, the deadline), or None."""
    cr = shortcut.skip(case, protocol) if shortcut is not None else None
    if cr is None and run_cut is not None and run_cut.reason() == "deadline":
        cr = not_run(case, protocol, DEADLINE_NOTE)
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


def not_run(case: Case, protocol: int, note: str) -> CaseResult:
    """A case the run did not play: every requirement of it says why (never a pass)."""
    cr = CaseResult(f"{case.id}@v{protocol}", case.description, list(case.requirements),
                    protocol, note=note)
    cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, note, case=cr.case)
                   for r in case.requirements]
    return cr


def _not_testable(case: Case, protocol: int, note: str) -> CaseResult:
    cr = CaseResult(f"{case.id}@v{protocol}", case.description, list(case.requirements),
                    protocol, note=note)
    cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, f"not testable: {note}", case=cr.case)
                   for r in case.requirements]
    return cr


def run_agent_case(run: AgentRun, case: Case, protocol: int, *,
                   signals: _Signals | None = None, cutoff: Cutoff | None = None) -> CaseResult:
    name = f"{case.id}@v{protocol}"
    transcript = Transcript({"role": "agent", "protocol": protocol,
                             "profile": run.options.profile.name,
                             "target": " ".join(run.command), "case": name})
    cr = CaseResult(name, case.description, list(case.requirements), protocol)
    command, env = list(run.command), dict(run.env)
    if run.model is not None:  # the case's own route of the model server
        from conformance.modelserver.cases import use_case_script

        url = use_case_script(run.model, case, safe_name(name), run.model_script,
                              transcript.header)
        command = [a.replace(run.model.url, url) for a in command]
        env = {k: v.replace(run.model.url, url) for k, v in env.items()}
    with tempfile.TemporaryDirectory(prefix="acp-conformance-") as cwd:
        driver = ClientDriver(command, transcript, protocol=protocol, timeout=run.timeout,
                              cwd=cwd, env=env, turn_timeout=run.turn_timeout,
                              cutoff=cutoff)
        interrupted = cut = False
        try:
            try:
                if signals is not None:
                    signals.driving = True
                for step in case.drive:
                    perform(driver, step)
            finally:
                if signals is not None:
                    signals.driving = False
        except KeyboardInterrupt:
            if signals is None or not signals.enabled:
                raise
            interrupted = True
            cr.note = (f"aborted: interrupted by {signal.Signals(signals.signum or 2).name}; "
                       "graded what was recorded")
            transcript.add(max(driver.conn, 0), "harness", "harness", event="note",
                           data={"note": "interrupted", "signal": signals.signum})
        except DriveCut as exc:  # --deadline, a signal seen by another thread, not needed
            cut = True
            cr.note = (f"{CUT_NOTE} ({run.deadline or 0:g} s)" if exc.reason == "deadline"
                       else f"aborted: interrupted by {exc.reason}") + "; graded what was recorded"
        except NotTestable as exc:
            cr.note = str(exc)
        except DriveAborted as exc:
            cr.note = f"aborted: {exc}"
            cr.fault = exc.fault
            cr.every_case = isinstance(exc, SameForEveryCase)
        except _RpcError as exc:
            cr.note = f"aborted: the agent answered a step with {exc}"
            transcript.add(max(driver.conn, 0), "harness", "harness", event="note",
                           data={"note": cr.note})
        except Exception:  # a bug of ours: keep the evidence, then let the CLI report it
            driver.stop()
            _save(run, transcript, name)
            raise
        finally:
            stderr = driver.proc.stderr_text() if driver.proc else ""
            if (interrupted or cut) and driver.proc is not None:  # end it fast
                driver.proc.close(INTERRUPT_GRACE)
            if interrupted:  # and anything started but not yet handed over
                close_all(INTERRUPT_GRACE)
            driver.stop()
        cr.stderr_tail = stderr
        info = driver.info
        transcript.header["target_info"] = {"name": info.name, "version": info.version,
                                            "protocol": info.protocol}
        if run.model is not None:  # what the model said while the agent made this traffic
            from conformance.modelserver.cases import end_case

            transcript.header["model_requests"] = end_case(run.model, safe_name(name),
                                                           shared=run.jobs <= 1)
    if cr.note and not cr.note.startswith("aborted"):
        cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, f"not testable: {cr.note}", case=name)
                       for r in case.requirements]
    else:
        findings = grade(transcript.entries, protocol=protocol, options=run.options,
                         select=list(case.checks) + list(ALWAYS), schema_dir=run.schema_dir)
        cr.findings = [f.with_case(name) for f in apply_strict(findings, run.strict)]
    cr.transcript_path = _save(run, transcript, name)
    cr.target_info = dict(transcript.header.get("target_info", {}))
    return cr


def _save(run: AgentRun, transcript: Transcript, name: str) -> str | None:
    """Write the case's transcript (atomically) when --transcripts asks for it."""
    if run.transcripts is None:
        return None
    path = Path(run.transcripts) / f"{safe_name(name)}.jsonl"
    transcript.save(path)
    return str(path)


def perform(driver: ClientDriver, step: Any) -> None:
    """Execute one declarative step (see cases/*.yaml and the case schema)."""
    if step == "start":
        driver.start()
    elif step == "restart":
        driver.stop()
        driver.start()
    elif step == "new_session":
        driver.new_session()
    elif step == "load":
        driver.load()
    elif step == "close_session":
        driver.close_session()
    elif isinstance(step, dict) and "prompt" in step:
        p = step["prompt"]
        driver.prompt(p["text"], legacy_message_id=p.get("legacy_message_id"),
                      meta_message_id=p.get("meta_message_id"), cancel=p.get("cancel", False))
    elif isinstance(step, dict) and "resume" in step:
        driver.resume(step["resume"]["replay"] if step["resume"]["replay"] != "none" else None)
    else:
        raise ValueError(f"unknown step {step!r}")  # the case schema makes this unreachable


def _target_info(result: RunResult) -> dict[str, Any]:
    for c in result.cases:
        if c.target_info.get("name"):
            return dict(c.target_info)
    return {}


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", name)[:120]
