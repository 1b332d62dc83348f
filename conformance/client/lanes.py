"""The threads in-process adapter code runs on: a hang is a finding, not a stuck suite.

The suite hands an adapter whole steps (a start, a turn, a close) to run on a
thread of its own and gives each call into adapter code a deadline; a thread
stuck in a call is abandoned and the next step gets another. Idle threads are
kept for the next client, since starting one costs about as much as a whole
in-process fuzz example.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Hung(Exception):
    """An adapter call passed its deadline: ``what`` names the call."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class Abandoned(BaseException):
    """Ends a thread whose adapter call returned after the suite gave up on it."""


class _Lane:
    """One thread that runs adapter code, and the adapter call it is in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.call: tuple[str, float] | None = None  # (what, started) of the call in progress
        self.abandoned = False
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        threading.Thread(target=self.loop, name="client-adapter", daemon=True).start()

    @classmethod
    def take(cls) -> _Lane:
        """An idle thread from earlier clients, or a new one (starting a thread costs
        about as much as a whole in-process fuzz example)."""
        with _IDLE_LOCK:
            if _IDLE:
                return _IDLE.pop()
        return cls()

    def give_back(self) -> None:
        with _IDLE_LOCK:
            if len(_IDLE) < MAX_IDLE_LANES:
                _IDLE.append(self)
                return
        self.jobs.put(None)  # enough idle ones: this thread ends

    def loop(self) -> None:
        _here.lane = self
        while (job := self.jobs.get()) is not None:
            try:
                job.value = job.step()
            except Abandoned:
                return
            except BaseException as exc:  # noqa: BLE001 - handed to the suite's thread
                job.error = exc
            job.done.set()


@dataclass
class _Job:
    step: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None


_here = threading.local()
_IDLE: list[_Lane] = []  # threads of ended clients, waiting for the next one
_IDLE_LOCK = threading.Lock()
MAX_IDLE_LANES = 2


class Worker:
    """Adapter code runs on a thread of its own, so a call that never returns cannot stop
    the suite. The suite hands over whole steps (a start, a turn, a close) and sleeps
    until the step ends or the adapter call in progress passes ``timeout``; marking a call
    costs a lock, not a thread per call. A hung thread cannot be stopped: it is abandoned
    (if its call ever returns, it ends without touching the transcript) and the next
    step gets another thread. The thread of a client that ended waits for the next one."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.lane: _Lane | None = None

    def run(self, step: Callable[[], Any]) -> Any:
        lane = self.lane = self.lane or _Lane.take()
        job = _Job(step)
        lane.jobs.put(job)
        try:
            while not job.done.wait(self._left(lane)):
                with lane.lock:
                    call = lane.call
                    if call is not None and time.monotonic() - call[1] >= self.timeout:
                        raise Hung(call[0])
        except BaseException:  # a hang, or an interrupt: this thread is not waited for again
            if not job.done.is_set():
                with lane.lock:
                    lane.abandoned = True
                lane.jobs.put(None)  # if it ever gets back to its queue, it ends there
                self.lane = None
            raise
        if job.error is not None:
            raise job.error
        return job.value

    def _left(self, lane: _Lane) -> float:
        call = lane.call
        if call is None:  # the suite's own code between calls: check again after a while
            return self.timeout
        return max(0.0, call[1] + self.timeout - time.monotonic())

    @staticmethod
    def guarded(what: str, fn: Callable[[], Any]) -> Any:
        """Call ``fn`` on the adapter's thread, marked as the call in progress."""
        lane: _Lane = _here.lane
        with lane.lock:
            lane.call = (what, time.monotonic())
        try:
            return fn()
        finally:
            with lane.lock:
                lane.call = None
                if lane.abandoned:
                    raise Abandoned()

    def end(self) -> None:
        lane, self.lane = self.lane, None
        if lane is not None:
            lane.give_back()
