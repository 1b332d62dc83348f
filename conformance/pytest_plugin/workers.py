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
from typing import Any

from conformance.engine import played
from conformance.results import CaseResult


def as_serial(engine: Any, order: int, control: Callable[[int], CaseResult]) -> CaseResult:
    """The result of the plan's ``order``-th case as a serial run gives it
    (:meth:`conformance.engine.Engine.as_serial`)."""
    return engine.as_serial(order, control)  # type: ignore[no-any-return]


def carrier(engine: Any, cr: CaseResult) -> str:
    """The item(s) carrying the fault for which ``cr`` was not run ("" : ``cr`` itself, or
    none known): the cases of its version that were played and ended with a fault."""
    if played(cr):
        return ""
    known: str = engine.carriers.get(cr.protocol, "")
    if known:
        return known
    names = []
    for j in sorted(engine.done):
        done = engine.done[j]
        if done.protocol == cr.protocol and played(done) and (
                done.aborted or done.every_case or done.fault):
            cid, _, version = done.case.partition("@v")
            names.append(f"{cid}[v{version}]")
    return " and ".join(names)
