"""Checkers on small hand-written transcripts: the cases a live agent rarely shows."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import text, transcript, update

from conformance.checks import Options, grade
from conformance.transcript import Transcript


def v2_turn(echo: list[tuple[str, dict[str, Any]]]) -> Transcript:
    return transcript(2, [
        ("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": 2}}),
        ("agent", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 2}}),
        ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}),
        ("agent", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}),
        ("client", {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                    "params": {"sessionId": "s", "prompt": [text("Hello")]}}),
        ("agent", {"jsonrpc": "2.0", "id": 2, "result": {"messageId": "u1"}}),
        *echo,
        update("agent_message_chunk", "a1", content=text("Hi")),
        ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "idle",
                                         "stopReason": "end_turn"}}}),
    ])


@pytest.mark.parametrize("echo,warned", [
    ([update("user_message_chunk", "u1", content=text("Hel")),
      update("user_message_chunk", "u1", content=text("lo"))], False),
    ([update("user_message", "u1", content=[text("Hello")])], False),
    ([update("user_message", "u1", content=[text("Bye")]),
      update("user_message", "u1", content=[text("Hello")])], False),
    ([update("user_message_chunk", "u1", content=text("Hel")),
      update("user_message_chunk", "u1", content=text("p"))], True),
])
def test_v2_echo_content_is_the_reduced_message(echo: list[Any], warned: bool) -> None:
    findings = grade(v2_turn(echo).entries, protocol=2, options=Options(),
                     select=["MID-V2-05/echo-content"])
    outcomes = {f.outcome.value for f in findings}
    assert ("warn" in outcomes) is warned, findings
    assert outcomes <= {"warn", "pass"}


def _prompt(rid: int, words: str) -> tuple[str, dict[str, Any]]:
    return ("client", {"jsonrpc": "2.0", "id": rid, "method": "session/prompt",
                       "params": {"sessionId": "s", "prompt": [text(words)]}})


def _state(state: str, **rest: Any) -> tuple[str, dict[str, Any]]:
    return ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": "state_update", "state": state, **rest}}})


def _v2_turn(rid: int, words: str, user: str, agent: str | None) -> list[Any]:
    lines = [_prompt(rid, words), ("agent", {"jsonrpc": "2.0", "id": rid, "result": {}}),
             update("user_message", user, content=[text(words)])]
    if agent is not None:
        lines.append(update("agent_message_chunk", agent, content=text(f"re: {words}")))
    return [*lines, _state("idle", stopReason="end_turn" if agent else "cancelled")]


def _v1_turn(rid: int, words: str, user: str, agent: str | None) -> list[Any]:
    lines = [_prompt(rid, words), update("user_message_chunk", user, content=text(words))]
    if agent is not None:
        lines.append(update("agent_message_chunk", agent, content=text(f"re: {words}")))
    stop = "end_turn" if agent else "cancelled"
    return [*lines, ("agent", {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop}})]


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_turn_with_only_its_echo_keeps_the_replay_aligned(protocol: int) -> None:
    """Live: a turn cancelled before any output (its echo only), then two turns with the
    same prompt. The replay repeats every ID. The replayed turns must line up with the
    live ones: a turn with only a user message is a turn of its own, so the second
    'Again' is not compared with the first (which would read as a replayed ID taken from
    a different live message)."""
    turn = _v2_turn if protocol >= 2 else _v1_turn
    live = [("u0", None), ("u1", "a1"), ("u2", "a2")]
    words = ["Stop", "Again", "Again"]
    lines: list[Any] = [
        ("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": protocol}}),
        ("agent", {"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": protocol,
            "agentCapabilities": {"loadSession": True}, "capabilities": {"session": {}}}}),
        ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}),
        ("agent", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}),
    ]
    for i, ((user, agent), w) in enumerate(zip(live, words, strict=False)):
        lines += turn(2 + i, w, user, agent)
    if protocol >= 2:
        lines.append(("client", {"jsonrpc": "2.0", "id": 9, "method": "session/resume",
                                 "params": {"sessionId": "s", "replayFrom": {"type": "start"}}}))
        for (user, agent), w in zip(live, words, strict=False):
            lines.append(update("user_message", user, content=[text(w)]))
            if agent:
                lines.append(update("agent_message", agent, content=[text(f"re: {w}")]))
    else:
        lines.append(("client", {"jsonrpc": "2.0", "id": 9, "method": "session/load",
                                 "params": {"sessionId": "s"}}))
        for (user, agent), w in zip(live, words, strict=False):
            lines.append(update("user_message_chunk", user, content=text(w)))
            if agent:
                lines.append(update("agent_message_chunk", agent, content=text(f"re: {w}")))
    lines.append(("agent", {"jsonrpc": "2.0", "id": 9, "result": {}}))
    findings = grade(transcript(protocol, lines).entries, protocol=protocol, options=Options(),
                     select=["MID-A-08", "MID-A-03/replay-crosscheck"])
    by_rule = {f.requirement: f for f in findings}
    assert by_rule["MID-A-08/collides-other-epoch"].outcome.value == "pass", findings
    assert by_rule["MID-A-03/replay-crosscheck"].outcome.value == "pass", findings
    stability = by_rule["MID-A-08/stability"]
    assert stability.outcome.value == "info" and "stable" in stability.message, stability


def test_user_chunks_without_id_one_fault_per_session_counted() -> None:
    """Two v1 sessions whose agent uses IDs; 24 echo chunks without an ID, the two
    sessions taking turns. Each session is one fault: its first eight chunks are the
    evidence and all twelve are counted, exactly as if every one had been kept."""
    lines: list[Any] = [
        ("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": 1}}),
        ("agent", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}),
    ]
    for rid, sid in ((1, "s"), (2, "t")):
        lines += [("client", {"jsonrpc": "2.0", "id": rid, "method": "session/new",
                              "params": {}}),
                  ("agent", {"jsonrpc": "2.0", "id": rid, "result": {"sessionId": sid}})]
    for rid, sid in ((3, "s"), (4, "t")):
        lines.append(("client", {"jsonrpc": "2.0", "id": rid, "method": "session/prompt",
                                 "params": {"sessionId": sid, "prompt": [text("Hi")]}}))
    echoes = []
    for i in range(24):
        sid = "st"[i % 2]
        echoes.append(len(lines))
        lines.append(("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": sid, "update": {"sessionUpdate": "user_message_chunk",
                                         "content": text(f"e{i} ")}}}))
    for rid, sid in ((3, "s"), (4, "t")):
        lines += [("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk",
                                         "messageId": f"a-{sid}", "content": text("Yo")}}}),
                  ("agent", {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})]
    findings = grade(transcript(1, lines).entries, protocol=1, options=Options(),
                     select=["MID-A-06/user-chunk-without-id"])
    assert [f.entries for f in findings] == [tuple(echoes[0::2][:8]),
                                             tuple(echoes[1::2][:8])], findings
    assert [f.occurrences for f in findings] == [12, 12], findings
    assert all(f.outcome.value == "warn" for f in findings), findings


@pytest.mark.parametrize("before", [2, 3, 4, 5])
@pytest.mark.parametrize("repeats", [True, False])
def test_id_per_chunk_after_a_message_of_any_length(before: int, repeats: bool) -> None:
    """A message of ``before`` chunks (two or more), a one-chunk message, then four fragments of one text
    each under a new ID: MID-A-03/id-per-chunk, whatever the first message's length (a
    message of three or more chunks used to start the fragments' run, which hid them)."""
    lines = [("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                         "params": {"protocolVersion": 1}}),
             ("agent", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}})]
    lines += [update("agent_message_chunk", "whole", content=text(f"Part {n}. "))
              for n in range(before)]
    lines += [update("agent_message_chunk", "single", content=text("Done. "))]
    lines += [update("agent_message_chunk", f"frag-{n}", content=text(word))
              for n, word in enumerate(["The ", "weather ", "is ", "fine. "])]
    findings = grade(transcript(1, lines).entries, protocol=1, options=Options(),
                     select=["MID-A-03/id-per-chunk"], repeats=repeats)
    assert [f.outcome.value for f in findings] == ["warn"], [f.message for f in findings]
    assert findings[0].message.startswith("5 consecutive agent chunks")


@pytest.mark.parametrize("answer,faults", [
    ({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}, 0),
    ({"jsonrpc": "2.0", "id": None, "result": {}}, 1),  # a result for no request: a fault
    ({"jsonrpc": "2.0", "id": 99, "error": {"code": -32601, "message": "no"}}, 1),
])
def test_a_refusal_with_a_null_id_is_no_second_fault(answer: dict[str, Any], faults: int) -> None:
    """A client that refuses a batch it cannot read answers, as JSON-RPC says, with an
    error whose id is null: the batch's own rule grades it, MID-C-08/answers does not."""
    t = transcript(2, [
        ("agent", {"jsonrpc": "2.0", "id": 7, "method": "session/request_permission",
                   "params": {"sessionId": "s", "options": []}}),
        ("client", answer),
        ("client", {"jsonrpc": "2.0", "id": 7, "result": {"outcome": {"outcome": "cancelled"}}}),
    ])
    rows = grade(t.entries, protocol=2, options=Options(), select=["MID-C-08/answers"],
                 role="client")
    assert sum(r.outcome.value == "fail" for r in rows) == faults, rows


@pytest.mark.parametrize("key,names", [
    ("messageId", True), ("message_id", True), ("messageID", True), ("userMessageId", True),
    ("user_message_id", True), ("message-id", True), ("MESSAGEID", True),
    ("traceId", False), ("message", False), ("messageIdx", False),
])
def test_meta_keys_that_name_a_message_id(key: str, names: bool) -> None:
    from conformance.model import names_message_id

    assert names_message_id(key) is names


def _v1_handshake(answered: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": 1}}),
            ("agent", {"jsonrpc": "2.0", "id": 0, **answered})]


@pytest.mark.parametrize("answered,after,outcome", [
    ({"result": {"protocolVersion": 1}}, [], "pass"),
    ({"error": {"code": -32602, "message": "only 2"}}, [], "fail"),
    ({"result": {"protocolVersion": 1}}, [
        ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
                    "params": {"sessionId": "s", "prompt": [text("Hi")]}}),
        ("agent", {"jsonrpc": "2.0", "id": 1, "result": {"messageId": "u1"}}),
        ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "running"}}}),
    ], "fail"),
])
def test_agent_negotiation_is_graded_from_the_wire(answered: dict[str, Any], after: list[Any],
                                                   outcome: str) -> None:
    t = transcript(1, _v1_handshake(answered) + after)
    findings = grade(t.entries, protocol=1, options=Options(), select=["TARGET/negotiation"])
    assert [f.outcome.value for f in findings] == [outcome], findings


def test_partial_use_across_kinds_warns_once_per_kind() -> None:
    prompt = ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
                         "params": {"sessionId": "s", "prompt": [text("Hi")]}})
    chunk = ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                     "content": text("Hello")}}})
    t = transcript(1, [prompt, update("user_message_chunk", "u1", content=text("Hi")), chunk,
                       chunk, ("agent", {"jsonrpc": "2.0", "id": 1,
                                         "result": {"stopReason": "end_turn"}})])
    findings = grade(t.entries, protocol=1, options=Options(), select=["MID-A-05/partial-kinds"])
    assert [(f.outcome.value, f.occurrences) for f in findings] == [("warn", 1)], findings


def _legacy_turn(protocol: int, echo_id: str, response: dict[str, Any],
                 echo_meta: dict[str, Any] | None = None) -> Transcript:
    echo = {"content": text("Hi there")} if protocol < 2 else {"content": [text("Hi there")]}
    if echo_meta is not None:
        echo["_meta"] = echo_meta
    kind = "user_message_chunk" if protocol < 2 else "user_message"
    end = ([("agent", {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn",
                                                             **response}})]
           if protocol < 2 else [_state("idle", stopReason="end_turn")])
    accept = [] if protocol < 2 else [("agent", {"jsonrpc": "2.0", "id": 2,
                                                 "result": {"messageId": echo_id, **response}})]
    return transcript(protocol, [
        ("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": protocol}}),
        ("agent", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": protocol}}),
        ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}),
        ("agent", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}),
        ("client", {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {
            "sessionId": "s", "prompt": [text("Hi there")], "messageId": "client-123"}}),
        *accept, update(kind, echo_id, **echo),
        update("agent_message_chunk", "a1", content=text("Hello")), *end])


@pytest.mark.parametrize("protocol", [1, 2])
@pytest.mark.parametrize("echo_id,response,echo_meta,where", [
    ("u1", {}, None, None),
    ("client-123", {}, None, "the user echo"),
    ("u1", {"userMessageId": "client-123"}, None, "the prompt response's userMessageId"),
    ("u1", {"_meta": {"userMessageId": "client-123"}}, None,
     "the prompt response's _meta.userMessageId"),
    ("u1", {}, {"messageId": "client-123"}, "the user echo's _meta.messageId"),
    ("u1", {"_meta": {"traceId": "client-123"}}, None, None),  # not a message ID key
])
def test_adoption_of_a_client_id_is_seen_in_any_shape(
        protocol: int, echo_id: str, response: dict[str, Any],
        echo_meta: dict[str, Any] | None, where: str | None) -> None:
    findings = grade(_legacy_turn(protocol, echo_id, response, echo_meta).entries,
                     protocol=protocol, options=Options(),
                     select=["MID-A-01/adopted-client-id"])
    warned = [f for f in findings if f.outcome.value == "warn"]
    if where is None:
        assert not warned and {f.outcome.value for f in findings} == {"pass"}, findings
    else:
        assert len(warned) == 1, findings
        assert warned[0].message.startswith(f"{where} adopts the client-supplied ID")


def test_a_v1_response_messageid_that_adopts_the_client_id_warns() -> None:
    findings = grade(_legacy_turn(1, "u1", {"messageId": "client-123"}).entries, protocol=1,
                     options=Options(), select=["MID-A-01/adopted-client-id"])
    assert [f.message.split(" adopts")[0] for f in findings if f.outcome.value == "warn"] == [
        "the prompt response's messageId"]
