"""Observation grading is a pure function of (what the double sent, what the client showed).

Transcripts are built in memory and graded with the registered checkers, as
`acp-conformance check` would; the reference client (without any process) is held
against the reference reducer on streams drawn by Hypothesis.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from conformance import strategies as strat
from conformance.checks import grade
from conformance.client.reference import ReferenceClient
from conformance.client.script import expand_steps
from conformance.transcript import Transcript

PROMPT = "Go."


def updates_of(steps: list[dict[str, Any]], protocol: int) -> list[dict[str, Any]]:
    out = []
    for a in expand_steps(steps, protocol):
        if "update" in a:
            out.append(a["update"])
        elif "batch" in a:
            out.extend(a["batch"])
    return out


def graded(protocol: int, steps: list[dict[str, Any]], shown: list[dict[str, Any]],
           render: str = "cumulative") -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in all_findings(protocol, steps, shown, render):
        out.setdefault(f.requirement, set()).add(f.outcome.value)
    return out


def findings(protocol: int, steps: list[dict[str, Any]], shown: list[dict[str, Any]]
             ) -> list[Any]:
    """The failing findings, with their messages."""
    return [f for f in all_findings(protocol, steps, shown) if f.outcome.value == "fail"]


def all_findings(protocol: int, steps: list[dict[str, Any]], shown: list[dict[str, Any]],
                 render: str = "cumulative") -> list[Any]:
    t = Transcript({"role": "client", "protocol": protocol})

    def add(src: str, msg: Any) -> None:
        t.add(0, src, "stdin" if src == "client" else "stdout",
              json.dumps(msg).encode("utf-8", "surrogatepass"))

    add("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": protocol}})
    add("agent", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": protocol}})
    add("client", {"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
                   "params": {"sessionId": "s", "prompt": [{"type": "text", "text": PROMPT}]}})
    for u in updates_of(steps, protocol):
        add("agent", {"jsonrpc": "2.0", "method": "session/update",
                      "params": {"sessionId": "s", "update": u}})
    add("agent", {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}})
    t.add(0, "harness", "harness", event="observed",
          data={"protocol": protocol, "render": render, "shown": shown})
    return list(grade(t.entries, protocol=protocol, role="client"))


def fails(result: dict[str, set[str]]) -> set[str]:
    return {r for r, o in result.items() if "fail" in o}


def agent(*texts: str) -> dict[str, str]:
    return {"role": "agent", "text": "".join(texts)}


TWO = [{"agent": "A1. ", "id": "a1"}, {"agent": "A2. ", "id": "a1"}, {"agent": "B1. ", "id": "a2"}]


def test_two_messages_shown_apart_pass_and_merged_warn_v1_fail_v2() -> None:
    assert not fails(graded(1, TWO, [agent("A1. A2. "), agent("B1. ")]))
    merged = [agent("A1. A2. B1. ")]
    assert graded(1, TWO, merged)["MID-C-03/merged"] == {"warn"}
    assert graded(2, TWO, merged)["MID-C-03/merged"] == {"fail"}


def test_lost_duplicated_and_reordered_chunks_are_content_failures() -> None:
    for shown in ([agent("A2. "), agent("B1. ")], [agent("A1. A2. A2. "), agent("B1. ")],
                  [agent("A2. A1. "), agent("B1. ")]):
        assert fails(graded(1, TWO, shown)) == {"MID-C-03/content"}, shown


def test_split_across_a_tool_call() -> None:
    steps = [{"agent": "G1. ", "id": "g"}, {"tool_call": "Read"}, {"agent": "G2. ", "id": "g"}]
    result = graded(2, steps, [agent("G1. "), agent("G2. ")])
    assert result["MID-C-03/split"] == {"fail"}
    assert graded(1, steps, [agent("G1. "), agent("G2. ")])["MID-C-03/split"] == {"warn"}


def test_look_alike_ids_merged_is_opacity_failure() -> None:
    steps = [{"agent": "Low. ", "id": "msg-a1"}, {"thought": "Hm. ", "id": "t"},
             {"agent": "Up. ", "id": "MSG-A1"}]
    shown = [agent("Low. Up. "), {"role": "thought", "text": "Hm. "}]
    result = graded(1, steps, shown)
    assert result["MID-C-02/merged"] == {"fail"} and "MID-C-03/merged" not in fails(result)


def test_messages_sorted_by_id_is_opacity_failure() -> None:
    steps = [{"agent": "Two. ", "id": "m2"}, {"agent": "Ten. ", "id": "m10"},
             {"agent": "One. ", "id": "m1"}]
    assert not fails(graded(2, steps, [agent("Two. "), agent("Ten. "), agent("One. ")]))
    result = graded(2, steps, [agent("One. "), agent("Ten. "), agent("Two. ")])
    assert result["MID-C-02/order"] == {"fail"}


def test_null_and_omitted_ids_must_render_alike() -> None:
    steps = [{"agent": "Z1. "}, {"agent": "Z2. ", "id": None}, {"agent": "Z3. "}]
    assert not fails(graded(1, steps, [agent("Z1. Z2. Z3. ")]))
    result = graded(1, steps, [agent("Z1. "), agent("Z2. "), agent("Z3. ")])
    assert result["MID-C-04"] == {"fail"} and result["MID-S-02/client"] == {"fail"}


def test_empty_string_treated_as_absent_warns() -> None:
    steps = [{"agent": "E1. ", "id": ""}, {"agent": "N1. "}]
    assert graded(1, steps, [agent("E1. N1. ")])["MID-C-06"] == {"warn"}


def test_malformed_v1_id_dropped_warns() -> None:
    steps = [{"agent": "K1. ", "id": 42}, {"agent": "K2. ", "id": "k"}]
    result = graded(1, steps, [agent("K2. ")])
    assert result["MID-C-05"] == {"warn"} and not fails(result)


@pytest.mark.parametrize("steps, right", [
    ([{"agent": "A. ", "id": "u"}, {"agent": "B. ", "id": "u"},
      {"upsert": "agent", "id": "u", "content": ["C. "]}], "C. "),
    ([{"upsert": "agent", "id": "u", "content": ["A. "]}, {"agent": "B. ", "id": "u"}], "A. B. "),
    ([{"upsert": "agent", "id": "u", "content": ["A. "]}, {"agent": "B. ", "id": "u"},
      {"upsert": "agent", "id": "u", "content": ["C. "]}, {"agent": "D. ", "id": "u"}], "C. D. "),
])
def test_v2_update_and_chunk_vectors(steps: list[dict[str, Any]], right: str) -> None:
    assert not fails(graded(2, steps, [agent(right)]))
    every = "".join(s.get("agent", "") or "".join(s.get("content") or []) for s in steps)
    wrong = every if every != right else right.split()[-1] + " "  # appended, or content lost
    assert "MID-V2-03" in fails(graded(2, steps, [agent(wrong)]))


def test_v2_clear_and_malformed_content() -> None:
    cleared = [{"upsert": "agent", "id": "u", "content": ["A. "]},
               {"upsert": "agent", "id": "u", "content": None}]
    assert not fails(graded(2, cleared, []))
    assert fails(graded(2, cleared, [agent("A. ")])) == {"MID-V2-02/client"}
    bad = [{"upsert": "agent", "id": "u", "content": ["A. "]},
           {"upsert": "agent", "id": "u", "content": 42}]
    assert not fails(graded(2, bad, [agent("A. ")]))
    assert graded(2, bad, [])["MID-V2-08"] == {"warn"}


def test_v2_chunk_without_id_attached_fails_shown_alone_warns() -> None:
    steps = [{"agent": "R1. ", "id": "r"}, {"agent": "S. "}, {"agent": "R2. ", "id": "r"}]
    assert not fails(graded(2, steps, [agent("R1. R2. ")]))
    assert graded(2, steps, [agent("R1. S. R2. ")])["MID-V2-07"] == {"fail"}
    alone = graded(2, steps, [agent("R1. R2. "), agent("S. ")])
    assert alone["MID-V2-07/shown-alone"] == {"warn"} and alone["MID-V2-07"] == {"pass"}


def test_chunk_meta_must_not_patch_the_message() -> None:
    steps = [{"upsert": "agent", "id": "u", "content": ["M. "], "meta": {"x": 1}},
             {"agent": "N. ", "id": "u", "meta": {"c": 2}}]
    ok = [{"role": "agent", "text": "M. N. ", "meta": {"x": 1}}]
    assert not fails(graded(2, steps, ok))
    bad = [{"role": "agent", "text": "M. N. ", "meta": {"c": 2}}]
    assert graded(2, steps, bad)["MID-V2-04"] == {"fail"}


SAME = ("Same one. ", "Same two. ", "Same three. ")
IDENTICAL = [{"agent": t, "id": "a-1"} for t in SAME] + [{"agent": t, "id": "a-2"} for t in SAME]


@pytest.mark.parametrize("protocol", [1, 2])
def test_two_messages_with_identical_text_are_counted_not_taken_as_one(protocol: int) -> None:
    """Catalogue K.6: distinct IDs, equal text. Two shown pass; one shown (a client that
    dedups by content) lost a message; three shown duplicated one; one line holding both
    is a merge; the shown copies' chunks are each checked for order."""
    two = [agent(*SAME), agent(*SAME)]
    assert not fails(graded(protocol, IDENTICAL, two))
    assert graded(protocol, IDENTICAL, two)["MID-C-03/content"] == {"pass"}
    deduped = graded(protocol, IDENTICAL, [agent(*SAME)])
    assert fails(deduped) == {"MID-C-03/content"}
    three = graded(protocol, IDENTICAL, [agent(*SAME)] * 3)
    assert fails(three) == {"MID-C-03/content"}
    (dup,) = findings(protocol, IDENTICAL, [agent(*SAME)] * 3)  # one finding, not one per text
    assert "'Same one. ' (and 2 more of their texts), sent in 2 messages" in dup.message
    merged = graded(protocol, IDENTICAL, [agent(*SAME, *SAME)])
    assert merged["MID-C-03/merged"] == ({"warn"} if protocol == 1 else {"fail"})
    assert "fail" not in merged["MID-C-03/content"]
    shuffled = graded(protocol, IDENTICAL, [agent(*SAME), agent(SAME[1], SAME[0], SAME[2])])
    assert fails(shuffled) == {"MID-C-03/content"}


def test_identical_text_without_ids_is_ambiguous_and_not_lost() -> None:
    """v1 ID-less chunks: two messages (split by a tool call) with equal text may be one
    restated message (MID-A-10, the agent's warning); a client that shows one copy is not
    faulted, one that shows both passes, a third copy is still a duplicate."""
    steps = ([{"agent": t} for t in SAME] + [{"tool_call": "Read a file"}]
             + [{"agent": t} for t in SAME])
    assert not fails(graded(1, steps, [agent(*SAME), agent(*SAME)]))
    one = graded(1, steps, [agent(*SAME)])
    assert not fails(one) and one["MID-C-03/content"] == {"pass"}
    assert fails(graded(1, steps, [agent(*SAME)] * 3)) == {"MID-C-03/content"}


def test_a_crash_is_one_fault_naming_the_rules_the_stream_tests() -> None:
    steps = [{"agent": "Z1. ", "id": None}]
    t = Transcript({"role": "client", "protocol": 1})
    t.add(0, "agent", "stdout", json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": updates_of(steps, 1)[0]}}).encode())
    t.add(0, "harness", "harness", event="observed",
          data={"protocol": 1, "shown": [], "exited": True, "why": "the client exited"})
    result = {f.requirement: f.outcome.value for f in grade(t.entries, protocol=1, role="client")}
    assert result["MID-C-08/crash"] == "fail"
    [crash] = [f for f in grade(t.entries, protocol=1, role="client")
               if f.requirement == "MID-C-08/crash"]
    assert "MID-C-04, MID-S-02/client" in crash.message  # what the stream tested
    assert [r for r, o in result.items() if o == "fail"] == ["MID-C-08/crash"]  # once


# --------------------------------------------------------------------------
# The reference client agrees with the reference reducer on drawn streams
# --------------------------------------------------------------------------


def reference_shows(protocol: int, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[Any] = []
    client = ReferenceClient(sent.append, max_protocol=protocol)
    client.start()
    client.receive({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": protocol}})
    client.receive({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}})
    client.prompt(PROMPT)
    for u in updates_of(steps, protocol):
        # through JSON text, as on the wire
        client.receive(json.loads(json.dumps({"jsonrpc": "2.0", "method": "session/update",
                                              "params": {"sessionId": "s", "update": u}})))
    return client.shown()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_reference_client_matches_the_reducer(data: st.DataObject) -> None:
    protocol = data.draw(st.sampled_from([1, 2]))
    stream = data.draw(strat.chunk_streams(protocol=protocol, kinds=("user", "agent", "thought")))
    assert not fails(graded(protocol, stream, reference_shows(protocol, stream)))


@settings(max_examples=30, deadline=None)
@given(strat.mutated_chunk_streams(strat.chunk_streams(protocol=1)))
def test_reference_client_survives_mutated_v1_streams(stream: list[dict[str, Any]]) -> None:
    assert not fails(graded(1, stream, reference_shows(1, stream)))


@given(strat.chunk_streams(protocol=2, max_messages=4))
@settings(max_examples=30, deadline=None)
def test_drawn_streams_are_valid(stream: list[dict[str, Any]]) -> None:
    texts = [t for s in stream for t in ([s[k] for k in ("agent", "thought", "user") if k in s]
                                         + list(s.get("content") or []))]
    assert len(texts) == len(set(texts))  # every text recognisable
    keys = {(k, s.get("id", s.get("id_repeat") and "x" * s["id_repeat"]["times"]))
            for s in stream for k in ("agent", "thought", "user") if k in s}
    assert keys


@pytest.mark.parametrize("build", [
    lambda: strat.chunk_streams(protocol=3),
    lambda: strat.chunk_streams(protocol=1, upserts=True),
    lambda: strat.chunk_streams(min_messages=0),
    lambda: strat.chunk_streams(kinds=("assistant",)),
    lambda: strat.message_ids(attacks="yes"),
    lambda: strat.mutated_chunk_streams(strat.chunk_streams(), mutations=("nope",)),
])
def test_strategy_options_are_validated_eagerly(build: Any) -> None:
    with pytest.raises(InvalidArgument):
        build()


def test_example_streams_are_deterministic() -> None:
    a = strat.example_streams(protocol=2, seed=7, text_prefix="p-")
    assert a == strat.example_streams(protocol=2, seed=7, text_prefix="p-")
    assert a != strat.example_streams(protocol=2, seed=8, text_prefix="p-")


def test_a_rule_no_observation_reached_says_so_not_no_profile() -> None:
    """With the screen observed, a rule the stream never reached is 'not testable' because
    the traffic did not reach it; 'no profile' is said only when nothing was observed."""
    t = Transcript({"role": "client", "protocol": 1})
    for src, msg in (
            ("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": 1}}),
            ("agent", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}),
            ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
                        "params": {"sessionId": "s", "prompt": [{"type": "text",
                                                                 "text": PROMPT}]}}),
            ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                             "messageId": "m1",
                                             "content": {"type": "text", "text": "Hi."}}}}),
            ("agent", {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}})):
        t.add(0, src, "stdin" if src == "client" else "stdout", json.dumps(msg).encode())
    unobserved = {f.requirement: f for f in grade(list(t.entries), protocol=1, role="client")}
    assert unobserved["MID-C-07"].message.startswith("not testable: no profile")
    t.add(0, "harness", "harness", event="observed",
          data={"protocol": 1, "render": "cumulative",
                "shown": [{"role": "user", "text": PROMPT}, {"role": "agent", "text": "Hi."}]})
    observed = {f.requirement: f for f in grade(list(t.entries), protocol=1, role="client")}
    assert observed["MID-C-03/merged"].outcome.value == "pass"
    c07 = observed["MID-C-07"]  # no reload was played
    assert c07.outcome.value == "not_applicable" and c07.reason is not None
    assert c07.reason.value == "not_testable" and "no profile" not in c07.message
    assert "screen was observed" in c07.message
