"""Grading a generated run, and what a fuzz run found (both fuzzers and replay).

A generated run's transcript records its scope (the role's rules, the profile and the
options that change a grade) and how it ended in its header, as a suite case's does;
:func:`graded` grades it from that header alone, through
:func:`conformance.grading.grade_recorded`, the one grading of a recorded case (with
the official schemas' findings when a folder is given). So a run the target refused
gets the grade ``check`` gives its saved transcript. This module adds only the
fuzzer's selection: which findings break the invariant.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.agent.steps import Step
from conformance.fuzz.settings import Effort
from conformance.results import Finding, Outcome, apply_strict
from conformance.transcript import Transcript


def graded(transcript: Transcript, schema_dir: Path | None = None) -> list[Finding]:
    """A played run's findings, graded from what its header records (module docstring)."""
    from conformance.grading import grade_recorded

    return grade_recorded(transcript.header, transcript.entries, schema_dir=schema_dir)


def violations(findings: Sequence[Finding], strict: bool) -> list[Finding]:
    """The findings that break the invariant: fails, and warns under ``strict``. MUST
    breaches come before SHOULD breaches, then the one that became visible first (its
    last evidence line is the earliest), then the one that needs the fewest lines to
    show, then the rule ID."""
    def order(f: Finding) -> tuple[int, int, int, str]:
        return (f.outcome is not Outcome.FAIL, max(f.entries) if f.entries else 1 << 30,
                len(f.entries), f.requirement)

    bad = [f for f in findings if f.outcome is Outcome.FAIL
           or (strict and f.outcome is Outcome.WARN)]
    return [f for f in apply_strict(sorted(bad, key=order), strict)]


@dataclass
class Failure:
    """One broken rule and the counterexample that shows it."""

    finding: Finding  # the violation the counterexample is about
    protocol: int
    steps: list[Step]
    transcript: Transcript
    findings: list[Finding] = field(default_factory=list)  # every violation of the run
    role: str = "agent"
    stream: Any = None  # client fuzzing: the generated stream (see client_fuzz)
    found_steps: int = 0  # how many steps the run had before shrinking
    shrink_attempts: int = 0
    model: dict[str, Any] | None = None  # what the model said (--model-server), a script
    # Persistent fuzzing (conformance.fuzz.persistent): the steps of the earlier runs on the
    # process it was found on; once confirmed, how many of ``steps`` are earlier runs' and
    # how many sessions they created (0: it stands alone), or that it did not fail again.
    history: list[list[Step]] = field(default_factory=list)
    history_steps: int = 0
    earlier_sessions: int = 0
    unconfirmed: bool = False

    @property
    def requirement(self) -> str:
        return self.finding.requirement

    @property
    def key(self) -> tuple[str, int]:
        return self.requirement, self.protocol

    def size(self) -> tuple[int, int]:
        return len(self.steps), len(json.dumps([self.steps, self.model]))


@dataclass
class FuzzResult:
    """What one fuzz run found (role agent or client)."""

    role: str
    target: str
    seed: int
    effort: Effort
    failures: list[Failure] = field(default_factory=list)
    examples: int = 0
    processes: int = 0
    elapsed: float = 0.0
    time_to_first_failure: float | None = None
    notes: list[str] = field(default_factory=list)
    coverage: dict[int, dict[str, Finding]] = field(default_factory=dict)
    protocols: tuple[int, ...] = ()
    replay_with: dict[str, Any] = field(default_factory=dict)  # how to reach the target again
    interrupted: int | None = None  # the signal that stopped the run (what was held is kept)
    unshrunk: set[tuple[str, int]] = field(default_factory=set)  # stopped before shrunk
    workers: int = 1
    database: str | None = None  # the example database's URL (no password)
    reused: int = 0  # runs played on an agent process an earlier run left (persistent mode)

    @property
    def failed(self) -> bool:
        return bool(self.failures)


def merge_coverage(into: dict[str, Finding], findings: Sequence[Finding]) -> None:
    """Per rule, keep the most telling row: pass beats not-applicable, info beats pass."""
    rank = {Outcome.NOT_APPLICABLE: 0, Outcome.PASS: 1, Outcome.INFO: 2, Outcome.WARN: 3,
            Outcome.FAIL: 4}
    for f in findings:
        old = into.get(f.requirement)
        if old is None or rank[f.outcome] > rank[old.outcome]:
            into[f.requirement] = f
