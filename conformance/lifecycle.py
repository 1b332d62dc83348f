"""One case's lifecycle, the same for every role: play it, end it, grade it, keep it.

A role (the agent suite, the client suite, and any role to come) supplies a
:class:`Drive`: what plays the case's steps against its target and stops it.
:func:`play_case` does the rest, once for every role:

* the transcript, whose header records the case's *scope* (what it grades: the
  role's rules, the case's exclusions, the profile and every option that changes
  a grade) and how the case *ended* (a note and a reason code);
* the ladder of ways a drive ends early: a signal, a cut (``--deadline``), a
  target fault (the case is still graded on what was recorded), a case the target
  cannot take (not graded: every requirement of the case says why, with a code);
* the grading itself, :func:`conformance.grading.grade_recorded` (pure; a case recorded
  on two sides: its :class:`Side`'s ``grade``), a function
  of the header and the entries only, which ``acp-conformance check`` calls on a
  saved transcript: a live run and its transcripts give the same findings by
  construction;
* saving the transcript (``--transcripts``, or a scratch folder for the HTML report).

The exceptions a drive raises to end a case early are defined here, below the
drivers that raise them (``driver.py``, ``client/pty.py``); this module imports
the grading package only inside functions, so a driver that imports it stays light.
"""

from __future__ import annotations

import contextvars
import dataclasses
import re
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from conformance.grading import (
    Ending,
    Scope,
    ended,
    grade_recorded,
    shown_note,
)
from conformance.masking import Masker
from conformance.results import CaseResult, Finding, Outcome, Reason
from conformance.timers import late_notes
from conformance.transcript import Entry, Transcript

if TYPE_CHECKING:
    from conformance.checks import Options

#: The note of a case not started because the run passed its --deadline.
DEADLINE_NOTE = "not run: deadline"
#: The note of a case in progress cut by --deadline (graded on what was recorded).
CUT_NOTE = "aborted: cut by --deadline"



class Cutoff:
    """When a case must stop, whatever the target does: a clock time (``--deadline``),
    or a reason set from another thread. A case's Cutoff may have the run's as parent."""

    def __init__(self, at: float | None = None, parent: Cutoff | None = None) -> None:
        self.at = at  # time.monotonic() value; None: no deadline
        self.parent = parent
        self._reason = ""

    def cut(self, reason: str) -> None:
        self._reason = self._reason or reason

    def reason(self) -> str:
        """Why the case must stop now ("" while it may go on)."""
        if self._reason:
            return self._reason
        if self.at is not None and time.monotonic() >= self.at:
            return "deadline"
        return self.parent.reason() if self.parent is not None else ""

@contextmanager
def swallowed_quietly(*types: type[BaseException]) -> Iterator[None]:
    """While the block runs, a raise of ``types`` that Python had to drop is not printed.
    A run's signal handler raises to stop it; where the handler runs inside a garbage-
    collector callback (Hypothesis installs one), Python drops the raise and prints
    "Exception ignored in" with a traceback. The handler has noted the signal by then and
    the run stops on that note, so the traceback would be noise on a clean stop. Any other
    exception Python drops is printed as before."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, types):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


class QuietDrops:
    """:func:`swallowed_quietly` for a span between two calls rather than a block (a run, a
    pytest session from its start to its end). ``stop`` without ``start`` (a session that
    never started), or twice, does nothing."""

    def __init__(self, *types: type[BaseException]) -> None:
        self.types = types
        self._block: Any = None

    def start(self) -> None:
        if self._block is None:
            self._block = swallowed_quietly(*self.types)
            self._block.__enter__()

    def stop(self) -> None:
        block, self._block = self._block, None
        if block is not None:
            block.__exit__(None, None, None)


class CaseStop(Exception):
    """A drive ended before its last step (raised by a role's drive, caught by play_case)."""


class CaseAborted(CaseStop):
    """The target hung, exited or flooded: the case stops and what was recorded is graded.

    ``fault`` names the target fault and the step it happened at ("went silent at
    the session/prompt response"), or is empty when it says nothing about later
    cases; the runner stops a version after the same fault in consecutive cases.
    """

    #: True on a fault every later case of the version would repeat, known from this one
    #: (the driver's ``SameForEveryCase``): the runner need not wait for a second case.
    every_case = False

    def __init__(self, message: str, fault: str = "") -> None:
        super().__init__(message)
        self.fault = fault


class CaseCut(CaseAborted):
    """The case was cut from outside (``--deadline``, a signal, a run that no longer needs
    it); ``reason`` says which. Not the target's fault: graded on what was recorded."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"cut: {reason}")
        self.reason = reason


class CaseNotPlayable(CaseStop):
    """The target cannot take this case (a version it does not speak, a capability it
    lacks, a request it refused): its rules are not graded, each says why, with ``reason``."""

    #: True when every later case of the version would meet the same (a version the agent
    #: did not negotiate as it speaks): the runner does not run them.
    every_case = False

    def __init__(self, message: str, reason: Reason = Reason.NOT_TESTABLE) -> None:
        super().__init__(message)
        self.reason = reason


class Drive(Protocol):
    """What a role supplies: drive the case's steps, then stop everything it started."""

    def drive(self) -> None:
        """Drive every step (no grading: that is play_case's); raise a :class:`CaseStop` to end the case early."""

    def stop(self, hurry: bool) -> None:
        """End the target (at once when ``hurry``: a signal or a cut) and what it started."""

    def conn(self) -> int:
        """The connection a harness note about the end belongs to."""

    def ended(self, ending: Ending) -> Ending:
        """The role's last word on how the case ended (e.g. a version the client refused)."""


def new_transcript(role: str, protocol: int, scope: Scope, target: str, name: str,
                   requirements: Sequence[str], masker: Masker | None = None) -> Transcript:
    """A case's transcript; with ``masker`` it masks secrets as it records (masking.py)."""
    return Transcript({"role": role, "protocol": protocol, "profile": scope.profile,
                       "target": target, "case": name, "requirements": list(requirements),
                       "scope": scope.to_json()}, masker=masker)


def case_scope(role: str, options: Options, strict: bool, case: Any) -> Scope:
    """A case's scope: every rule of the role (a fault its traffic shows is reported
    wherever it shows), less what its case file excludes, with the reason it gives."""
    return Scope.of(role, options, strict, getattr(case, "exclude", ()))


def drive_case(drive: Drive, transcript: Transcript, *, signals: Any = None,
               deadline: float | None = None) -> Ending:
    """Drive the case (``drive.drive``) and say how it ended: the ladder every role shares."""
    ending = Ending()
    interrupted = cut = False
    try:
        try:
            if signals is not None:
                signals.driving = True
            drive.drive()
        finally:
            if signals is not None:
                signals.driving = False
    except KeyboardInterrupt:
        if signals is None or not signals.enabled:
            drive.stop(True)
            raise
        interrupted = True
        name = signal.Signals(signals.signum or 2).name
        ending = Ending(f"aborted: interrupted by {name}; graded what was recorded", cut=name)
        transcript.add(max(drive.conn(), 0), "harness", "harness", event="note",
                       data={"note": "interrupted", "signal": signals.signum})
    except CaseCut as exc:  # --deadline, a signal seen by another thread, not needed
        cut = True
        ending = Ending((f"{CUT_NOTE} ({deadline or 0:g} s)" if exc.reason == "deadline"
                         else f"aborted: interrupted by {exc.reason}")
                        + "; graded what was recorded",
                        cut=exc.reason)
    except (CaseAborted, CaseNotPlayable) as exc:
        ending = stopped(exc)
    except BaseException:  # a bug of ours: stop the target, then let the CLI report it
        drive.stop(False)
        raise
    drive.stop(interrupted or cut)
    if interrupted:  # and anything started but not yet handed over
        from conformance.transport import close_all

        close_all(INTERRUPT_GRACE)
    ending = drive.ended(ending)
    if ending.reason is not None and ending.note:
        transcript.add(max(drive.conn(), 0), "harness", "harness", event="note",
                       data={"note": ending.note, "reason": ending.reason.value})
    return ending


def stopped(exc: CaseAborted | CaseNotPlayable) -> Ending:
    """How a drive a target fault or a case it cannot take ended (not a cut): what
    :func:`drive_case` records, and what the fuzzers record of a generated run."""
    if isinstance(exc, CaseAborted):
        return Ending(f"aborted: {exc}", fault=exc.fault, aborted=True,
                      every_case=exc.every_case)
    return Ending(str(exc), exc.reason, every_case=exc.every_case)


INTERRUPT_GRACE = 0.5  # seconds an interrupted target gets before SIGTERM, and again SIGKILL


class GradeSides(Protocol):
    """How a case recorded on two sides is graded: the header and entries of the case's
    own transcript, then the second's (:func:`conformance.grading.grade_sides`)."""

    def __call__(self, header: Mapping[str, Any], received: Iterable[Entry],
                 sent: Iterable[Entry], *, schema_dir: Path | None = None) -> list[Finding]:
        ...


@dataclasses.dataclass
class Side:
    """A second transcript a case records (a proxy's agent side: what the agent behind it
    wrote, before the proxy): graded with the case's own by ``grade``, which the role
    supplies (a one-sided case never reaches the two-sided checker), and saved beside it
    as ``NAME + suffix``.
    With ``alone`` its header records a scope of its own, and it is graded alone as well:
    the result of the target behind (``CaseResult.behind``), never the case's target's."""

    transcript: Transcript
    suffix: str
    grade: GradeSides  # how the role grades its two sides (a proxy: grading.grade_sides)
    alone: bool = False


def play_case(case: Any, protocol: int, role: str, drive: Drive, transcript: Transcript, *,
              transcripts: Path | None, signals: Any = None, deadline: float | None = None,
              schema_dir: Path | None = None,
              side: Callable[[], Side] | None = None) -> CaseResult:
    """Drive one case, record how it ended, grade it, save its transcript: a CaseResult.

    ``side`` gives the case's second transcript once the drive is over (:class:`Side`):
    graded with the first, and alone as the result of the target behind when it says so."""
    name = str(transcript.header["case"])
    cr = CaseResult(name, case.description, list(case.requirements), protocol)
    try:
        ending = drive_case(drive, transcript, signals=signals, deadline=deadline)
    except BaseException:  # a bug of ours, or an unhandled interrupt: keep the evidence
        save(transcripts, transcript, name)
        if side is not None:
            kept = side()
            save(transcripts, kept.transcript, name + kept.suffix)
        raise
    late = late_notes(transcript.header, transcript.entries)  # output past a clock: said
    if late and ending.reason is None:
        ending = dataclasses.replace(ending, note="; ".join([*filter(None, [ending.note]),
                                                              *late]))
    ended(cr, ending)
    transcript.header["ended"] = ending.to_json()
    second = side() if side is not None else None
    found = (grade_recorded(transcript.header, transcript.entries, schema_dir=schema_dir)
             if second is None else second.grade(transcript.header, transcript.entries,
                                                 second.transcript.entries,
                                                 schema_dir=schema_dir))
    cr.findings = [f.with_case(name) for f in found]
    cr.transcript_path = save(transcripts, transcript, name)
    if second is not None:
        if second.alone:
            cr.behind = behind = CaseResult(name, case.description, list(case.requirements),
                                            protocol)
            ended(behind, ending)
            second.transcript.header["ended"] = ending.to_json()
            behind.findings = [f.with_case(name) for f in grade_recorded(
                second.transcript.header, second.transcript.entries, schema_dir=schema_dir)]
        path = save(transcripts, second.transcript, name + second.suffix)
        if cr.behind is not None:
            cr.behind.transcript_path = path
    return cr


def save(directory: Path | None, transcript: Transcript, name: str) -> str | None:
    """Write a case's transcript (atomically) into ``directory``, when there is one."""
    if directory is None:
        return None
    path = Path(directory) / f"{file_stem(name)}.jsonl"
    transcript.save(path)
    return str(path)


#: ``--repeat``: which repetition of its case this thread plays (1: the first, or the only)
REPETITION: contextvars.ContextVar[int] = contextvars.ContextVar("repetition", default=1)


def file_stem(name: str) -> str:
    """The file name, less ``.jsonl``, of a transcript named ``name``: the k-th repetition of
    a case (``--repeat``, see :data:`REPETITION`) adds ``.run-K``; the first keeps the
    case's own name, as a run of one does."""
    k = REPETITION.get()
    return safe_name(name) + (f".run-{k}" if k > 1 else "")


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", name)[:120]


def not_run(case: Any, protocol: int, note: str, reason: Reason = Reason.NOT_RUN,
            cut: str = "") -> CaseResult:
    """A case the run did not play: every requirement of it says why (never a pass)."""
    cr = CaseResult(f"{case.id}@v{protocol}", case.description, list(case.requirements),
                    protocol, note=note, reason=reason, cut=cut)
    why = shown_note(note, reason)
    cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, why, case=cr.case, reason=reason)
                   for r in case.requirements]
    return cr


__all__ = ["CUT_NOTE", "DEADLINE_NOTE", "REPETITION", "CaseAborted", "CaseCut", "CaseNotPlayable",
           "CaseStop", "Drive", "case_scope", "drive_case", "file_stem", "new_transcript", "not_run",
           "QuietDrops", "Side", "play_case", "safe_name", "save", "stopped", "swallowed_quietly"]
