"""``--repeat N``: one case played N times, read as one result.

A rule whose outcome differs between the repetitions of its case is a race in the
target (or in the suite's reading of it): its rows say so (:class:`Repeats`: "fails
in 2 of 5 runs, passes in 3", with one transcript of each outcome). A fault seen in
any repetition is still a fault: each rule is reported from the first repetition in
which it came out worst, so the merged result is never greener than its worst run.
A rule that came out the same in every repetition is reported from the first of them,
as a single run reports it. The k-th repetition's transcripts are named ``NAME.run-K.jsonl``
(:func:`conformance.lifecycle.file_stem`); the first keeps the case's own name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from conformance.results import SEVERITY, CaseResult, Outcome, Repeats, worst

__all__ = ["merge_runs"]


def _rule_outcomes(cr: CaseResult) -> dict[str, Outcome]:
    out: dict[str, list[Outcome]] = {}
    for f in cr.findings:
        out.setdefault(f.requirement, []).append(f.outcome)
    return {r: worst(o) for r, o in out.items()}


def merge_runs(runs: Sequence[CaseResult]) -> CaseResult:
    """The one result of a case played ``len(runs)`` times (see the module's text)."""
    if len(runs) == 1:
        only = runs[0]
        only.runs = [only.transcript_path]
        if only.behind is not None:
            merge_runs([only.behind])
        return only
    per_run = [_rule_outcomes(cr) for cr in runs]
    order: dict[str, None] = {}
    for cr in runs:
        for f in cr.findings:
            order.setdefault(f.requirement)
    findings = []
    for rule in order:
        seen = [o.get(rule, Outcome.NOT_APPLICABLE) for o in per_run]
        bad = worst(seen)
        k = seen.index(bad)
        rows = [f for f in runs[k].findings if f.requirement == rule]
        if len(set(seen)) > 1:
            kinds = sorted(set(seen), key=lambda o: -SEVERITY[o])
            repeats = Repeats(len(runs), tuple((o.value, seen.count(o)) for o in kinds),
                              tuple((o.value, runs[seen.index(o)].transcript_path)
                                    for o in kinds))
            rows = [dataclasses.replace(f, repeats=repeats) for f in rows]
        findings += rows
    # the case as a whole: a run that did not end (cut, not played, aborted) says so first;
    # else the run with the worst outcome (its fault and stderr explain its rows)
    base = next((cr for cr in runs if not cr.completed), None)
    if base is None:
        base = max(runs, key=lambda cr: SEVERITY[cr.outcome])
    behind = [cr.behind for cr in runs if cr.behind is not None]
    return dataclasses.replace(base, findings=findings,
                               runs=[cr.transcript_path for cr in runs],
                               # the target behind (a proxy's agent): its repetitions, as one
                               behind=merge_runs(behind) if len(behind) == len(runs) else
                               base.behind)
