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
* the grading itself, :func:`grade_recorded`, a function of the header and the
  entries only, which ``acp-conformance check`` calls on a saved transcript: a
  live run and its transcripts give the same findings by construction;
* saving the transcript (``--transcripts``, or a scratch folder for the HTML report).

The exceptions a drive raises to end a case early are defined here, below the
drivers that raise them (``driver.py``, ``client/pty.py``); this module imports
the grading package only inside functions, so a driver that imports it stays light.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from conformance.masking import Masker
from conformance.results import CaseResult, Finding, Outcome, Reason, RunResult, apply_strict
from conformance.transcript import Entry, Transcript

if TYPE_CHECKING:
    from conformance.checks import Options

#: The note of a case not started because the run passed its --deadline.
DEADLINE_NOTE = "not run: deadline"
#: The note of a case in progress cut by --deadline (graded on what was recorded).
CUT_NOTE = "aborted: cut by --deadline"
#: The rule that grades how a protocol version was agreed: graded even in a case the
#: target could not take, since the negotiation itself is what its traffic shows.
NEGOTIATION = ("TARGET/negotiation",)
#: What ``check`` says of a transcript that records no scope (someone else's).
DEFAULT_SCOPE_NOTE = ("no grading scope recorded in the transcript: graded every rule with "
                      "the default options")


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


@dataclass(frozen=True)
class Scope:
    """What a case grades. Recorded in its transcript header (``scope``), so ``check``
    grades a saved transcript exactly as the live run did.

    The rule: a case grades every rule of its role whose inference its traffic
    supports (``rules`` None); a case file may exclude a rule, with a reason, which
    every report shows (``exclude``). ``rules`` narrows it only for callers that
    grade one rule on purpose (the fuzzers' invariants)."""

    role: str = "agent"
    profile: str = ""  # "" : the default profile
    strict: bool = False
    strict_ids: bool = False
    cross_turn_reuse: str = "fail"
    exclude: tuple[tuple[str, str], ...] = ()  # (rule, the case file's reason)
    rules: tuple[str, ...] | None = None  # None: every rule of the role
    recorded: bool = True  # False: a transcript with no scope (graded by default, said so)

    @classmethod
    def of(cls, role: str, options: Options, strict: bool,
           exclude: Iterable[tuple[str, str]] = ()) -> Scope:
        return cls(role, options.profile.name, strict, options.strict_ids,
                   options.cross_turn_reuse.value, tuple(exclude))

    def options(self) -> Options:
        from conformance import profiles
        from conformance.checks import Options

        profile = profiles.get(self.profile or profiles.DEFAULT_PROFILE)
        return Options(profile=profile, cross_turn_reuse=Outcome(self.cross_turn_reuse),
                       strict_ids=self.strict_ids)

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "profile": self.profile, "strict": self.strict,
                "strict_ids": self.strict_ids, "cross_turn_reuse": self.cross_turn_reuse,
                "exclude": dict(self.exclude),
                "rules": list(self.rules) if self.rules is not None else "all"}

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> Scope:
        """The scope a transcript records; the default one (``recorded`` False) without."""
        role = str(header.get("role", "agent"))
        data = header.get("scope")
        if not isinstance(data, dict):
            return cls(role, str(header.get("profile") or ""), header.get("strict") is True,
                       recorded=False)
        rules = data.get("rules")
        excluded = data.get("exclude")
        exclude: dict[Any, Any] = excluded if isinstance(excluded, dict) else {}
        return cls(str(data.get("role", role)), str(data.get("profile") or ""),
                   data.get("strict") is True, data.get("strict_ids") is True,
                   "warn" if data.get("cross_turn_reuse") == "warn" else "fail",
                   tuple((str(k), str(v)) for k, v in exclude.items()),
                   tuple(str(r) for r in rules) if isinstance(rules, list) else None)


@dataclass
class Ending:
    """How a case's drive ended: recorded in the header (``ended``) and on its CaseResult.

    ``reason`` is set when the case is not graded (the target could not take it);
    ``cut`` names what cut it (``deadline``, a signal), graded on what was recorded."""

    note: str = ""
    reason: Reason | None = None
    fault: str = ""
    every_case: bool = False
    cut: str = ""
    aborted: bool = False  # the target hung, exited or flooded (graded on what was recorded)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"note": self.note}
        if self.reason is not None:
            out["reason"] = self.reason.value
        if self.cut:
            out["cut"] = self.cut
        if self.aborted:
            out["aborted"] = True
        return out

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> Ending:
        data = header.get("ended")
        if not isinstance(data, dict):
            return cls()
        try:
            reason = Reason(data["reason"]) if data.get("reason") else None
        except ValueError:
            reason = Reason.NOT_TESTABLE  # a code from a later version: still not graded
        return cls(str(data.get("note") or ""), reason, cut=str(data.get("cut") or ""),
                   aborted=data.get("aborted") is True)


class Drive(Protocol):
    """What a role supplies: play the case's steps, then stop everything it started."""

    def play(self) -> None:
        """Play every step; raise a :class:`CaseStop` to end the case early."""

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
    """Play ``drive`` and say how it ended: the ladder every role shares."""
    ending = Ending()
    interrupted = cut = False
    try:
        try:
            if signals is not None:
                signals.driving = True
            drive.play()
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
    except CaseAborted as exc:
        ending = Ending(f"aborted: {exc}", fault=exc.fault, aborted=True,
                        every_case=exc.every_case)
    except CaseNotPlayable as exc:
        ending = Ending(str(exc), exc.reason, every_case=exc.every_case)
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


INTERRUPT_GRACE = 0.5  # seconds an interrupted target gets before SIGTERM, and again SIGKILL


def grade_recorded(header: Mapping[str, Any], entries: Iterable[Entry], *,
                   protocol: int | None = None, schema_dir: Path | None = None,
                   strict: bool = False) -> list[Finding]:
    """Grade one case's transcript from what it records: its scope and how it ended.

    The one grading a case gets, live (:func:`play_case`) and offline (``check``).
    ``strict`` adds ``--strict`` to what was recorded; ``protocol`` overrides the
    header's (``check --protocol``)."""
    from conformance.checks import grade

    scope = Scope.from_header(header)
    ending = Ending.from_header(header)
    protocol = int(header.get("protocol", 1)) if protocol is None else protocol
    options = scope.options()
    strict = strict or scope.strict
    if ending.reason is not None:  # the case was not played: its rules say why
        requirements = [str(r) for r in header.get("requirements") or []]
        why = shown_note(ending.note, ending.reason)
        rows = [Finding(r, Outcome.NOT_APPLICABLE, why, reason=ending.reason)
                for r in requirements]
        # An agent's case not played grades nothing but the fault of a failed negotiation
        # (never a pass); a client's shows how it handled the version it was answered.
        dropped = ((Outcome.NOT_APPLICABLE,) if scope.role == "client"
                else (Outcome.NOT_APPLICABLE, Outcome.PASS))
        rows += [f for f in grade(entries, protocol=protocol, options=options,
                                  select=list(NEGOTIATION), role=scope.role)
                 if f.outcome not in dropped]
        return apply_strict(rows, strict)
    found = grade(entries, protocol=protocol, options=options,
                  select=list(scope.rules) if scope.rules is not None else None,
                  role=scope.role, schema_dir=schema_dir)
    found = _excluded(fold_consequences(found), scope.exclude)
    if ending.cut:  # what a cut case never reached is cut, not merely untested
        found = [dataclasses.replace(f, reason=Reason.CUT)
                 if f.reason is Reason.NOT_TESTABLE else f for f in found]
    return apply_strict(found, strict)


#: What a target does when a fault has already broken it: it exits, hangs, leaves the
#: probe unanswered. After a fault of another rule, these are its consequences.
CONSEQUENCE_RULES = ("MID-C-08/exit", "MID-C-08/probe")
CRASH_RULE = "MID-C-08/crash"  # a client that died on a stream: the fault itself


def fold_consequences(findings: list[Finding]) -> list[Finding]:
    """One fault, one finding: when a checker graded a client's crash as a fault (the
    client died on a stream that tested message IDs: MID-C-08/crash, or a fail of a rule
    about a malformed or missing ID whose evidence reaches the crash), the exit and the
    unanswered probe of that same crash (MID-C-08/exit, MID-C-08/probe) are recorded on
    that fail as its consequences, and their own rows say where they went: not further
    fails. A client that just exits has one fault, the exit, and the probe it left
    unanswered is the exit's consequence. A fail counts as the cause only when its
    evidence reaches the crash (an entry at or after the consequence's first):
    precedence alone names no cause, and a hang is never folded."""
    from conformance.controlstream import CAUSE_RULES

    causes = [f for f in findings if f.outcome is Outcome.FAIL and f.entries
              and (f.base_requirement in CAUSE_RULES or f.requirement == CRASH_RULE)]
    exits = [f for f in findings if f.requirement == "MID-C-08/exit"
             and f.outcome is Outcome.FAIL and f.entries]
    if not causes and not exits:
        return findings
    folded: dict[int, list[str]] = {}  # id(cause) -> consequences
    out: list[Finding] = []
    for f in findings:
        cause = None
        if f.requirement in CONSEQUENCE_RULES and f.outcome is Outcome.FAIL and f.entries:
            cause = next((c for c in causes if max(c.entries) >= min(f.entries)), None)
            if cause is None and f.requirement == "MID-C-08/probe" and not causes:
                cause = next((c for c in exits if max(c.entries) >= min(f.entries)), None)
        if cause is None:
            out.append(f)
            continue
        folded.setdefault(id(cause), []).append(f"{f.requirement}: {f.message}")
        out.append(Finding(f.requirement, Outcome.NOT_APPLICABLE,
                           f"not testable: a consequence of the {cause.requirement} fault, "
                           "reported with it", entries=f.entries, reason=Reason.NOT_TESTABLE))
    return [dataclasses.replace(f, consequences=f.consequences + tuple(folded[id(f)]))
            if id(f) in folded else f for f in out]


def _excluded(findings: list[Finding], exclude: Sequence[tuple[str, str]]) -> list[Finding]:
    """Each rule a case excludes becomes one not_applicable row with the case's reason."""
    if not exclude:
        return findings
    out: list[Finding] = []
    done: set[str] = set()
    for f in findings:
        why = next((w for r, w in exclude
                    if f.requirement == r or f.requirement.startswith(r + "/")), None)
        if why is None:
            out.append(f)
        elif f.requirement not in done:
            done.add(f.requirement)
            out.append(Finding(f.requirement, Outcome.NOT_APPLICABLE,
                               f"excluded by the case: {why}", reason=Reason.EXCLUDED_BY_CASE))
    return out


def play_case(case: Any, protocol: int, role: str, drive: Drive, transcript: Transcript, *,
              transcripts: Path | None, signals: Any = None, deadline: float | None = None,
              schema_dir: Path | None = None) -> CaseResult:
    """Drive one case, record how it ended, grade it, save its transcript: a CaseResult."""
    name = str(transcript.header["case"])
    cr = CaseResult(name, case.description, list(case.requirements), protocol)
    try:
        ending = drive_case(drive, transcript, signals=signals, deadline=deadline)
    except BaseException:  # a bug of ours, or an unhandled interrupt: keep the evidence
        save(transcripts, transcript, name)
        raise
    ended(cr, ending)
    transcript.header["ended"] = ending.to_json()
    cr.findings = [f.with_case(name) for f in grade_recorded(
        transcript.header, transcript.entries, schema_dir=schema_dir)]
    cr.transcript_path = save(transcripts, transcript, name)
    return cr


def ended(cr: CaseResult, ending: Ending) -> None:
    """Copy how a case ended onto its result."""
    cr.note, cr.reason, cr.fault = ending.note, ending.reason, ending.fault
    cr.every_case, cr.cut, cr.aborted = ending.every_case, ending.cut, ending.aborted
    if ending.cut and cr.reason is None:
        cr.reason = Reason.CUT


def save(directory: Path | None, transcript: Transcript, name: str) -> str | None:
    """Write a case's transcript (atomically) into ``directory``, when there is one."""
    if directory is None:
        return None
    path = Path(directory) / f"{safe_name(name)}.jsonl"
    transcript.save(path)
    return str(path)


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", name)[:120]


def stand_in(case: Any, protocol: int, note: str, reason: Reason, cut: str = "") -> CaseResult:
    """A case the run did not play: every requirement of it says why (never a pass)."""
    cr = CaseResult(f"{case.id}@v{protocol}", case.description, list(case.requirements),
                    protocol, note=note, reason=reason, cut=cut)
    why = shown_note(note, reason)
    cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, why, case=cr.case, reason=reason)
                   for r in case.requirements]
    return cr


def keep_stand_ins(directory: Path | None, results: Iterable[CaseResult],
                   plan: Iterable[tuple[int, Any]], role: str, options: Options, strict: bool,
                   target: str, masker: Masker | None = None) -> None:
    """Give each case the run did not play a transcript too (a header saying why, no
    entries), so ``check`` on a run's transcripts reports every case the run reported."""
    if directory is None:
        return
    cases = {f"{c.id}@v{p}": (p, c) for p, c in plan}
    for cr in results:
        if cr.transcript_path is not None or cr.reason is None or cr.case not in cases:
            continue
        protocol, case = cases[cr.case]
        transcript = new_transcript(role, protocol, case_scope(role, options, strict, case),
                                    target, cr.case, case.requirements, masker)
        transcript.header["ended"] = Ending(cr.note, cr.reason, cut=cr.cut).to_json()
        cr.transcript_path = save(directory, transcript, cr.case)


def conclude(result: RunResult) -> None:
    """The run's own verdict past its findings: a version in which cases were played but
    none ran to its end (each ended by a target fault or a refused request, or was not
    run after one) has tested nothing, and fails the run (``RunResult.unfinished``)."""
    by_version: dict[int, list[CaseResult]] = {}
    for c in result.cases:
        by_version.setdefault(c.protocol, []).append(c)
    result.unfinished = {}
    for p, cases in sorted(by_version.items()):
        if any(c.completed for c in cases) or result.cut:
            continue
        if any(c.aborted or c.reason is Reason.NOT_RUN for c in cases):
            first = next(c for c in cases if c.aborted or c.reason is Reason.NOT_RUN)
            result.unfinished[p] = (f"no v{p} case ran to its end (first: {first.case}: "
                                    f"{first.note})")


def shown_note(note: str, reason: Reason) -> str:
    """The message of a requirement a case did not grade: its note, said as not run or
    not testable (for people; a program reads the reason code)."""
    return note if reason is Reason.NOT_RUN else f"not testable: {note}"


__all__ = ["CUT_NOTE", "DEADLINE_NOTE", "CaseAborted", "CaseCut", "CaseNotPlayable", "CaseStop",
           "Drive", "Ending", "Scope", "case_scope", "drive_case", "grade_recorded",
           "new_transcript", "play_case", "safe_name", "save", "stand_in"]
