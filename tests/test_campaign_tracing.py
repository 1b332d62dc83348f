"""A campaign's grading runs outside a coverage-guided fuzzer's line tracer.

HypoFuzz on Python before 3.12 traces with ``sys.settrace``; grading every step's
transcript under it was most of an execution's cost (bench/RESULTS.md, section 9).
These tests run the campaign's real agent test against the real reference agent
under a line tracer of their own, the kind HypoFuzz sets, and look at which of
the suite's files it saw.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from hypothesis import settings

from conformance.checks import Options
from conformance.fuzz.agent_machine import AgentFuzzConfig
from conformance.fuzz.campaign import Campaign, agent_test, client_test, untraced
from conformance.fuzz.client_fuzz import ClientTarget
from conformance.fuzz.player import AgentTarget
from conformance.fuzz.settings import get_effort

PACKAGE = Path(__file__).resolve().parents[1] / "conformance"
REFERENCE = [sys.executable, "-m", "conformance.reference.agent"]


class LineTracer:
    """What a coverage tracer before Python 3.12 does: a call for every line run."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.functions: set[tuple[str, str]] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        if event == "line":
            self.files.add(frame.f_code.co_filename)
            self.functions.add((Path(frame.f_code.co_filename).name, frame.f_code.co_name))
        return self

    def ours(self, folder: str) -> set[str]:
        root = str(PACKAGE / folder)
        return {f for f in self.files if f.startswith(root)}


def traced(tracer: LineTracer, fn: Callable[[], None]) -> None:
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)


def test_untraced_lifts_the_tracer_for_its_block_and_puts_it_back() -> None:
    tracer = LineTracer()
    seen: list[object] = []

    def body() -> None:
        with untraced():
            seen.append(sys.gettrace())
        seen.append(sys.gettrace())

    traced(tracer, body)
    assert seen == [None, tracer]
    assert sys.gettrace() is not tracer


def test_a_campaign_execution_traces_the_driving_but_not_the_grading(tmp_path: Path) -> None:
    campaign = Campaign("agent", get_effort("ci", max_examples=3), options=Options())
    campaign.agent = AgentFuzzConfig(AgentTarget(REFERENCE, "reference agent", {}, 10.0),
                                     protocols=(2,))
    previous = getattr(settings, "_current_profile", None) or "default"
    settings.register_profile("acp-test-no-database", database=None)
    settings.load_profile("acp-test-no-database")  # the campaign's tests take the profile's
    tracer = LineTracer()
    try:
        traced(tracer, agent_test(campaign, 2))
    finally:
        settings.load_profile(previous)
        campaign.close()
    assert tracer.ours("agent"), "the driving (conformance/agent) ran traced"
    assert tracer.ours("fuzz"), "the state machine (conformance/fuzz) ran traced"
    assert not tracer.ours("checks"), f"grading ran traced: {sorted(tracer.ours('checks'))}"


def test_a_client_campaign_execution_traces_the_playing_but_not_the_grading() -> None:
    campaign = Campaign("client", get_effort("ci", max_examples=3), options=Options())
    campaign.client = ClientTarget("reference client",
                                   adapter="conformance.client.reference.adapter:make_client")
    previous = getattr(settings, "_current_profile", None) or "default"
    settings.register_profile("acp-test-no-database", database=None)
    settings.load_profile("acp-test-no-database")
    tracer = LineTracer()
    try:
        traced(tracer, client_test(campaign, 1))
    finally:
        settings.load_profile(previous)
        campaign.close()
    assert tracer.ours("client"), "playing the stream (conformance/client) ran traced"
    # building the stream's case lists the client rules (checks/base.py's all_rules);
    # no checker and no part of grading runs traced
    assert {Path(f).name for f in tracer.ours("checks")} <= {"base.py"}, tracer.ours("checks")
    assert not {("base.py", f) for f in ("grade", "_dispatch", "_rows")} & tracer.functions
