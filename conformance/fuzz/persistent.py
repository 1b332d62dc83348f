"""Persistent agent fuzzing: many generated runs on one agent process.

A generated run costs what its agent processes cost to start, and an ACP agent
is built to serve many sessions in one process. So ``fuzz`` keeps the process a
run leaves behind and gives it to the next run of the same protocol version
(:class:`ProcessPool`): that run sends no ``initialize`` (the process already
answered one) and works in sessions of its own. Its transcript starts with a
copy of the process's ``initialize`` exchange and a note that the process was
reused, so it is graded like a run on a fresh process.

A fresh process is started only when

- a step needs one (a load or resume on a fresh process: the ``restart`` step);
- the last run on the process broke a rule, was aborted (a crash or a hang), did
  not answer the suite's ping, or left the process dead;
- the process has served ``runs_per_process`` runs (``--runs-per-process``);
- the run speaks the other protocol version (each version keeps its own process).

``--fresh-process`` (``runs_per_process=1``) keeps one process per run.

A finding stands alone (:func:`confirm`): a failure found on a reused process is
first replayed on a fresh process. If it breaks the rule there, it is shrunk as
any failure. If not, the steps of the earlier runs on that process (its
*history*) are played first, on one process, and the failing run after them;
if that breaks the rule, the failure *needs earlier sessions*: the history is
shrunk (whole runs, then single steps) and the run's own steps after it, and the
counterexample keeps both, as one ordinary step list that ``replay`` plays on a
fresh process. The report says how many earlier sessions it needs. A failure
that reproduces neither way is reported as found, with a note saying so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.agent.steps import Step, split
from conformance.fuzz.grading import Failure
from conformance.fuzz.player import FuzzDriver, Spawner
from conformance.transcript import Entry, Transcript

DEFAULT_RUNS_PER_PROCESS = 50  # generated runs one agent process serves, at most
FRESH_ENV = "ACP_FUZZ_FRESH_PROCESS"  # set (non-empty): the default is a fresh process per run


def default_runs_per_process() -> int:
    """The default of ``--runs-per-process``: 1 with ``$ACP_FUZZ_FRESH_PROCESS`` set (how
    the test suite runs the fuzz tests in the old mode too), else
    :data:`DEFAULT_RUNS_PER_PROCESS`."""
    return 1 if os.environ.get(FRESH_ENV) else DEFAULT_RUNS_PER_PROCESS


@dataclass
class Kept:
    """A live agent process kept for the next run, with what its driver knew."""

    proc: Any  # a TargetProcess
    protocol: int
    info: Any
    caps: Any
    ids: Any  # the request-id counter: IDs go on rising on the process
    prelude: list[Entry]  # the initialize exchange, copied into each later run's transcript
    history: list[list[Step]]  # the steps of every run played on the process, in order
    runs: int  # runs the process has served
    sessions: int  # sessions those runs created


@dataclass
class ProcessPool:
    """The processes kept between runs, one per protocol version (module docstring)."""

    spawner: Spawner
    runs_per_process: int = DEFAULT_RUNS_PER_PROCESS
    kept: dict[int, Kept] = field(default_factory=dict)
    reused: int = 0  # runs played on a kept process
    restarted: dict[str, int] = field(default_factory=dict)  # why a kept process was let go

    def take(self, protocol: int) -> Kept | None:
        kept = self.kept.pop(protocol, None)
        if kept is None:
            return None
        if not kept.proc.alive():
            self._let_go(kept, "the agent exited between runs")
            return None
        return kept

    def adopt(self, driver: FuzzDriver, kept: Kept) -> None:
        """Put ``kept`` to use for ``driver``'s run (its transcript is fresh)."""
        proc = kept.proc
        while True:  # anything left unread was recorded with the run before
            try:
                proc.inbox.get_nowait()
            except Exception:
                break
        proc.queued = 0
        proc.transcript = driver.transcript
        driver.conn = 0
        proc.conn = 0
        proc.recorded_entries = proc.recorded_bytes = 0  # a recording budget per run
        driver.transcript.add(0, "harness", "harness", event="note", data={
            "note": "process reused: no initialize is sent; its initialize exchange is "
                    "copied below", "earlier_runs": kept.runs,
            "earlier_sessions": kept.sessions, "pid": getattr(proc, "pid", None)})
        for e in kept.prelude:
            _copy(e, driver.transcript)
        driver.proc = proc
        driver.info, driver.caps, driver.ids = kept.info, kept.caps, kept.ids
        self.reused += 1

    def give_back(self, driver: FuzzDriver, steps: Sequence[Step], before: Kept | None,
                  *, reusable: str | None) -> None:
        """The run is over: keep its process for the next run, or retire it.
        ``reusable`` is None when it may be kept, else why not."""
        proc = driver.proc
        if proc is None:
            return
        restarted = any(s == "restart" for s in steps)
        history = ([] if before is None or restarted else list(before.history)) + [list(steps)]
        runs = len(history)
        why = reusable
        if why is None and not proc.alive():
            why = "the agent exited"
        if why is None and not driver.ping_answered:
            why = "the agent did not answer the suite's ping"
        if why is None and runs >= self.runs_per_process:
            why = f"{self.runs_per_process} runs on one process (--runs-per-process)"
        prelude = before.prelude if before is not None and not restarted else _prelude(driver)
        if why is None and not prelude:
            why = "no initialize exchange to carry over"
        if why is not None:
            self.restarted[why] = self.restarted.get(why, 0) + 1
            driver.retire()
            return
        driver.proc = None
        sessions = sum(1 for h in history for s in h if s == "new_session")
        old = self.kept.pop(driver.protocol, None)
        if old is not None:  # never two processes of one version
            self._let_go(old, "replaced")
        self.kept[driver.protocol] = Kept(proc, driver.protocol, driver.info, driver.caps,
                                          driver.ids, prelude, history, runs, sessions)

    def close(self) -> None:
        for kept in list(self.kept.values()):
            self.spawner.retire(kept.proc)
        self.kept.clear()

    def _let_go(self, kept: Kept, why: str) -> None:
        self.restarted[why] = self.restarted.get(why, 0) + 1
        self.spawner.retire(kept.proc)


def _prelude(driver: FuzzDriver) -> list[Entry]:
    """The initialize request and its response on the driver's current connection."""
    rid: Any = None
    out: list[Entry] = []
    for e in driver.transcript.entries:
        if e.conn != driver.conn or e.stream == "harness" or not isinstance(e.msg, dict):
            continue
        if rid is None and e.src == "client" and e.msg.get("method") == "initialize":
            rid, out = e.msg.get("id"), [e]
        elif rid is not None and e.src == "agent" and "method" not in e.msg \
                and e.msg.get("id") == rid:
            return out + [e]
    return []


def _copy(e: Entry, transcript: Transcript) -> None:
    line = (e.raw or "").encode("utf-8", "surrogatepass")
    transcript.add(0, e.src, e.stream, line, truncated=e.truncated)


def generate(search: Callable[[int, Any], None], ctx: Any, effort: Any, seed: int,
             notes: list[str]) -> None:
    """Run the Hypothesis search ``search(seed, effort)``. In persistent mode a run can go
    differently from an earlier run that began with the same choices (the process that
    served it had served others), which Hypothesis reports as Flaky: the search then
    goes on with the next seed for the runs still wanted, instead of stopping."""
    from dataclasses import replace

    from hypothesis.errors import Flaky

    from conformance.fuzz.keeper import received

    again = 0
    while True:
        try:
            search(seed + again, effort if not again else replace(
                effort, max_examples=max(1, effort.max_examples - ctx.budget.examples)))
            return
        except Flaky:
            # --fresh-process: as before; a signal (not the agent) made the repeat differ:
            # the caller turns it into the interruption it is
            if ctx.pool is None or received() is not None:
                raise
            if ctx.enough() or ctx.budget.examples >= effort.max_examples:
                return  # the search was ending anyway
            again += 1
            if again == 1:
                notes.append("a run on a reused process went differently from an earlier "
                             "run that began the same way: generation went on with the next "
                             "seed (each time this happens)")


# -- the history of a process, as one step list ---------------------------------------

def compose(history: Sequence[Sequence[Step]], run: Sequence[Step]) -> list[Step]:
    """The earlier runs and ``run`` as one step list on one process: every run after the
    first drops its ``start`` (the process was reused) and its ``switch`` steps name
    sessions counted from the process's first."""
    out: list[Step] = []
    sessions = 0
    for part in [*history, run]:
        for i, step in enumerate(part):
            if out and i == 0 and step == "start":
                continue
            name, args = split(step)
            if name == "switch" and isinstance(args.get("session"), int):
                step = {"switch": {**args, "session": args["session"] + sessions}}
            out.append(step)
        sessions += sum(1 for s in part if s == "new_session")
    return out


def earlier_sessions(history: Sequence[Sequence[Step]]) -> int:
    return sum(1 for part in history for s in part if s == "new_session")


# -- a failure found on a reused process -------------------------------------------------

Fails = Callable[[list[Step]], "Failure | None"]


def confirm(failure: Failure, fails: Fails, *, max_attempts: int,
            deadline: float | None = None,
            say: Callable[[str], None] = lambda _line: None) -> Failure:
    """Replay a failure found on a reused process on fresh processes (module docstring):
    the failure alone if it stands alone, else with the earlier runs it needs (shrunk),
    else as found with ``unconfirmed`` set. ``fails`` plays a step list on a fresh
    process and returns the failure it shows for the same rule (None: it passes)."""
    from conformance.fuzz.shrink import shrink_steps

    history = [list(h) for h in failure.history]
    name = f"{failure.requirement} (v{failure.protocol})"
    alone = fails(list(failure.steps))
    if alone is not None:
        say(f"confirming {name}: it fails on a fresh process too")
        return _carry(alone, failure, history=[])
    whole = fails(compose(history, failure.steps))
    if whole is None:
        say(f"confirming {name}: it did not fail again on a fresh process, alone or "
            f"after the {len(history)} earlier run(s)")
        failure.unconfirmed = True
        return failure
    say(f"confirming {name}: it needs the {len(history)} earlier run(s) on its process")
    attempts = 2

    def over() -> bool:
        return attempts >= max_attempts or (deadline is not None
                                            and time.monotonic() >= deadline)

    run = list(failure.steps)
    best = whole
    # Whole runs first: the latest k runs for k = 1, 2, 4, ...; then each run left out.
    k = 1
    while k < len(history) and not over():
        attempts += 1
        tail = history[-k:]
        got = fails(compose(tail, run))
        if got is not None:
            history, best = tail, got
            break
        k *= 2
    i = 0
    while i < len(history) and len(history) > 1 and not over():
        attempts += 1
        fewer = history[:i] + history[i + 1:]
        got = fails(compose(fewer, run))
        if got is not None:
            history, best = fewer, got
        else:
            i += 1
    # Then single steps: the earlier runs as one list, and the run after them.
    flat = compose(history[:-1], history[-1]) if history else []
    if flat and not over():
        shrunk = shrink_steps(flat, best, lambda h: fails(compose([h], run)),
                              keep=1, max_attempts=max(1, max_attempts - attempts),
                              deadline=deadline)
        flat, best, attempts = shrunk.steps, shrunk.result, attempts + shrunk.attempts
    if not over():
        shrunk = shrink_steps(run, best, lambda r: fails(compose([flat], r)),
                              keep=2, max_attempts=max(1, max_attempts - attempts),
                              deadline=deadline)
        run, best, attempts = shrunk.steps, shrunk.result, attempts + shrunk.attempts
    out = _carry(best, failure, history=[flat])
    out.steps = compose([flat], run)
    out.history_steps = len(flat)
    out.earlier_sessions = earlier_sessions([flat])
    out.shrink_attempts = attempts
    say(f"confirming {name}: {len(out.steps)} steps, after {out.earlier_sessions} earlier "
        f"session(s) ({attempts} replay(s))")
    return out


def _carry(new: Failure, old: Failure, *, history: list[list[Step]]) -> Failure:
    new.found_steps = old.found_steps
    new.model = old.model if new.model is None else new.model
    new.history = history
    return new


def describe_history(f: Failure) -> str | None:
    """The report's line for a failure that needs earlier sessions (None: it does not)."""
    if getattr(f, "unconfirmed", False):
        return ("found on a reused agent process; it did not fail again on a fresh process "
                "(alone or after the earlier runs on its process): its behaviour depends on "
                "timing or on state the steps do not show")
    n = getattr(f, "earlier_sessions", 0)
    if not getattr(f, "history_steps", 0):
        return None
    return (f"seen after {n} earlier session(s) in the same process: steps 1 to "
            f"{f.history_steps} are the earlier runs' (shrunk), the rest is the failing run")


__all__ = ["DEFAULT_RUNS_PER_PROCESS", "FRESH_ENV", "Kept", "default_runs_per_process", "ProcessPool", "compose", "confirm",
           "describe_history", "earlier_sessions"]
