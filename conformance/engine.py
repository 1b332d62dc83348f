"""The run engine: one suite run, the same for every role and every shell.

A role (the agent suite, the client suite, the proxy suite) hands the engine a
:class:`Suite`: its plan (protocol, case pairs in report order) and how to play one
case (the role's drive, over :func:`conformance.lifecycle.play_case`). The engine
owns the rest, once for all of them:

* a selection that plans nothing is a usage error naming what would run
  (:class:`NothingToRun`), never a run that measured nothing and passed;
* the not-run shortcut (:class:`Shortcut`: a version settled by a refused version or
  a repeated fault) and the results of cases it does not play (``not_run``), each
  with its reason, and a transcript for each so ``check`` reports them too;
* the run's deadline (``--deadline``) and SIGINT/SIGTERM: the case in progress is cut
  and graded, the rest are not run (:class:`RunInterrupted` carries what was graded);
* the target's info, and the conclusion (:func:`conformance.grading.conclude`): a
  version in which no case ran to its end fails the run;
* ``--repeat N``: each case played N times in a row (its transcripts kept as
  ``NAME.jsonl``, ``NAME.run-2.jsonl``, ...) and read as one result
  (:func:`conformance.repetition.merge_runs`), so every shell reports a rule that came
  out differently between repetitions the same way.

The command line runs a whole plan (:func:`run_suite`, serially or with ``--jobs``); the
pytest plugin runs it one item at a time (:meth:`Engine.result_at`) and reports each case
as the engine decided (:meth:`Engine.unfinished`; under pytest-xdist, where a worker holds
only some cases, :meth:`Engine.as_serial`). No role or shell writes its own loop.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import __version__
from conformance.cases import Case
from conformance.grading import Ending, Scope, conclude, first_target_info, run_behind
from conformance.lifecycle import (
    DEADLINE_NOTE,
    REPETITION,
    Cutoff,
    QuietDrops,
    new_transcript,
    not_run,
    save,
)
from conformance.results import CaseResult, Outcome, Reason, RunResult
from conformance.settings import RunSettings
from conformance.usage import UsageError

__all__ = ["Engine", "NothingToRun", "RunInterrupted", "Shortcut", "Signals", "Suite", "run_suite"]


class RunInterrupted(Exception):
    """SIGINT (Ctrl-C) or SIGTERM ended the run early.

    The case in progress was stopped (its target's process group ended), graded
    on what was recorded and saved; ``result`` holds every case graded so far.
    """

    def __init__(self, result: RunResult, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.result = result
        self.signum = signum


class NothingToRun(UsageError):
    """The selection plans no case for the role and version(s): exit 2, never a PASS."""


class Signals:
    """While a run lasts, SIGINT and SIGTERM stop the case being driven, not the grading.

    The first signal raises KeyboardInterrupt only while a case drives its target in this
    thread (so a blocked wait ends at once); otherwise it is noted, cases driven by other
    threads are cut through the run's Cutoff, and the run stops after them. Later signals
    are noted only: cleanup and the reports are bounded and must not be torn. A raise
    Python drops (the handler ran in a gc callback) is not printed: the signal is noted.
    """

    def __init__(self, enabled: bool, cutoff: Cutoff) -> None:
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: int | None = None
        self.driving = False
        self.cutoff = cutoff
        self._old: dict[int, Any] = {}
        self._quiet = QuietDrops(KeyboardInterrupt)

    def __enter__(self) -> Signals:  # noqa: PYI034 - typing.Self needs Python 3.11
        if self.enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        self._quiet.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._quiet.stop()
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def handle(self, signum: int, frame: Any) -> None:
        """The handler (a shell that owns the signal handlers calls it: the pytest plugin)."""
        self._handle(signum, frame)

    def _handle(self, signum: int, frame: Any) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        self.cutoff.cut(signal.Signals(signum).name)
        if first and self.driving:
            raise KeyboardInterrupt


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
        """The not-run result of ``case``, or None when it is to be run."""
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


def played(cr: CaseResult | None) -> bool:
    """Whether ``cr`` was played (not a not-run result of the shortcut)."""
    return cr is not None and not (cr.reason is Reason.NOT_RUN and not cr.every_case
                                   and not any(f.outcome is Outcome.FAIL for f in cr.findings))


#: How a role plays one case: (protocol, case, the run's signals or None, the case's cutoff).
Play = Callable[[int, Case, "Signals | None", Cutoff], CaseResult]


@dataclass
class Suite:
    """What a role hands the engine: the rest is the engine's."""

    role: str  # the role its RunResult names (agent, client, proxy)
    label: str  # the target, as the reports name it
    plan: list[tuple[int, Case]]
    play: Play
    scope: Callable[[Case], Scope]  # what a case grades (for a not-run case's transcript)
    target: str = ""  # the target its transcripts name ("" : the label)
    requirements: Callable[[Case], Sequence[str]] = lambda case: case.requirements
    target_info: Callable[[RunResult], dict[str, Any]] = first_target_info
    # The hint of an empty selection: the case IDs selected, and those of the role and
    # version(s) that would run.
    selected: Sequence[str] = ()
    runnable: Sequence[str] = ()
    header: dict[str, Any] = field(default_factory=dict)  # more for a not-run transcript
    # The target behind (a proxy's real agent) whose result each case carries apart
    # (``CaseResult.behind``), as its reports name it: gathered into ``RunResult.behind``
    behind: str = ""
    behind_role: str = "agent"


#: What the engine reads of a role's run (AgentRun, ClientRun, ProxyRun): the shared record.
Settings = RunSettings


def check_plan(suite: Suite, protocols: Sequence[int]) -> None:
    """Raise :class:`NothingToRun` when the suite plans nothing: one line naming the
    nearest selectors that would run."""
    if suite.plan:
        return
    from conformance.selectors import nearest

    versions = "/".join(f"v{p}" for p in protocols)
    chosen = ", ".join(list(suite.selected)[:4]) or "the cases given"
    hint = nearest(suite.selected, suite.runnable)
    raise NothingToRun(f"nothing to run: no {suite.role} case for {versions} among {chosen}"
                       + (f"; these would run: {', '.join(f'--case {h}' for h in hint)}"
                          if hint else f"; no {suite.role} case applies to {versions}"))


class Engine:
    """One run of a suite: what was played, what was not and why, and its conclusion."""

    def __init__(self, suite: Suite, run: Settings, result: RunResult | None = None) -> None:
        check_plan(suite, run.protocols)
        self.suite, self.run = suite, run
        self.result = result if result is not None else RunResult(
            __version__, suite.label, suite.role, list(run.protocols),
            run.options.profile.name, run.strict)
        self.shortcut = Shortcut(run.keep_going)
        self.run_cut = Cutoff(time.monotonic() + run.deadline if run.deadline else None)
        self.done: dict[int, CaseResult] = {}  # plan index -> result (one item at a time)
        self.wanted: set[int] | None = None  # the plan indices a shell will ask for (None: all)
        self.carriers: dict[int, str] = {}  # version -> the items carrying what settled it
        self.repeat = max(1, run.repeat)
        self.result.repeat = self.repeat
        self.signals: Signals | None = None  # one item at a time: see take_signals

    def take_signals(self) -> Signals:
        """One item at a time: the run's signals, whose handler the shell installs (it
        calls ``handle``); a signal while a case drives its target cuts and grades it."""
        self.signals = Signals(True, self.run_cut)
        return self.signals

    # -- one case ------------------------------------------------------------------

    def not_run(self, case: Case, protocol: int, started: bool) -> CaseResult | None:
        """The result for a case that is not to be run (a settled version; for a case not
        ``started`` yet, the deadline), or None."""
        cr = self.shortcut.skip(case, protocol)
        if cr is None and not started and self.run_cut.reason() == "deadline":
            cr = not_run(case, protocol, DEADLINE_NOTE, cut="deadline")
        if cr is None and not started and self.signals is not None and self.signals.signum:
            name = signal.Signals(self.signals.signum).name  # one item at a time, interrupted
            cr = not_run(case, protocol, f"not run: the run was interrupted by {name}", cut=name)
        return cr

    def record(self, cr: CaseResult) -> None:
        self.shortcut.after(cr)
        self.result.cases.append(cr)

    def _one(self, i: int, signals: Signals | None) -> CaseResult:
        protocol, case = self.suite.plan[i]
        cr = self.not_run(case, protocol, False)
        if cr is None:
            if self.run.progress:
                self.run.progress(i, len(self.suite.plan), f"{case.id} v{protocol}")
            cr = self.play(protocol, case, signals, Cutoff(parent=self.run_cut))
        return cr

    def play(self, protocol: int, case: Case, signals: Signals | None,
             cutoff: Cutoff) -> CaseResult:
        """Play one case ``repeat`` times (once without ``--repeat``), as one result. A
        repetition that did not run to its end (cut, not playable) ends the repeating: what
        it recorded is reported, and a later one would only repeat it."""
        from conformance.repetition import merge_runs

        runs: list[CaseResult] = []
        for k in range(1, self.repeat + 1):
            token = REPETITION.set(k)  # its transcripts: NAME.jsonl, NAME.run-2.jsonl, ...
            try:
                cr = self.suite.play(protocol, case, signals, cutoff)
            finally:
                REPETITION.reset(token)
            runs.append(cr)
            if cr.cut or cr.reason is not None or cutoff.reason() or (
                    signals is not None and signals.signum):
                break
        return merge_runs(runs)

    # -- a whole plan (the command line) ---------------------------------------------

    def play_all(self) -> int | None:
        """Play the plan into the result, in plan order, until done or until SIGINT/SIGTERM
        (with ``handle_signals``); returns the signal that ended it. ``jobs`` cases run at
        a time; what lands in the result is what a serial run gives."""
        plan, run = self.suite.plan, self.run
        with Signals(run.handle_signals, self.run_cut) as signals:
            if run.jobs <= 1 or len(plan) <= 1:
                for i in range(len(plan)):
                    if signals.signum:
                        break
                    self.record(self._one(i, signals))
            else:
                from conformance.parallel import play_concurrently

                play_concurrently(self.result, plan, self.play, jobs=run.jobs, signals=signals,
                                  run_cut=self.run_cut, progress=run.progress,
                                  not_run=self.not_run, record=self.record)
        return signals.signum

    # -- one item at a time (the pytest plugin) ----------------------------------------

    def result_at(self, i: int) -> CaseResult:
        """The result of the plan's ``i``-th case, played now unless already known. A case
        that did not run to its end, in a version where none has yet, plays the version's
        next cases ahead until one does (or none is left), so :meth:`unfinished` is the
        run's own conclusion about the version, whatever the order items come in."""
        if i not in self.done:
            self.done[i] = cr = self._one(i, self.signals)
            self.shortcut.after(cr)
        cr = self.done[i]
        protocol = cr.protocol
        for j, (p, _) in enumerate(self.suite.plan):
            if self.signals is not None and self.signals.signum:
                break  # interrupted: nothing more is played
            if (p != protocol or j in self.done or self._finished(protocol)
                    or (self.wanted is not None and j not in self.wanted)):
                continue
            self.done[j] = ahead = self._one(j, self.signals)
            self.shortcut.after(ahead)
        return cr

    def _finished(self, protocol: int) -> bool:
        return any(c.completed for c in self.done.values() if c.protocol == protocol)

    def unfinished(self, protocol: int) -> str:
        """Why the run fails for ``protocol`` (no case of it ran to its end), or ""."""
        cases = [self.done[j] for j in sorted(self.done) if self.done[j].protocol == protocol]
        probe = RunResult(__version__, "", self.suite.role, [protocol], "", False, cases=cases)
        conclude(probe)
        return probe.unfinished.get(protocol, "")

    def as_serial(self, order: int, control: Callable[[int], CaseResult]) -> CaseResult:
        """The result of the plan's ``order``-th case as a serial run of the same items gives it
        (``conformance.pytest_plugin.workers``: under pytest-xdist a worker holds only some
        of the cases); ``control(j)`` plays the plan's ``j``-th case apart, for its result.
        A case that ended with a fault is decided from the version's cases before it in plan
        order, as a serial run decides it; ``carriers[protocol]`` then names the items that
        carry the fault which settled the version."""
        cr: CaseResult = self.done[order]
        p = cr.protocol
        if not played(cr) or not (cr.every_case or cr.fault):
            return cr
        wanted = self.wanted
        serial, reached = Shortcut(self.shortcut.keep_going), False
        faulted: list[str] = []
        for j, (q, _) in enumerate(self.suite.plan):
            if q != p or (wanted is not None and j not in wanted):
                continue
            if p in serial.stopped:
                break
            mine = self.done.get(j)
            if j < order:
                ran = mine if mine is not None and played(mine) else control(j)
                if ran.fault or ran.every_case or ran.aborted:
                    cid, _, version = ran.case.partition("@v")
                    faulted.append(f"{cid}[v{version}]")
            elif j == order:
                ran, reached = cr, True
            elif mine is not None and played(mine):  # played ahead here, in plan order
                ran = mine
            else:
                break
            serial.after(ran)
        self._adopt(p, serial, order)
        if reached:  # the serial run plays it too: it is its own
            return cr
        note, reason = serial.stopped[p]
        if cr.transcript_path:  # a serial run never played it: no transcript of play
            Path(cr.transcript_path).unlink(missing_ok=True)
        self.done[order] = result = not_run(self.suite.plan[order][1], p, note, reason)
        self.carriers[p] = " and ".join(faulted)
        return result

    def _adopt(self, p: int, serial: Shortcut, order: int) -> None:
        """The worker's shortcut for version ``p`` becomes the serial one; not-run results it
        decided ahead from its own order are dropped, to be decided again when asked."""
        if p in serial.last:
            self.shortcut.last[p] = serial.last[p]
        if p in serial.stopped:
            self.shortcut.stopped[p] = serial.stopped[p]
        else:
            self.shortcut.stopped.pop(p, None)
        for j, done in list(self.done.items()):
            if done.protocol == p and j != order and not played(done):
                del self.done[j]

    # -- the end ----------------------------------------------------------------------

    def finish(self) -> RunResult:
        """Transcripts for the cases not run, the conclusion, the target's info."""
        result, suite, run = self.result, self.suite, self.run
        if self.done:  # one item at a time: in plan order, as a whole run records them
            result.cases = [self.done[j] for j in sorted(self.done)]
        keep_not_run(self, run.transcripts)
        conclude(result, run.deadline)
        if result.target_info == {}:
            result.target_info = suite.target_info(result)
        if suite.behind:
            result.behind = run_behind(result, suite.behind, suite.behind_role, run.deadline)
        return result


def keep_not_run(engine: Engine, directory: Path | None) -> None:
    """Give each case the run did not play a transcript too (a header saying why, no
    entries), so ``check`` on a run's transcripts reports every case the run reported."""
    if directory is None:
        return
    suite, run = engine.suite, engine.run
    cases = {f"{c.id}@v{p}": (p, c) for p, c in suite.plan}
    for cr in engine.result.cases:
        if cr.transcript_path is not None or cr.reason is None or cr.case not in cases:
            continue
        protocol, case = cases[cr.case]
        transcript = new_transcript(suite.role, protocol, suite.scope(case),
                                    suite.target or suite.label, cr.case,
                                    list(suite.requirements(case)), run.masker)
        transcript.header.update(suite.header)
        transcript.header["ended"] = Ending(cr.note, cr.reason, cut=cr.cut).to_json()
        cr.transcript_path = save(directory, transcript, cr.case)


def run_suite(suite: Suite, run: Settings, result: RunResult | None = None,
              started: Callable[[], None] | None = None) -> RunResult:
    """Run a whole suite: every case of its plan played or said why not, concluded.
    ``started`` is called once the plan is known to run something (a shell's "writing the
    reports under ..."). Raises :class:`RunInterrupted` (with what was graded) after a signal."""
    engine = Engine(suite, run, result)
    if started is not None:
        started()
    signum = engine.play_all()
    if signum:
        mark_interrupted(engine, signum)
    engine.finish()
    if signum:
        raise RunInterrupted(engine.result, signum)
    return engine.result


def mark_interrupted(engine: Engine, signum: int) -> None:
    """A signal stopped the run: it says so (``RunResult.interrupted``, never a pass), keeps
    what was graded and lists every case of the plan it did not play as not run, so each
    report names what went untested (a version not reached too)."""
    name = signal.Signals(signum).name
    result = engine.result
    result.interrupted = name
    played = {c.case: c for c in result.cases}
    note = f"not run: the run was interrupted by {name}"
    result.cases = [played.get(f"{case.id}@v{protocol}")
                    or not_run(case, protocol, note, cut=name)
                    for protocol, case in engine.suite.plan]
