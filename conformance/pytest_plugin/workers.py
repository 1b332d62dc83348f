"""Under pytest-xdist (``-n N``) each worker has its own engine; the results are the serial ones.

A fault that settles a protocol version (a failed negotiation, a fault every case would
repeat: the engine's ``Shortcut``, ``CaseResult.every_case``) is met by a serial run in the
version's first case, and the rest of the version is not run. A worker that was not given
that first case meets the fault again in its own first case of the version, on the same
premise the shortcut already stands on (every case of the version repeats it): that case
is reported as the serial run reports it, not run, pointing at the first case, whose item
carries the finding (on whichever worker plays it). One root cause, one failed item; the
other items of the version are skipped with a short line naming it.

Items reach a worker in plan order, so the version's first case, if this worker has it,
is played before any later one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from conformance.results import CaseResult, Outcome, Reason


def _played(cr: CaseResult | None) -> bool:
    """Whether ``cr`` was played here (not a not-run result of the shortcut)."""
    return cr is not None and not (cr.reason is Reason.NOT_RUN and not cr.every_case
                                   and not any(f.outcome is Outcome.FAIL for f in cr.findings))


def as_serial(engine: Any, order: int) -> CaseResult:
    """The result of the plan's ``order``-th case as a serial run of the same items gives it
    (see the module): the one this engine played, or a not-run result pointing at the
    version's first case when this engine met there a fault that settles the version."""
    from conformance.engine import Shortcut
    from conformance.lifecycle import not_run

    cr: CaseResult = engine.done[order]
    p = cr.protocol
    if not cr.every_case:
        return cr
    wanted = engine.wanted
    first = next((j for j, (q, _) in enumerate(engine.suite.plan)
                  if q == p and (wanted is None or j in wanted)), order)
    if first >= order or _played(engine.done.get(first)):
        return cr
    _, first_case = engine.suite.plan[first]
    probe = Shortcut(engine.shortcut.keep_going)  # the note the serial run would give
    probe.after(dataclasses.replace(cr, case=f"{first_case.id}@v{p}"))
    if p not in probe.stopped:
        return cr
    note, reason = probe.stopped[p]
    engine.shortcut.stopped[p] = (note, reason)  # later cases here point at the first too
    for j, done in list(engine.done.items()):
        if done.protocol == p and j != order and not _played(done):
            engine.done[j] = not_run(engine.suite.plan[j][1], p, note, reason)
    if cr.transcript_path:  # a serial run never played it: it wrote no transcript of play
        Path(cr.transcript_path).unlink(missing_ok=True)
    engine.done[order] = serial = not_run(engine.suite.plan[order][1], p, note, reason)
    carriers(engine)[p] = f"{first_case.id}[v{p}]"
    return serial


def carriers(engine: Any) -> dict[int, str]:
    """Version -> the item that carries the fault which settled it, where a worker knows it
    only from :func:`as_serial`."""
    found: dict[int, str] | None = getattr(engine, "acp_carriers", None)
    if found is None:
        found = {}
        engine.acp_carriers = found
    return found


def carrier(engine: Any, cr: CaseResult) -> str:
    """The item that carries the fault for which ``cr`` was not run ("" : ``cr`` itself, or
    none known): the first case of its version that ended early with a fault."""
    if _played(cr):
        return ""
    known = carriers(engine).get(cr.protocol)
    if known:
        return known
    for j in sorted(engine.done):
        done = engine.done[j]
        if done.protocol == cr.protocol and _played(done) and (done.aborted or done.every_case):
            cid, _, version = done.case.partition("@v")
            return f"{cid}[v{version}]"
    return ""
