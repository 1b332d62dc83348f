"""Under pytest-xdist (``-n N``) each worker has its own engine; the results are the serial ones.

A serial run decides from the cases before a case, in plan order, whether it is run (the
engine's ``Shortcut``: a failed negotiation or a fault every case would repeat settles a
version at once; the same fault at the same step in two consecutive cases settles it
too), and the cases after it are not run. A worker holds only some of those cases. When a
case a worker plays ends with a fault, the worker therefore decides it as the serial run
would: from the version's cases before it in plan order, its own results where it played
them and a control play (transcripts apart, never reported) where another worker has
them, until the version settles or the case is reached. A case the serial run would not
have played is reported as it reports it, not run, pointing at the case that settled the
version, whose item carries the finding (on whichever worker plays it). One root cause,
one failed item; the other items of the version are skipped with a short line naming it.
A target without faults costs nothing more; a faulting one at most the version's cases
before the fault once per worker.

Items reach a worker in plan order, so a case of its own before this one was played first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance.results import CaseResult, Outcome, Reason


def _played(cr: CaseResult | None) -> bool:
    """Whether ``cr`` was played (not a not-run result of the shortcut)."""
    return cr is not None and not (cr.reason is Reason.NOT_RUN and not cr.every_case
                                   and not any(f.outcome is Outcome.FAIL for f in cr.findings))


def as_serial(engine: Any, order: int, control: Callable[[int], CaseResult]) -> CaseResult:
    """The result of the plan's ``order``-th case as a serial run of the same items gives it
    (see the module); ``control(j)`` plays the plan's ``j``-th case apart, for its result."""
    from conformance.engine import Shortcut
    from conformance.lifecycle import not_run

    cr: CaseResult = engine.done[order]
    p = cr.protocol
    if not _played(cr) or not (cr.every_case or cr.fault):
        return cr
    wanted = engine.wanted
    serial, faulted, reached = Shortcut(engine.shortcut.keep_going), [], False
    for j, (q, _) in enumerate(engine.suite.plan):
        if q != p or (wanted is not None and j not in wanted):
            continue
        if p in serial.stopped:
            break
        mine = engine.done.get(j)
        if j < order:
            ran = mine if _played(mine) else control(j)
            if ran.fault or ran.every_case or ran.aborted:
                cid, _, version = ran.case.partition("@v")
                faulted.append(f"{cid}[v{version}]")
        elif j == order:
            ran, reached = cr, True
        elif mine is not None and _played(mine):  # played ahead here, in plan order
            ran = mine
        else:
            break
        serial.after(ran)
    _adopt(engine, p, serial, order)
    if reached:  # the serial run plays it too: it is its own
        return cr
    note, reason = serial.stopped[p]
    if cr.transcript_path:  # a serial run never played it: no transcript of play
        Path(cr.transcript_path).unlink(missing_ok=True)
    engine.done[order] = result = not_run(engine.suite.plan[order][1], p, note, reason)
    carriers(engine)[p] = " and ".join(faulted)
    return result


def _adopt(engine: Any, p: int, serial: Any, order: int) -> None:
    """The worker's shortcut for version ``p`` becomes the serial one; not-run results it
    decided ahead from its own order are dropped, to be decided again when asked."""
    engine.shortcut.last[p] = serial.last.get(p)
    if p in serial.stopped:
        engine.shortcut.stopped[p] = serial.stopped[p]
    else:
        engine.shortcut.stopped.pop(p, None)
    for j, done in list(engine.done.items()):
        if done.protocol == p and j != order and not _played(done):
            del engine.done[j]


def carriers(engine: Any) -> dict[int, str]:
    """Version -> the item that carries the fault which settled it, where a worker knows it
    only from :func:`as_serial`."""
    found: dict[int, str] | None = getattr(engine, "acp_carriers", None)
    if found is None:
        found = {}
        engine.acp_carriers = found
    return found


def carrier(engine: Any, cr: CaseResult) -> str:
    """The item(s) carrying the fault for which ``cr`` was not run ("" : ``cr`` itself, or
    none known): the cases of its version that were played and ended with a fault."""
    if _played(cr):
        return ""
    known = carriers(engine).get(cr.protocol)
    if known:
        return known
    names = []
    for j in sorted(engine.done):
        done = engine.done[j]
        if done.protocol == cr.protocol and _played(done) and (
                done.aborted or done.every_case or done.fault):
            cid, _, version = done.case.partition("@v")
            names.append(f"{cid}[v{version}]")
    return " and ".join(names)
