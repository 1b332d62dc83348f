"""Cases in parallel (``--jobs``), with results exactly as a serial run gives them.

Each case owns its processes, temporary folder and transcript, so cases can be
played at the same time by worker threads. What the user reads must not
depend on which case finished first: the results are recorded strictly in plan
order, and the decision to play a case at all (a protocol version settled by a
repeated fault, the run's deadline) is taken from the cases before it in plan
order. A case started before such a decision was known is cut and its result
dropped: its not-run result is what a serial run would have recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from conformance.cases import Case
from conformance.lifecycle import Cutoff
from conformance.results import CaseResult, RunResult

NOT_NEEDED = "not needed"  # the Cutoff reason of a case a not-run result replaces
_TICK = 0.25  # seconds between looks at the signals and the progress display


class _Slot:
    def __init__(self, protocol: int, case: Case) -> None:
        self.protocol = protocol
        self.case = case
        self.cutoff: Cutoff | None = None  # set when a worker starts it
        self.result: CaseResult | None = None
        self.error: BaseException | None = None
        self.skipped = False  # a worker passed it over: the recorder decides its not-run result
        self.done = False
        self.dropped = False  # a not-run result replaced its result

    def drop(self) -> None:
        """A not-run result replaces this case: cut it, and remove what it wrote (a serial run
        would not have played it)."""
        self.dropped = True
        if self.cutoff is not None and not self.done:
            self.cutoff.cut(NOT_NEEDED)
        if self.result is not None:  # its transcript, and each repetition's (--repeat)
            for path in {self.result.transcript_path, *self.result.runs} - {None}:
                Path(str(path)).unlink(missing_ok=True)

    @property
    def label(self) -> str:
        return f"{self.case.id} v{self.protocol}"


def play_concurrently(result: RunResult, plan: Sequence[tuple[int, Case]],
                      play: Callable[[int, Case, Any, Cutoff], CaseResult], *, jobs: int,
                      signals: Any, run_cut: Cutoff,
                      progress: Callable[[int, int, str], None] | None,
                      not_run: Callable[[Case, int, bool], CaseResult | None],
                      record: Callable[[CaseResult], None]) -> None:
    """Play ``plan`` with ``jobs`` workers; ``record`` each result in plan order.

    ``not_run(case, protocol, started)`` gives the result of a case that is not
    to be run, judged from what was recorded before it (and, for a case not
    ``started``, from the clock); it is asked again when the case's turn to be
    recorded comes, so a late decision from the cases before it still wins.
    """
    slots = [_Slot(p, c) for p, c in plan]
    lock = threading.Condition()
    pending = iter(slots)

    def worker() -> None:
        while True:
            with lock:
                slot = next(pending, None)
                if slot is None:
                    return
                if signals.signum or not_run(slot.case, slot.protocol, False) is not None:
                    slot.skipped = slot.done = True
                    lock.notify_all()
                    continue
                slot.cutoff = Cutoff(parent=run_cut)
            try:
                slot.result = play(slot.protocol, slot.case, None, slot.cutoff)
            except BaseException as exc:  # noqa: BLE001 - re-raised in plan order below
                slot.error = exc
            with lock:
                slot.done = True
                if slot.dropped:
                    slot.drop()
                lock.notify_all()

    threads = [threading.Thread(target=worker, name=f"case-worker-{n}", daemon=True)
               for n in range(min(jobs, len(slots)))]
    for t in threads:
        t.start()
    try:
        for i, slot in enumerate(slots):
            cr = _await(slot, i, slots, lock, signals, progress, not_run)
            if cr is None:
                break
            with lock:
                record(cr)
    finally:
        with lock:  # an error or a signal: cases not started are not, the others are cut
            for s in slots:
                if s.cutoff is None:
                    s.skipped = True
                elif not s.done:
                    s.cutoff.cut(NOT_NEEDED)
        for t in threads:
            t.join()


def _await(slot: _Slot, i: int, slots: list[_Slot], lock: threading.Condition, signals: Any,
           progress: Callable[[int, int, str], None] | None,
           not_run: Callable[[Case, int, bool], CaseResult | None]) -> CaseResult | None:
    """The result to record for ``slots[i]``, once it is known; None: the run stops here."""
    with lock:
        while True:
            instead = not_run(slot.case, slot.protocol, slot.cutoff is not None)
            if instead is not None:
                slot.drop()
                return instead
            if slot.done and not slot.skipped:
                if slot.error is not None:
                    raise slot.error
                assert slot.result is not None
                return slot.result
            if signals.signum and (slot.cutoff is None or slot.skipped):
                return None  # interrupted before this case started
            if slot.skipped:  # passed over for a reason that no longer holds: cannot happen
                raise RuntimeError(f"case {slot.label} was neither run nor stood in for")
            if progress:
                running = [s.label for s in slots if s.cutoff is not None and not s.done]
                progress(i, len(slots), ", ".join(running) or slot.label)
            lock.wait(_TICK)
