"""The outcome vocabulary, findings and the grading rules every report shares.

A *finding* is data about the target: which requirement, what outcome, what
was expected, what was seen, and the transcript entries that show it.
Findings never carry wall-clock times, so reports are deterministic.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    INFO = "info"
    NOT_APPLICABLE = "not_applicable"

    def __str__(self) -> str:
        return self.value


class Reason(str, enum.Enum):
    """Why a result is ``not_applicable``: a fixed vocabulary, documented for JSON consumers.

    A report reads the code, never the message's wording."""

    NOT_TESTABLE = "not_testable"  # the traffic cannot support the inference (e.g. the target never spoke)
    NOT_RUN = "not_run"  # the case did not run (a repeated fault, a refused request, --deadline)
    NOT_ATTRIBUTABLE = "not_attributable"  # a control stream was shown the same way: no cause named
    VERSION_UNSUPPORTED = "version_unsupported"  # the target does not speak this protocol version
    ALLOWED_BY_PROFILE = "allowed_by_profile"  # the selected profile allows it
    NO_CAPABILITY = "no_capability"  # the target does not advertise what the rule needs
    EXCLUDED_BY_CASE = "excluded_by_case"  # the case file excludes the rule, with its reason
    CUT = "cut"  # the case was cut (--deadline, a signal) before the rule could be graded

    def __str__(self) -> str:
        return self.value


# Worst first: the order a summary uses to pick "the worst finding".
SEVERITY: dict[Outcome, int] = {
    Outcome.FAIL: 4,
    Outcome.WARN: 3,
    Outcome.INFO: 2,
    Outcome.PASS: 1,
    Outcome.NOT_APPLICABLE: 0,
}


_VERBS = {"fail": "fails", "warn": "warns", "info": "gives info", "pass": "passes",
          "not_applicable": "is not graded"}


@dataclass(frozen=True)
class Repeats:
    """How a rule came out over the repetitions of its case (``--repeat N``), on the rows of
    a rule whose outcome differed between them: a race in the target, told from a steady
    fault. ``outcomes`` counts the repetitions by the rule's outcome in each (worst first);
    ``transcripts`` names one repetition's transcript for each outcome (None: not kept)."""

    runs: int
    outcomes: tuple[tuple[str, int], ...]
    transcripts: tuple[tuple[str, str | None], ...] = ()

    def count(self, outcome: Outcome | str) -> int:
        return dict(self.outcomes).get(str(outcome), 0)

    def transcript(self, outcome: Outcome | str) -> str | None:
        return dict(self.transcripts).get(str(outcome))

    @property
    def text(self) -> str:
        """"fails in 2 of 5 runs, passes in 3"."""
        (first, n), *rest = self.outcomes
        head = f"{_VERBS.get(first, first)} in {n} of {self.runs} runs"
        return ", ".join([head] + [f"{_VERBS.get(o, o)} in {k}" for o, k in rest])

    def kept(self) -> list[tuple[str, str]]:
        """("fails", PATH), ("passes", PATH): a kept transcript of each outcome."""
        return [(_VERBS.get(o, o), p) for o, p in self.transcripts if p]

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "outcomes": dict(self.outcomes),
                "transcripts": {o: p for o, p in self.transcripts}}

    @classmethod
    def from_json(cls, d: Any) -> Repeats | None:
        if not isinstance(d, dict) or not d.get("outcomes"):
            return None
        return cls(int(d.get("runs", 0)),
                   tuple((str(o), int(n)) for o, n in dict(d["outcomes"]).items()),
                   tuple((str(o), None if p is None else str(p))
                         for o, p in dict(d.get("transcripts") or {}).items()))

    def without_paths(self) -> Repeats:
        return dataclasses.replace(self, transcripts=())


@dataclass(frozen=True)
class Finding:
    """One graded observation about one requirement (or sub-rule).

    A violation is one *fault* (one ID, one pair of messages, ... in one case) however
    often the transcript shows it: ``occurrences`` counts how often, and ``entries``
    holds the first few of them. ``faults`` is more than 1 only on the row that
    counts the faults of a rule past the few reported in full.
    """

    requirement: str  # "MID-A-02/cross-turn-reuse" or "MID-V2-01"
    outcome: Outcome
    message: str
    expected: Any = None
    actual: Any = None
    entries: tuple[int, ...] = ()  # transcript sequence numbers
    case: str = ""
    occurrences: int = 1
    faults: int = 1
    reason: Reason | None = None  # set on not_applicable results only
    # what the target did because of this fault (it exited, left a probe unanswered):
    # shown with it, never graded as further faults
    consequences: tuple[str, ...] = ()
    # the evidence a report carries with it (conformance.report.evidence): the case's
    # transcript and the wire lines of ``entries``, the ones the finding points at marked
    transcript: str | None = None
    wire: tuple[str, ...] = ()
    # --repeat N: the rule's outcome differed between the case's repetitions (None: it did
    # not, or the case was played once)
    repeats: Repeats | None = None
    # the clock-ended wait the finding rests on, and the option that lengthens it
    # (conformance.timers); "" when it rests on none
    timer: str = ""

    @property
    def base_requirement(self) -> str:
        return self.requirement.split("/", 1)[0]

    @property
    def shown_message(self) -> str:
        """The message with its occurrence count, as every report shows it."""
        text = self.message
        if self.occurrences > 1:
            text = f"{text} (x {self.occurrences} occurrences)"
        if self.consequences:
            text += "; then, as a consequence: " + "; ".join(self.consequences)
        if self.repeats is not None:
            text += f" [unstable: {self.repeats.text}]"
        if self.timer:
            text += f" [timer: {self.timer}]"
        return text

    def with_case(self, case: str) -> Finding:
        return dataclasses.replace(self, case=case)

    def with_outcome(self, outcome: Outcome) -> Finding:
        return dataclasses.replace(self, outcome=outcome)

    def to_json(self) -> dict[str, Any]:
        evidence: dict[str, Any] = {"entries": list(self.entries)}
        if self.expected is not None:
            evidence["expected"] = self.expected
        if self.actual is not None:
            evidence["actual"] = self.actual
        if self.transcript:
            evidence["transcript"] = self.transcript
        if self.wire:
            evidence["lines"] = list(self.wire)
        out: dict[str, Any] = {
            "case": self.case,
            "requirement": self.requirement,
            "outcome": self.outcome.value,
            "message": self.message,
            "evidence": evidence,
        }
        if self.reason is not None:
            out["reason"] = self.reason.value
        if self.consequences:
            out["consequences"] = list(self.consequences)
        if self.occurrences > 1:
            out["occurrences"] = self.occurrences
        if self.faults > 1:
            out["faults"] = self.faults
        if self.repeats is not None:
            out["repeats"] = self.repeats.to_json()
        if self.timer:
            out["timer"] = self.timer
        return out


def worst(outcomes: Iterable[Outcome]) -> Outcome:
    best = Outcome.NOT_APPLICABLE
    for o in outcomes:
        if SEVERITY[o] > SEVERITY[best]:
            best = o
    return best


def apply_strict(findings: Iterable[Finding], strict: bool) -> list[Finding]:
    """`--strict`: a SHOULD breach (warn) becomes a fail."""
    out = []
    for f in findings:
        out.append(f.with_outcome(Outcome.FAIL) if strict and f.outcome is Outcome.WARN else f)
    return out


@dataclass
class CaseResult:
    """Everything one case produced: its findings and where its transcript went."""

    case: str
    description: str
    requirements: list[str]
    protocol: int
    findings: list[Finding] = field(default_factory=list)
    transcript_path: str | None = None
    stderr_tail: str = ""
    note: str = ""  # e.g. "v2 unsupported by target"
    target_info: dict[str, Any] = field(default_factory=dict)
    fault: str = ""  # the target fault the case ended with, and its step ("" if none)
    every_case: bool = False  # the fault is known to repeat in every later case of the version
    reason: Reason | None = None  # why the case was not graded (not run, a version, ...) or cut
    cut: str = ""  # what cut the case ("deadline", "SIGINT"), "" when nothing did
    aborted: bool = False  # a target fault ended it early (graded on what was recorded)
    # --repeat N: the transcript of each repetition played, in order (None: not kept)
    runs: list[str | None] = field(default_factory=list)
    # The target behind the one tested (the real agent behind a proxy, ``--agent``): its own
    # result of the case, graded on the second transcript the case recorded; never this
    # target's findings (the engine gathers them into ``RunResult.behind``)
    behind: CaseResult | None = None

    @property
    def completed(self) -> bool:
        """The case ran to its last step: not cut, not aborted, not left ungraded."""
        return self.reason is None and not self.aborted and not self.cut

    @property
    def outcome(self) -> Outcome:
        return worst(f.outcome for f in self.findings)

    @property
    def shown_note(self) -> str:
        """The note as reports show it. The case in which a fault stopped its version (a
        failed negotiation: the version's other cases are not run) failed, and is never
        shown as "not run" too: its steps were not played."""
        if self.outcome is Outcome.FAIL and self.reason is Reason.NOT_RUN:  # the code decides
            return "failed before its steps were played: " + self.note.removeprefix("not run: ")
        return self.note


@dataclass
class RunResult:
    tool_version: str
    target: str
    role: str  # "agent" | "client"
    protocols: list[int]
    profile: str
    strict: bool
    cases: list[CaseResult] = field(default_factory=list)
    target_info: dict[str, Any] = field(default_factory=dict)
    date: str | None = None  # calendar day of the run, for the certification statement only
    cut: str = ""  # why the run ended before its plan did (--deadline), "" when it did not
    # versions in which cases were played but none ran to its end: {version: why}
    unfinished: dict[int, str] = field(default_factory=dict)
    catalogue: str = ""  # the register's revision it was graded against ("": this version's)
    fuzz: dict[str, Any] = field(default_factory=dict)  # a fuzz run: runs, seconds, workers, ...
    repeat: int = 1  # --repeat N: how many times each case was played
    # The target behind the one tested, as its own run (the real agent behind a proxy): its
    # cases' results in this run's plan order, concluded like this one (None: none behind)
    behind: RunResult | None = None

    def unstable(self) -> list[Finding]:
        """The rows of rules whose outcome differed between a case's repetitions."""
        return [f for f in self.all_findings() if f.repeats is not None]
    # the signal that stopped the run before its plan ended ("SIGTERM"), "" when none did:
    # what was graded is kept, and the run is never a pass
    interrupted: str = ""

    def all_findings(self) -> list[Finding]:
        return [f for c in self.cases for f in c.findings]

    def counts(self) -> dict[str, int]:
        """Faults by outcome (a fault seen many times counts once)."""
        counts = {o.value: 0 for o in Outcome}
        for f in self.all_findings():
            counts[f.outcome.value] += f.faults
        return counts

    @property
    def failed(self) -> bool:
        """A fail finding, a run cut short (``cut``) or interrupted (``interrupted``), or a
        version in which no case ran to its end (``unfinished``): it did not test what it
        should."""
        return (bool(self.cut) or bool(self.unfinished) or bool(self.interrupted)
                or any(f.outcome is Outcome.FAIL for f in self.all_findings()))


def exit_status(returncode: int | None, signum: int | None = None) -> str:
    """How a process ended, in words: "exit code 3", "killed by SIGTERM", "still running".
    A negative return code (Python's way of saying "killed by signal N") counts as the signal."""
    import signal as signals

    if signum is None and returncode is not None and returncode < 0:
        signum = -returncode
    if signum:
        try:
            return f"killed by {signals.Signals(signum).name}"
        except ValueError:
            return f"killed by signal {signum}"
    return "still running" if returncode is None else f"exit code {returncode}"


