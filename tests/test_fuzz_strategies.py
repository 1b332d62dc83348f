"""The fuzzer's strategies and named mutations.

Positive draws are played for real: the agent double sends the drawn stream to
the reference client through the in-process adapter, and every frame of both
sides is validated against the official schemas. Every named mutation is shown
reachable from ``broken_streams`` and caught by its checker on that real traffic,
with nothing else newly broken. Prompt strategies are validated as the client
frames they become.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from stream_mutations import MUTATIONS, broken_streams

from conformance import profiles
from conformance.checks import Options, grade
from conformance.fuzz.client_fuzz import ClientTarget, play_stream, stream_of
from conformance.fuzz.grading import violations
from conformance.fuzz.prompts import prompt_blocks, prompt_specs
from conformance.results import Outcome
from conformance.schema import problems, schema_path, validate_transcript
from conformance.strategies import chunk_streams

REFERENCE = ClientTarget("reference client", adapter="conformance.client.reference:make_client")
OPTIONS = Options()
FEW = settings(max_examples=5, deadline=None, database=None,
               suppress_health_check=list(HealthCheck))


def agent_side(stream: list[dict[str, Any]], protocol: int) -> tuple[Any, dict[str, Outcome]]:
    """Play ``stream`` to the reference client; the agent-side grade of the double's traffic."""
    run = play_stream(REFERENCE, protocol, stream_of(protocol, stream), options=OPTIONS)
    findings = grade(run.transcript.entries, protocol=protocol, options=OPTIONS)
    bad = {f.requirement: f.outcome for f in findings
           if f.outcome in (Outcome.FAIL, Outcome.WARN)}
    return run, bad


@pytest.mark.parametrize("protocol", [1, 2])
@FEW
@given(data=st.data())
def test_positive_streams_are_schema_valid_and_break_nothing(protocol: int, data: Any,
                                                             shared_dir: Path) -> None:
    v2 = protocol == 2  # v2: interleaved messages and every upsert patch form too
    stream = data.draw(chunk_streams(protocol=protocol, attacks=False, interleave=v2,
                                     patches=v2), label="stream")
    run, bad = agent_side(stream, protocol)
    assert bad == {}
    schema = validate_transcript(run.transcript.entries, shared_dir / "acp-schema", protocol,
                                 OPTIONS.profile)
    assert [f.outcome for f in schema] == [Outcome.PASS], [f.message for f in schema]


@pytest.mark.parametrize("protocol", [1, 2])
@FEW
@given(data=st.data())
def test_attack_streams_are_schema_valid_and_never_fail(protocol: int, data: Any,
                                                        shared_dir: Path) -> None:
    """IDs from the opacity attack set are legal: at most the fragile ones warn."""
    stream = data.draw(chunk_streams(protocol=protocol), label="stream")
    run, bad = agent_side(stream, protocol)
    assert {r for r, o in bad.items() if o is Outcome.FAIL} == set()
    assert set(bad) <= {"MID-S-01/empty-id", "MID-S-01/long-id"}
    schema = validate_transcript(run.transcript.entries, shared_dir / "acp-schema", protocol,
                                 OPTIONS.profile)
    assert [f.outcome for f in schema] == [Outcome.PASS], [f.message for f in schema]


CASES = [(name, p) for name, m in MUTATIONS.items() for p in (1, 2) if m.applies_to(p)]


@pytest.mark.parametrize("name,protocol", CASES, ids=[f"{n}-v{p}" for n, p in CASES])
def test_every_mutation_is_reachable_and_caught(name: str, protocol: int) -> None:
    mutation = MUTATIONS[name]
    found = find(broken_streams(protocol=protocol), lambda d: d[0] == name,
                 settings=settings(database=None, max_examples=500, phases=[Phase.generate]))
    name_, stream = found  # reachable: the strategy drew it (unshrunk, a realistic stream)
    assert name_ == name
    rule, grade_ = mutation.breaks[protocol]
    _, bad = agent_side(stream, protocol)
    assert bad.get(rule) is grade_, bad
    assert set(bad) - {rule} <= set(mutation.also.get(protocol, ())), bad


@pytest.mark.parametrize("protocol", [1, 2])
@settings(max_examples=4, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutations_of_rich_streams_newly_break_only_their_rule(protocol: int, data: Any) -> None:
    base = data.draw(chunk_streams(protocol=protocol, attacks=False, min_messages=2),
                     label="base")
    name = data.draw(st.sampled_from([n for n, m in MUTATIONS.items() if m.applies_to(protocol)]),
                     label="mutation")
    mutation = MUTATIONS[name]
    _, before = agent_side(base, protocol)
    _, after = agent_side(mutation.apply(base, protocol), protocol)
    rule, grade_ = mutation.breaks[protocol]
    assert before == {}
    assert after.get(rule) is grade_, (name, after)
    assert set(after) - {rule} <= set(mutation.also.get(protocol, ())), (name, after)


def test_interleaving_and_patches_are_reachable_and_v2_only() -> None:
    both = chunk_streams(protocol=2, attacks=False, interleave=True, patches=True)
    interleaved = find(both, lambda s: any(
        a.get("id") != b.get("id") and a.get("id") in [c.get("id") for c in s[i + 2:]]
        for i, (a, b) in enumerate(itertools.pairwise(s)) if "id" in a and "id" in b),
        settings=settings(database=None, max_examples=300, phases=[Phase.generate]))
    assert interleaved
    for form in ([], None):
        assert find(both, lambda s, f=form: any(x.get("content", "?") == f for x in s),
                    settings=settings(database=None, max_examples=300,
                                      phases=[Phase.generate]))
    with pytest.raises(InvalidArgument, match="interleave=True needs protocol=2"):
        chunk_streams(protocol=1, interleave=True)
    with pytest.raises(InvalidArgument, match="patches=True needs upserts"):
        chunk_streams(protocol=1, patches=True)


def test_broken_streams_validates_its_options_eagerly() -> None:
    with pytest.raises(InvalidArgument, match="unknown mutation"):
        broken_streams(protocol=1, mutations=["with_nonsense"])
    with pytest.raises(InvalidArgument, match="do not apply to protocol v1"):
        broken_streams(protocol=1, mutations=["with_null_id"])


@pytest.mark.parametrize("protocol", [1, 2])
@settings(max_examples=25, deadline=None, database=None)
@given(data=st.data())
def test_prompts_are_valid_client_frames(protocol: int, data: Any, shared_dir: Path) -> None:
    kinds = data.draw(st.sampled_from([("text", "resource_link"),
                                       ("text", "resource_link", "resource", "image")]))
    spec = data.draw(prompt_specs(kinds=kinds, cancel=data.draw(st.booleans())))
    spec.pop("legacy_message_id", None)  # out of spec on purpose (marked fuzz on the wire)
    params: dict[str, Any] = {"sessionId": "sess-1",
                              "prompt": spec.get("blocks") or [{"type": "text",
                                                                "text": spec["text"]}]}
    if "meta_message_id" in spec:
        params["_meta"] = {"messageId": spec["meta_message_id"]}
    msg = {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": params}
    path = schema_path(shared_dir / "acp-schema", protocol, profiles.get(profiles.DEFAULT_PROFILE))
    assert problems(msg, "client", path) == []


def test_prompt_strategies_validate_options_eagerly() -> None:
    with pytest.raises(ValueError, match="unknown content block kind"):
        prompt_blocks(text="x", kinds=("text", "video"))
    with pytest.raises(ValueError, match="must include 'text'"):
        prompt_specs(kinds=("resource_link",))


def test_prompts_shrink_to_the_plain_prompt() -> None:
    assert find(prompt_specs(), lambda s: True) == {"text": "Reply with two separate messages."}
    cancelled = find(prompt_specs(cancel=True), lambda s: True)
    assert cancelled == {"text": "Write a long story, one sentence at a time.",
                         "cancel_after": 0}


def test_violations_put_must_breaches_first() -> None:
    from conformance.results import Finding

    warn = Finding("MID-A-02/interleave", Outcome.WARN, "w", entries=(3,))
    fail = Finding("MID-S-01/type", Outcome.FAIL, "f", entries=(9,))
    assert [f.requirement for f in violations([warn, fail], strict=True)] == [
        "MID-S-01/type", "MID-A-02/interleave"]
    assert [f.requirement for f in violations([warn, fail], strict=False)] == ["MID-S-01/type"]
