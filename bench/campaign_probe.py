"""A pytest plugin for bench/campaign_control.py: ``-p bench.campaign_probe``.

Loaded into ``pytest --acp-fuzz`` or into every HypoFuzz worker (HypoFuzz passes
its pytest arguments on), it does two things, each only when its variable is set:

* ``$ACP_BENCH_EXEC_LOG`` (a file): each generated run of the agent state machine
  appends one JSON line when it ends: its protocol, its steps, its wall time and
  the CPU time of this process (the harness: generation, driving, grading, and
  whatever the executor adds) from the machine's start to its teardown.
* ``$ACP_BENCH_NO_TRACE=1``: HypoFuzz's coverage collector collects nothing (on
  Python before 3.12 it is a ``sys.settrace`` line tracer over every traced
  frame), so a campaign runs HypoFuzz's executor and input distribution without
  the tracing. A control only: HypoFuzz then sees no coverage.
* ``$ACP_BENCH_TRACE_GRADING=1``: the campaign grades under the tracer again (as it
  did before it lifted it for grading): the "before" side of that change.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

LOG_ENV = "ACP_BENCH_EXEC_LOG"
NO_TRACE_ENV = "ACP_BENCH_NO_TRACE"
TRACE_GRADING_ENV = "ACP_BENCH_TRACE_GRADING"


def pytest_configure(config: Any) -> None:
    log = os.environ.get(LOG_ENV)
    if log:
        _log_runs(log)
    if os.environ.get(NO_TRACE_ENV):
        _no_trace()
    if os.environ.get(TRACE_GRADING_ENV):
        from contextlib import nullcontext

        from conformance.fuzz import campaign

        campaign.untraced = nullcontext  # type: ignore[assignment]


def _log_runs(log: str) -> None:
    from conformance.fuzz import agent_machine

    machine = agent_machine.AgentMachine
    init, teardown = machine.__init__, machine.teardown

    def __init__(self: Any, ctx: Any) -> None:
        self._bench_start = (time.perf_counter(), time.process_time())
        init(self, ctx)

    def logged_teardown(self: Any) -> None:
        try:
            teardown(self)
        finally:
            wall0, cpu0 = self._bench_start
            line = json.dumps({"protocol": self.protocol, "steps": self.steps,
                               "wall": time.perf_counter() - wall0,
                               "cpu": time.process_time() - cpu0})
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (line + "\n").encode("utf-8"))
            finally:
                os.close(fd)

    machine.__init__ = __init__  # type: ignore[method-assign]
    machine.teardown = logged_teardown  # type: ignore[method-assign]


def _no_trace() -> None:
    try:
        from hypofuzz import coverage
    except ImportError:
        return

    def enter(self: Any) -> Any:
        self.last = None
        self.branches = set()
        return self

    coverage.CoverageCollector.__enter__ = enter  # type: ignore[method-assign]
    coverage.CoverageCollector.__exit__ = lambda self, *exc: None  # type: ignore[method-assign]
