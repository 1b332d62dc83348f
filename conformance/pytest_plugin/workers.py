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

SIGINT or SIGTERM at the controller (a CI job's timeout signals it alone) is passed on to
every worker: each cuts and grades the case it plays, as a serial session does, and stops;
the controller stops handing out items and waits for their reports, so every report says
what was graded. A worker finds its way into the list through a folder the controller
names in its ``workerinput`` (one file per worker, named by its process ID).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
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


#: The ``workerinput`` key naming the folder where the workers list their process IDs.
PIDS = "acp_worker_pids"


def configure_node(config: Any, node: Any) -> None:
    """The controller, as it starts a worker: name the folder the worker lists itself in."""
    folder = getattr(config, "_acp_worker_pids", None)
    if folder is None:
        folder = config._acp_worker_pids = tempfile.mkdtemp(prefix="acp-workers-")
    node.workerinput[PIDS] = folder


def register(config: Any) -> None:
    """A worker: list itself (its process ID) in the controller's folder."""
    folder = getattr(config, "workerinput", {}).get(PIDS)
    if folder and Path(folder).is_dir():
        (Path(folder) / str(os.getpid())).touch()


def unregister(config: Any) -> None:
    """The end of a session: a worker leaves the list; the controller removes its folder."""
    folder = getattr(config, "workerinput", {}).get(PIDS)
    if folder:
        (Path(folder) / str(os.getpid())).unlink(missing_ok=True)
    own = getattr(config, "_acp_worker_pids", None)
    if own:
        shutil.rmtree(own, ignore_errors=True)


def relay(config: Any, signum: int) -> bool:
    """At xdist's controller once its workers play the items: stop handing out items, pass
    the signal on to every worker and return True (the session ends with their reports)."""
    dsession = config.pluginmanager.get_plugin("dsession")
    if dsession is None or getattr(dsession, "sched", None) is None:
        return False
    dsession.shouldstop = dsession.shouldstop or \
        f"interrupted by {signal.Signals(signum).name}"
    folder = getattr(config, "_acp_worker_pids", None)
    for entry in Path(folder).iterdir() if folder and Path(folder).is_dir() else ():
        if entry.name.isdigit():
            try:
                os.kill(int(entry.name), signum)
            except (ProcessLookupError, PermissionError):
                pass  # it has ended already
    return True
