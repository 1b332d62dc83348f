"""The runner: cases x protocol versions -> processes -> transcripts -> checkers -> results.

The CLI and the pytest plugin are thin shells over this module.
"""

from __future__ import annotations

import re
import signal
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.cases import Case
from conformance.checks import Options, grade
from conformance.driver import (
    ClientDriver,
    DriveAborted,
    NotTestable,
    SameForEveryCase,
    _RpcError,
)
from conformance.results import CaseResult, Finding, Outcome, RunResult, apply_strict
from conformance.transcript import Transcript
from conformance.transport import close_all

ALWAYS = ("MID-S-06", "TARGET")  # framing and liveness are graded in every case
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
    target (so a blocked wait ends at once); otherwise it is noted and the run
    stops after the current case. Later signals are noted only: cleanup and
    the reports are bounded and must not be torn.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: int | None = None
        self.driving = False
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


def run_agent_suite(run: AgentRun, cases: Sequence[Case], target_label: str) -> RunResult:
    result = RunResult(__version__, target_label, "agent", list(run.protocols),
                       run.options.profile.name, run.strict)
    unsupported: dict[int, str] = {}

    def play(protocol: int, case: Case, signals: _Signals) -> CaseResult:
        if protocol in unsupported:  # one negotiation answer settles it for the version
            return _not_testable(case, protocol, unsupported[protocol])
        cr = run_agent_case(run, case, protocol, signals=signals)
        if cr.note.startswith(("v2 unsupported", "v1 unsupported")):
            unsupported[protocol] = cr.note
        elif cr.every_case:
            # Every case starts with the same handshake and turn: an agent that let one of
            # them time out would cost each case the whole wait. The fail is on this case;
            # the others say why they were not run.
            unsupported[protocol] = f"not run: {cr.every_case} in {cr.case}"
        return cr

    signum = run_plan(result, agent_plan(run, cases), play, handle_signals=run.handle_signals,
                      progress=run.progress)
    if result.target_info == {}:
        result.target_info = _target_info(result)
    if signum:
        raise RunInterrupted(result, signum)
    return result


def run_plan(result: RunResult, plan: Sequence[tuple[int, Case]],
             play: Callable[[int, Case, _Signals], CaseResult], *, handle_signals: bool,
             progress: Callable[[int, int, str], None] | None) -> int | None:
    """Play each (protocol, case) of ``plan`` into ``result.cases``, in order, until done or
    until SIGINT/SIGTERM (with ``handle_signals``); returns the signal that ended it."""
    with _Signals(handle_signals) as signals:
        for i, (protocol, case) in enumerate(plan):
            if signals.signum:
                break
            if progress:
                progress(i, len(plan), f"{case.id} v{protocol}")
            result.cases.append(play(protocol, case, signals))
    return signals.signum


def agent_plan(run: AgentRun, cases: Sequence[Case]) -> list[tuple[int, Case]]:
    """The (protocol, case) pairs a run executes, in report order."""
    return [(p, c) for p in run.protocols for c in cases
            if c.role == "agent" and c.applies_to(p, run.options.profile.name)]


def _not_testable(case: Case, protocol: int, note: str) -> CaseResult:
    cr = CaseResult(f"{case.id}@v{protocol}", case.description, list(case.requirements),
                    protocol, note=note)
    cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, f"not testable: {note}", case=cr.case)
                   for r in case.requirements]
    return cr


def run_agent_case(run: AgentRun, case: Case, protocol: int, *,
                   signals: _Signals | None = None) -> CaseResult:
    name = f"{case.id}@v{protocol}"
    transcript = Transcript({"role": "agent", "protocol": protocol,
                             "profile": run.options.profile.name,
                             "target": " ".join(run.command), "case": name})
    cr = CaseResult(name, case.description, list(case.requirements), protocol)
    if run.model is not None:
        from conformance.modelserver.cases import use_case_script

        use_case_script(run.model, case, name, run.model_script, transcript.header)
    with tempfile.TemporaryDirectory(prefix="acp-conformance-") as cwd:
        driver = ClientDriver(run.command, transcript, protocol=protocol, timeout=run.timeout,
                              cwd=cwd, env=run.env, turn_timeout=run.turn_timeout)
        interrupted = False
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
        except NotTestable as exc:
            cr.note = str(exc)
        except DriveAborted as exc:
            cr.note = f"aborted: {exc}"
            if isinstance(exc, SameForEveryCase):
                cr.every_case = exc.reason
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
            if interrupted:  # end it fast, and anything started but not yet handed over
                if driver.proc is not None:
                    driver.proc.close(INTERRUPT_GRACE)
                close_all(INTERRUPT_GRACE)
            driver.stop()
        cr.stderr_tail = stderr
        info = driver.info
        transcript.header["target_info"] = {"name": info.name, "version": info.version,
                                            "protocol": info.protocol}
        if run.model is not None:  # what the model said while the agent made this traffic
            transcript.header["model_requests"] = run.model.take_log()
    if cr.note and not cr.note.startswith("aborted"):
        cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, f"not testable: {cr.note}", case=name)
                       for r in case.requirements]
    else:
        findings = grade(transcript.entries, protocol=protocol, options=run.options,
                         select=list(case.checks) + list(ALWAYS))
        if run.schema_dir is not None:
            from conformance.schema import validate_transcript

            findings += validate_transcript(transcript.entries, run.schema_dir, protocol,
                                            run.options.profile)
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
