"""Ending the agent doubles a client started, including one still starting when it exited.

Pure process bookkeeping for :mod:`conformance.client.runner`: the PIDs the double's
start script noted (``SPAWNED`` in the case's folder), the doubles that reported to the
suite's control channel, and the ones to wait for or kill.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from conformance.timers import record as record_timer


def end_doubles(control: Any, spawned: str | None = None, starting: float = 0.0) -> None:
    """Every double the client started is ended: wait for their reports to close, then kill.

    A double the client started just before it exited may still be starting (Python's
    start-up takes seconds on a busy machine): each PID in ``spawned`` that is alive and
    has not reported is given up to ``starting`` seconds to report (the run's
    ``--timeout``), so the transcript holds it; one that never does is killed and noted."""
    started = _spawned(spawned)
    deadline = time.monotonic() + starting
    while _unreported(control, started) and time.monotonic() < deadline:
        control.next_event(min(0.2, max(0.0, deadline - time.monotonic())))
    for pid in _unreported(control, started):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        note = control.transcript.add(0, "harness", "harness", event="note",
                                      data={"note": "double-unreported", "pid": pid,
                                            "waited": starting})
        record_timer(control.transcript.header, "wait for a started double to report",
                     starting, "--timeout", f"the agent double (pid {pid}) the client started",
                     note.seq)
    deadline = time.monotonic() + 2.0
    while control.pids() and time.monotonic() < deadline:
        control.next_event(max(0.0, deadline - time.monotonic()))
    for pid in control.pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 2.0
    while control.pids() and time.monotonic() < deadline:
        control.next_event(max(0.0, deadline - time.monotonic()))


def _spawned(path: str | None) -> list[int]:
    """The PIDs the double's start script noted (none when there is no such file)."""
    try:
        with open(path or "", encoding="ascii") as fh:
            return [int(w) for w in fh.read().split() if w.isdigit()]
    except OSError:
        return []


def _unreported(control: Any, started: list[int]) -> list[int]:
    """The started doubles that are running and have not reported to the suite."""
    reported = {d.pid for d in list(control.doubles.values())}
    return [pid for pid in started if pid not in reported and _running(pid)]


def _running(pid: int) -> bool:
    """Whether the process runs (a zombie has ended: only its exit status is left)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[:1] != ["Z"]
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
