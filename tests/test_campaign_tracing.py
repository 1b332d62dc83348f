"""A campaign grades outside HypoFuzz's coverage collection, and leaves other tracers be.

HypoFuzz traces coverage with ``sys.settrace`` before Python 3.12 and with
``sys.monitoring`` branch events from 3.12; grading every step's transcript under
either was most of an execution's cost (bench/RESULTS.md, section 9). These tests run
the campaign's real agent and client tests against the real reference agent and
client, under HypoFuzz's own collector where HypoFuzz is installed (it is optional),
and under a tracer of another tool (coverage.py, a debugger), which must stay on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import settings

from conformance.checks import Options
from conformance.fuzz.agent_machine import AgentFuzzConfig
from conformance.fuzz.campaign import Campaign, agent_test, client_test
from conformance.fuzz.client_fuzz import ClientTarget
from conformance.fuzz.player import AgentTarget
from conformance.fuzz.settings import get_effort
from conformance.fuzz.tracing import untraced

PACKAGE = Path(__file__).resolve().parents[1] / "conformance"
REFERENCE = [sys.executable, "-m", "conformance.reference.agent"]
REFERENCE_CLIENT = "conformance.client.reference.adapter:make_client"
needs_hypofuzz = pytest.mark.skipif(
    find_spec("hypofuzz") is None,
    reason="HypoFuzz is not installed: it is optional (the campaign extra has it)")


class LineTracer:
    """Another tool's line tracer (what coverage.py or a debugger sets)."""

    def __init__(self) -> None:
        self.files: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        if event == "line":
            self.files.add(frame.f_code.co_filename)
        return self


@contextmanager
def no_database() -> Iterator[None]:
    """The campaign's tests take the settings profile's database: none here."""
    previous = getattr(settings, "_current_profile", None) or "default"
    settings.register_profile("acp-test-no-database", database=None)
    settings.load_profile("acp-test-no-database")
    try:
        yield
    finally:
        settings.load_profile(previous)


def agent_campaign() -> Campaign:
    campaign = Campaign("agent", get_effort("ci", max_examples=3), options=Options())
    campaign.agent = AgentFuzzConfig(AgentTarget(REFERENCE, "reference agent", {}, 10.0),
                                     protocols=(2,))
    return campaign


def client_campaign() -> Campaign:
    campaign = Campaign("client", get_effort("ci", max_examples=3), options=Options())
    campaign.client = ClientTarget("reference client", adapter=REFERENCE_CLIENT)
    return campaign


def ours(files: set[str], folder: str) -> set[str]:
    root = str(PACKAGE / folder)
    return {Path(f).name for f in files if f.startswith(root)}


def test_another_tools_tracer_stays_on_through_the_grading() -> None:
    tracer = LineTracer()
    campaign = agent_campaign()
    seen: list[object] = []
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with untraced():
            seen.append(sys.gettrace())
        with no_database():
            agent_test(campaign, 2)()
    finally:
        sys.settrace(previous)
        campaign.close()
    assert seen == [tracer]
    assert ours(tracer.files, "checks"), "the checkers ran under coverage.py's kind of tracer"


@needs_hypofuzz
def test_untraced_lifts_hypofuzz_collection_and_puts_it_back() -> None:
    from hypofuzz.coverage import CoverageCollector

    def state() -> tuple[object, int]:
        monitoring: Any = getattr(sys, "monitoring", None)
        events = monitoring.get_events(CoverageCollector.tool_id) if monitoring else 0
        return sys.gettrace(), events

    with CoverageCollector():
        on = state()
        with untraced():
            off = state()
        again = state()
    assert on != (None, 0) and off == (None, 0) and again == on


@needs_hypofuzz
@pytest.mark.parametrize("role", ["agent", "client"])
def test_a_campaign_under_hypofuzz_covers_the_driving_and_not_the_grading(role: str) -> None:
    from hypofuzz.coverage import CoverageCollector

    campaign = agent_campaign() if role == "agent" else client_campaign()
    test = agent_test(campaign, 2) if role == "agent" else client_test(campaign, 1)
    try:
        with no_database(), CoverageCollector() as collector:
            test()
    finally:
        campaign.close()
    files = {f for b in collector.branches for f in (b.start.filename, b.end.filename)}
    assert ours(files, role), f"the {role} side (conformance/{role}) was covered"
    # a client stream's case lists the client rules (checks/base.py); no checker runs covered
    assert ours(files, "checks") <= ({"base.py"} if role == "client" else set()), \
        sorted(ours(files, "checks"))
