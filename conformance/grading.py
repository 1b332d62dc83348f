"""The one grading of a recorded case, for every role and every road to it.

A case's transcript header records what the case grades (its :class:`Scope`) and how
it ended (its :class:`Ending`); :func:`grade_recorded` grades one transcript (agent,
client) from those alone, and :func:`grade_sides` a case recorded on two sides (a proxy
case: its client side, whose header this is, and its agent side, graded together by the
two-sided checker). The live run (``lifecycle.play_case``), ``acp-conformance check``
(:func:`grade_file`), ``replay``, the pytest plugin's ``acp_session`` and both fuzzers
call them, so each road folds the consequences of a client's fault (and of
an agent's fault that other rules see again, :mod:`conformance.faultfold`) and applies
the case file's exclusions alike. A fuzzer's generated run records its scope (and how
it ended) in its header as a case does, and is graded from that header alone too.

Pure: it imports the checkers, the results and the transcript format, nothing of
processes (``tests/test_architecture.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.faultfold import fold_faults
from conformance.results import CaseResult, Finding, Outcome, Reason, RunResult, apply_strict
from conformance.transcript import Entry

if TYPE_CHECKING:
    from conformance.checks import Options

#: What ``check`` says of a transcript that records no scope (someone else's).
DEFAULT_SCOPE_NOTE = ("no grading scope recorded in the transcript: graded every rule with "
                      "the default options")


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


def grade_recorded(header: Mapping[str, Any], entries: Iterable[Entry], *,
                   protocol: int | None = None, schema_dir: Path | None = None,
                   strict: bool = False, select: Sequence[str] | None = None) -> list[Finding]:
    """Grade one case's transcript from what it records: its scope and how it ended.

    The one grading a recorded case gets, live and offline (``check``), for every road
    (a case recorded on two sides: :func:`grade_sides`). ``strict`` adds ``--strict`` to
    what was recorded; ``protocol`` overrides the header's (``check --protocol``);
    ``select`` narrows the recorded scope to some rules (a caller that asks for them on
    purpose: ``acp_session.findings``)."""
    from conformance.timers import annotate  # the clock-ended waits a finding rests on

    # a file's entries (transcript.EntryFile) stream from it: never all held at once
    entries = entries if isinstance(entries, Sequence) else list(entries)
    scope = Scope.from_header(header)
    if select:
        scope = dataclasses.replace(scope, rules=tuple(select))
    ending = Ending.from_header(header)
    version = int(header.get("protocol", 1)) if protocol is None else protocol
    found = (_played(scope, ending, entries, version, schema_dir) if ending.reason is None
             else _not_played(header, scope, ending, entries, version))
    return apply_strict(annotate(found, header, entries), strict or scope.strict)


def _not_played(header: Mapping[str, Any], scope: Scope, ending: Ending,
                entries: Sequence[Entry], protocol: int) -> list[Finding]:
    """A case the run did not play: each of its requirements not applicable, with why.
    An agent's case grades nothing else but the fault of a failed negotiation (never a
    pass); a client's shows how it handled the version it was answered."""
    from conformance.checks import grade
    from conformance.checks.target import NEGOTIATION

    assert ending.reason is not None
    why = shown_note(ending.note, ending.reason)
    rows = [Finding(str(r), Outcome.NOT_APPLICABLE, why, reason=ending.reason)
            for r in header.get("requirements") or []]
    dropped = ((Outcome.NOT_APPLICABLE,) if scope.role == "client"
               else (Outcome.NOT_APPLICABLE, Outcome.PASS))
    return rows + [f for f in grade(entries, protocol=protocol, options=scope.options(),
                                    select=[NEGOTIATION], role=scope.role)
                   if f.outcome not in dropped]


def _played(scope: Scope, ending: Ending, entries: Sequence[Entry], protocol: int,
            schema_dir: Path | None) -> list[Finding]:
    """A case played: every rule of its scope, a fault's consequences folded into it,
    the case's exclusions applied, and what a cut case never reached marked cut."""
    from conformance.checks import grade

    options = scope.options()

    def regrade(control: Sequence[Entry], rules: list[str] | None) -> list[Finding]:
        return grade(control, protocol=protocol, options=options, select=rules,
                     role=scope.role, schema_dir=schema_dir)

    found = regrade(entries, list(scope.rules) if scope.rules is not None else None)
    found = fold_faults(fold_consequences(found), entries, role=scope.role, regrade=regrade)
    found = _excluded(found, scope.exclude)
    if ending.cut:  # what a cut case never reached is cut, not merely untested
        found = [dataclasses.replace(f, reason=Reason.CUT)
                 if f.reason is Reason.NOT_TESTABLE else f for f in found]
    return found


class RecordedError(ValueError):
    """A recorded case that cannot be graded as it stands (one line; the caller names the
    file)."""


@dataclass
class FileGrade:
    """A recorded file graded (:func:`grade_file`): its findings, and for a two-sided case
    whose second transcript records a scope of its own (:func:`graded_alone`: a real agent
    behind a proxy) that transcript graded alone, as the live run graded it
    (``CaseResult.behind``): its path, its header and its findings."""

    findings: list[Finding]
    behind: tuple[Path, dict[str, Any], list[Finding]] | None = None


def grade_file(path: Path, header: Mapping[str, Any], *, protocol: int | None = None,
               strict: bool = False, schema_dir: Path | None = None) -> FileGrade:
    """One recorded case's file graded from its header, as every road grades a file
    (``check``, ``verify``): a case recorded on two sides (a proxy's) is its client side
    graded with the agent side its header names, which lies beside it (read once, for both
    gradings); any other file streams from disk. ``protocol`` overrides the recorded
    version (``check --protocol``)."""
    from conformance import transcript as tmod

    if not two_sided(header):
        return FileGrade(grade_recorded(
            header, tmod.EntryFile(path), strict=strict, schema_dir=schema_dir,
            protocol=case_protocol(header) if protocol is None else protocol))
    entries = list(tmod.iter_entries(path)[1])
    named = header.get("agent_side")
    if not named and Ending.from_header(header).reason is not None:
        # a case the run did not play: its transcript is a header saying why, one side
        return FileGrade(grade_sides(header, entries, [], protocol=protocol, strict=strict))
    other = path.with_name(str(named or "-"))
    if not named or not other.is_file():
        raise RecordedError("a proxy transcript needs its agent side beside it "
                            f"({other.name if named else 'no agent_side in its header'})")
    side, read = tmod.iter_entries(other)
    sent = list(read)
    graded = FileGrade(grade_sides(header, entries, sent, protocol=protocol, strict=strict))
    if graded_alone(side):
        graded.behind = (other, side, grade_recorded(side, sent, protocol=protocol,
                                                     strict=strict))
    return graded


def grade_sides(header: Mapping[str, Any], received: Iterable[Entry], sent: Iterable[Entry],
                *, protocol: int | None = None, schema_dir: Path | None = None,
                strict: bool = False) -> list[Finding]:
    """Grade a case recorded on two sides (a proxy's) from what it records, as
    :func:`grade_recorded` grades one: ``received`` its own transcript (whose ``header``
    this is: the client side), ``sent`` the other (what the target behind wrote, before
    the proxy), graded together by the two-sided checker
    (:func:`conformance.checks.proxy_case.grade_case`)."""
    from conformance.checks import grade
    from conformance.checks.proxy_case import grade_case
    from conformance.timers import annotate

    received = received if isinstance(received, Sequence) else list(received)
    scope, ending = Scope.from_header(header), Ending.from_header(header)
    options = scope.options()

    def one(entries: list[Entry], rules: list[str], version: int,
            schema: bool) -> list[Finding]:
        return grade(entries, protocol=version, options=options, select=rules, role="agent",
                     schema_dir=schema_dir if schema else None)

    front = int(header.get("protocol", 1)) if protocol is None else protocol
    not_played = None if ending.reason is None else (shown_note(ending.note, ending.reason),
                                                     ending.reason)
    found = grade_case(sent, received, front=front,
                       behind=int(header.get("agent_protocol") or front),
                       adapter=header.get("adapter") is True, options=options,
                       rules=scope.rules, one=one, not_played=not_played,
                       requirements=[str(r) for r in header.get("requirements") or []],
                       cut=bool(ending.cut))
    return apply_strict(annotate(found, header, received), strict or scope.strict)


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


def ended(cr: CaseResult, ending: Ending) -> None:
    """Copy how a case ended onto its result."""
    cr.note, cr.reason, cr.fault = ending.note, ending.reason, ending.fault
    cr.every_case, cr.cut, cr.aborted = ending.every_case, ending.cut, ending.aborted
    if ending.cut and cr.reason is None:
        cr.reason = Reason.CUT

def recorded_case(header: Mapping[str, Any], findings: Sequence[Finding], *, name: str,
                  description: str, protocol: int, path: str | None = None) -> CaseResult:
    """The result of a recorded case, as its header says it ended: what ``check`` reports
    for a transcript, field for field what the live run reported for it."""
    cr = CaseResult(name, description, [str(r) for r in header.get("requirements") or []],
                    protocol, transcript_path=path)
    ended(cr, Ending.from_header(header))
    cr.findings = [f.with_case(name) for f in findings]
    return cr


def shown_note(note: str, reason: Reason) -> str:
    """The message of a requirement a case did not grade: its note, said as not run or
    not testable (for people; a program reads the reason code)."""
    return note if reason is Reason.NOT_RUN else f"not testable: {note}"


def run_behind(result: RunResult, label: str, role: str,
               deadline: float | None = None) -> RunResult:
    """The run of the target behind the one ``result`` tested (a proxy's real agent): each
    played case's result for it (``CaseResult.behind``) in plan order, concluded as
    ``result`` is, and cut or interrupted when it was."""
    behind = RunResult(result.tool_version, label, role, list(result.protocols),
                       result.profile, result.strict, repeat=result.repeat,
                       cases=[c.behind for c in result.cases if c.behind is not None])
    conclude(behind, deadline)
    behind.cut, behind.interrupted = result.cut, result.interrupted
    behind.target_info = first_target_info(behind)
    return behind


def two_sided(header: Mapping[str, Any]) -> bool:
    """Whether ``header`` opens the first transcript of a case recorded on two sides (a
    proxy's client side): graded with the second it names (``agent_side``), which a reader
    of a run's transcripts grades with it, never alone as a case of its own."""
    return header.get("side") == "client"


def graded_alone(header: Mapping[str, Any]) -> bool:
    """Whether ``header`` opens the second transcript of a two-sided case that records a
    scope of its own: graded alone too, as the result of the target behind (a proxy's real
    agent: ``CaseResult.behind``), live and offline alike."""
    return header.get("side") == "agent" and isinstance(header.get("scope"), dict)


def case_protocol(header: Mapping[str, Any]) -> int:
    """The protocol version a recorded case belongs to, as the live run reported it: for a
    two-sided case the version behind (a declared v2-to-v1 adapter's case is a v2 case,
    though its first side speaks v1 in front)."""
    if header.get("agent_protocol"):
        return int(header["agent_protocol"])
    return int(header.get("protocol", 1))


def first_target_info(result: RunResult) -> dict[str, Any]:
    """What the target said it is, from the first case that recorded it."""
    return next((dict(c.target_info) for c in result.cases if c.target_info.get("name")), {})


def conclude(result: RunResult, deadline: float | None = None) -> None:
    """The run's own verdict past its findings: a run cut by ``--deadline`` (``deadline``
    its seconds, when known) has not tested everything (``RunResult.cut``); a version in
    which cases were played but none ran to its end (each ended by a target fault or a
    refused request, or was not run after one) has tested nothing, and fails the run
    (``RunResult.unfinished``). The same for a live run, ``check`` and the pytest plugin."""
    cut = sum(c.reason is Reason.CUT and c.cut == "deadline" for c in result.cases)
    not_run = sum(c.reason is Reason.NOT_RUN and c.cut == "deadline" for c in result.cases)
    if cut or not_run:
        limit = f" of {deadline:g} s" if deadline else ""
        result.cut = (f"the run passed its --deadline{limit}: {cut} case(s) in progress cut "
                      f"and graded, {not_run} not run")
    stopped = sorted({c.cut for c in result.cases if (c.cut or "").startswith("SIG")})
    if stopped and not result.interrupted:  # transcripts of a run a signal stopped (check)
        result.interrupted = stopped[0]
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
                                    f"{first.shown_note})")
