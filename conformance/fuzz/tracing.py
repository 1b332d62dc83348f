"""Grading outside a coverage-guided fuzzer's tracer: HypoFuzz's coverage collection is
lifted while the suite grades, in agent campaigns (``campaign.py``) and client streams
(``client_fuzz.py``) alike, so what it covers is the target and not the oracle."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FUZZER_TOOL = "hypofuzz"  # HypoFuzz's sys.monitoring tool name (Python 3.12 and later)


def _fuzzer_tracer(trace: Any) -> bool:
    """Whether a ``sys.settrace`` function is HypoFuzz's coverage collector (a bound
    method of it); another tracer (coverage.py, a debugger) is left alone."""
    owner = getattr(trace, "__self__", None)
    return owner is not None and type(owner).__module__.split(".")[0] == FUZZER_TOOL


@contextmanager
def untraced() -> Iterator[None]:
    """Run the block without HypoFuzz's coverage collection. Before Python 3.12 HypoFuzz
    traces with ``sys.settrace`` (a call into Python for every line run), from 3.12 with
    ``sys.monitoring`` branch events (a call for every branch, each listing the code's
    positions): either way grading (the whole transcript after every step) became most of
    an execution's cost (bench/RESULTS.md, section 9). The grading is the suite's oracle,
    not the target: its coverage guides nothing. Other tracers are left alone; without
    HypoFuzz this is a no-op."""
    trace = sys.gettrace()
    lift = _fuzzer_tracer(trace)
    monitoring: Any = getattr(sys, "monitoring", None)  # Python 3.12 and later
    tools: list[tuple[int, int]] = []
    if monitoring is not None:
        tools = [(tool, monitoring.get_events(tool)) for tool in range(6)
                 if monitoring.get_tool(tool) == FUZZER_TOOL]
    if lift:
        sys.settrace(None)
    for tool, _ in tools:
        monitoring.set_events(tool, 0)
    try:
        yield
    finally:
        for tool, events in tools:
            monitoring.set_events(tool, events)
        if lift:
            sys.settrace(trace)
