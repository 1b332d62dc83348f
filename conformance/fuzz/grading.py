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

import io
import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.agent.steps import Step
from conformance.fuzz.settings import Effort
from conformance.results import Finding, Outcome, apply_strict
from conformance.transcript import Entry, Transcript


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


class Streamed:
    """The checkers' verdict on a growing transcript, fed only the entries added since the
    last look: whether grading the whole transcript so far *could* break the invariant.

    A generated run is graded after every step, so a run that breaks a rule ends at that
    step, and grading the whole transcript again each time costs a run more the longer it
    gets. The checkers are streaming functions of a transcript, so this keeps them (the
    timeline, the checkers, their sink) between looks and feeds them the new entries;
    what a checker reports only at the end (``finish``) is asked of a copy of it, so the
    kept state goes on as if the transcript had not ended. It answers one question:
    does the transcript so far have a fail (or a warn, under ``strict``) before the
    grading's folds (a consequence folded into its cause, a rule a case excludes), which
    only take fails away, and ``--strict``, which makes warns fails? No means
    :func:`graded` would find no violation; yes means the caller grades the whole
    transcript (:func:`graded`), once, for the findings it reports. The short path for
    repeated chunks is off here (the same findings; ``conformance.checks.base.grade``).
    ``tests/test_fuzz_streamed.py`` compares both on many generated runs."""

    def __init__(self, transcript: Transcript) -> None:
        from conformance.checks.base import REGISTRY, Checker, Sink, _handler_names, all_rules
        from conformance.checks.timeline import Timeline
        from conformance.grading import Scope

        header = transcript.header
        self.transcript = transcript
        scope = Scope.from_header(header)
        options = self.options = scope.options()
        self.strict = scope.strict
        rules = all_rules()
        chosen = {r.id for r in rules.values() if r.role == scope.role
                  and (scope.rules is None or _selected(r.id, scope.rules))}
        self.chosen = chosen
        self.sink = Sink(rules, protocol=int(header.get("protocol", 1)), options=options)
        checkers = [cls(options, self.sink) for cls in REGISTRY
                    if any(r.id in chosen for r in cls.rules)]
        self.handlers: dict[type, list[Any]] = {}
        for ch in checkers:
            for name, etype in _handler_names(type(ch)):
                self.handlers.setdefault(etype, []).append(getattr(ch, name))
        self.finishing = [ch for ch in checkers if type(ch).finish is not Checker.finish]
        profile = options.profile
        self.timeline = Timeline(self.sink.protocol, repeats=False,
                                 session_messages=profile.session_messages,
                                 replay_marker=profile.replay_marker,
                                 idempotency_keys=profile.idempotency_keys)
        self.sink.negotiated = self.timeline.negotiated
        # shared with the copies, never copied: what the checkers only read
        self._shared: dict[int, Any] = {id(options): options, id(profile): profile,
                                        id(rules): rules}
        self.fed = 0

    def may_violate(self, strict: bool) -> bool:
        """Feed what was added since the last look; whether the transcript so far has a
        fail, or a warn when ``strict`` (the run's or its scope's), before the folds."""
        import gc

        from conformance.checks.base import Sink

        entries = self.transcript.entries
        end = len(entries)
        feed, get = self.timeline.feed_new, self.handlers.get
        collecting = gc.isenabled()
        gc.disable()  # as grade(): the checkers' state has no cycles to collect
        try:
            for i in range(self.fed, end):
                for ev in feed(entries[i]):
                    for h in get(type(ev), ()):
                        h(ev)
        finally:
            if collecting:
                gc.enable()
        self.fed = end
        strict = strict or self.strict
        if self._bad(self.sink, strict):
            return True
        if not self.finishing:
            return False
        # The copies report into a sink of their own: no checker reads its sink, a fail
        # kept in this one was looked for above, and a fail ``finish`` reports is a fail
        # in an empty sink too.
        sink = Sink(self.sink.rules, protocol=self.sink.protocol, options=self.options)
        sink.negotiated = self.sink.negotiated
        try:
            finishing = _copy(self.finishing, {**self._shared, id(self.sink): sink,
                                               id(self.sink.seen): sink.seen})
        except (pickle.PicklingError, TypeError, AttributeError):
            return True  # a checker's state that cannot be copied: grade the whole run
        for ch in finishing:
            ch.finish()
        return self._bad(sink, strict)

    def _bad(self, sink: Any, strict: bool) -> bool:
        bad = (Outcome.FAIL, Outcome.WARN) if strict else (Outcome.FAIL,)
        chosen = self.chosen
        for rule, faults in sink.faults.items():
            if rule in chosen:
                for fault in faults.values():
                    if fault.outcome in bad:
                        return True
        return False


def _selected(rule_id: str, select: Sequence[str]) -> bool:
    from conformance.checks.base import _selected as selected

    return selected(rule_id, select)


def _copy(state: Any, shared: dict[int, Any]) -> Any:
    """A deep copy of the checkers' ``state`` for ``finish``, through pickle (faster than
    ``copy.deepcopy``). The transcript's entries (recorded lines the checkers only read)
    are the same objects in the copy, and an object whose ``id`` is a key of ``shared``
    is that key's value there."""
    buf = io.BytesIO()
    out = _Out(buf, pickle.HIGHEST_PROTOCOL)
    out.kept = dict(shared)
    out.dump(state)
    buf.seek(0)
    back = _In(buf)
    back.kept = out.kept
    return back.load()


class _Out(pickle.Pickler):
    kept: dict[int, Any]

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is Entry:
            self.kept[id(obj)] = obj
            return id(obj)
        return id(obj) if id(obj) in self.kept else None


class _In(pickle.Unpickler):
    kept: dict[int, Any]

    def persistent_load(self, pid: Any) -> Any:
        return self.kept[pid]
