"""The v2 draft rules of catalogue Appendix I on small hand-written transcripts: replayed
user IDs (MID-V2-11), replay primers (MID-V2-12), inter-session messages (the 'session'
kind), prompts in flight (MID-V2-05) and the profile that predates them."""

from __future__ import annotations

from typing import Any

import pytest
from test_checker_units import text, transcript, update

from conformance.checks import Options, grade
from conformance.checks.base import Options as BaseOptions
from conformance.profiles import get as get_profile
from conformance.results import Finding

Line = tuple[str, dict[str, Any]]
REPO = "acp-repo-2026-08-22"


def _init() -> list[Line]:
    return [
        ("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": 2}}),
        ("agent", {"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": 2, "capabilities": {"session": {}}}}),
        ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}),
        ("agent", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}),
    ]


def _prompt(rid: int, words: str) -> Line:
    return ("client", {"jsonrpc": "2.0", "id": rid, "method": "session/prompt",
                       "params": {"sessionId": "s", "prompt": [text(words)]}})


def _accepted(rid: int, user: str) -> Line:
    return ("agent", {"jsonrpc": "2.0", "id": rid, "result": {"messageId": user}})


def _idle() -> Line:
    return ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "idle",
                                     "stopReason": "end_turn"}}})


def _turn(rid: int, words: str, user: str, agent: str) -> list[Line]:
    return [_prompt(rid, words), _accepted(rid, user),
            update("user_message", user, content=[text(words)]),
            update("agent_message_chunk", agent, content=text(f"re: {words}")), _idle()]


def _resume(rid: int, replay: list[Line]) -> list[Line]:
    return [("client", {"jsonrpc": "2.0", "id": rid, "method": "session/resume",
                        "params": {"sessionId": "s", "replayFrom": {"type": "start"}}}),
            *replay, ("agent", {"jsonrpc": "2.0", "id": rid, "result": {}})]


def _grade(lines: list[Line], select: list[str], profile: str | None = None) -> dict[str, Finding]:
    options = Options() if profile is None else BaseOptions(profile=get_profile(profile))
    found = grade(transcript(2, lines).entries, protocol=2, options=options, select=select)
    return {f.requirement: f for f in found}


LIVE = _turn(2, "Again", "u1", "a1") + _turn(3, "Other", "u2", "a2")


@pytest.mark.parametrize("replayed,outcome", [
    (["u1", "u2"], "pass"),
    (["u9", "u2"], "fail"),  # a fresh ID for a retained user message
])
def test_a_replayed_user_message_keeps_its_response_id(replayed: list[str], outcome: str) -> None:
    replay = [update("user_message", replayed[0], content=[text("Again")]),
              update("agent_message", "a1", content=[text("re: Again")]),
              update("user_message", replayed[1], content=[text("Other")])]
    rows = _grade(_init() + LIVE + _resume(9, replay), ["MID-V2-11"])
    assert rows["MID-V2-11/kept-id"].outcome.value == outcome, rows
    if outcome == "fail":  # the live response, the live echo, the replayed entry
        assert len(rows["MID-V2-11/kept-id"].entries) == 3
    assert rows["MID-V2-11/not-retained"].outcome.value == "pass"


def test_identical_prompts_replayed_once_are_graded_only_by_order() -> None:
    live = _turn(2, "Again", "u1", "a1") + _turn(3, "Again", "u2", "a2")
    kept_second = [update("user_message", "u2", content=[text("Again")])]
    rows = _grade(_init() + live + _resume(9, kept_second), ["MID-V2-11"])
    assert rows["MID-V2-11/kept-id"].outcome.value == "pass", rows
    assert rows["MID-V2-11/not-retained"].outcome.value == "info"  # one of them is absent


def test_a_prompt_absent_from_replay_is_recorded_not_failed() -> None:
    replay = [update("user_message", "u2", content=[text("Other")])]
    rows = _grade(_init() + LIVE + _resume(9, replay), ["MID-V2-11"])
    assert rows["MID-V2-11/not-retained"].outcome.value == "info"
    assert rows["MID-V2-11/kept-id"].outcome.value == "pass"


@pytest.mark.parametrize("replay,outcome", [
    ([update("agent_message", "a1", content=[]),
      update("agent_message_chunk", "a1", content=text("re: Again"))], "pass"),
    ([update("agent_message", "a1", content=[text("re: ")]),  # full content, then chunks
      update("agent_message_chunk", "a1", content=text("Again"))], "pass"),
    ([update("agent_message_chunk", "a1", content=text("re: Again"))], "fail"),
    ([update("agent_message", "a1"),  # an upsert without content changes no content
      update("agent_message_chunk", "a1", content=text("re: Again"))], "fail"),
])
def test_a_chunk_replay_starts_from_an_upsert_of_its_id(replay: list[Line], outcome: str) -> None:
    rows = _grade(_init() + _turn(2, "Again", "u1", "a1") + _resume(9, replay), ["MID-V2-12"])
    assert rows["MID-V2-12"].outcome.value == outcome, rows


def test_the_older_profile_does_not_grade_the_draft_rules() -> None:
    replay = [update("user_message", "u9", content=[text("Again")]),
              update("agent_message_chunk", "a1", content=text("re: Again"))]
    rows = _grade(_init() + _turn(2, "Again", "u1", "a1") + _resume(9, replay),
                  ["MID-V2-11", "MID-V2-12"], profile=REPO)
    for rule in ("MID-V2-11/kept-id", "MID-V2-11/not-retained", "MID-V2-12"):
        assert rows[rule].outcome.value == "not_applicable", rows[rule]
        assert rows[rule].reason is not None and rows[rule].reason.value == "allowed_by_profile"


def _session_turn(**chunk: Any) -> list[Line]:
    return [_prompt(2, "Hi"), _accepted(2, "u1"), update("user_message", "u1", content=[text("Hi")]),
            update("session_message", "sm1", senderMessageId="elsewhere", content=[]),
            ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": "s", "update": {"sessionUpdate": "session_message_chunk",
                                             "content": text("note"), **chunk}}}),
            _idle()]


@pytest.mark.parametrize("profile", [None, REPO])
def test_inter_session_messages_are_a_kind_of_their_own(profile: str | None) -> None:
    rows = _grade(_init() + _session_turn(messageId="sm1"), ["MID-S-04", "MID-V2-01"], profile)
    s04 = rows["MID-S-04/non-message-kind"].outcome.value
    assert s04 == ("pass" if profile is None else "warn"), rows
    missing = _grade(_init() + _session_turn(), ["MID-V2-01"], profile)
    # the older profile: no chunk is a message there, so MID-V2-01 has nothing to grade
    assert missing["MID-V2-01"].outcome.value == (
        "fail" if profile is None else "not_applicable")


def test_an_echo_in_flight_is_paired_by_the_response_id() -> None:
    """The second prompt is sent (and accepted) before the first prompt's echo arrives:
    each echo belongs to the prompt whose response named its ID."""
    lines = _init() + [
        _prompt(2, "Long story"), _accepted(2, "u1"),
        _prompt(3, "Short"), _accepted(3, "u2"),
        update("user_message", "u1", content=[text("Long story")]),
        update("agent_message_chunk", "a1", content=text("Once")), _idle(),
        update("user_message", "u2", content=[text("Short")]),
        update("agent_message_chunk", "a2", content=text("Ok")), _idle()]
    rows = _grade(lines, ["MID-V2-05"])
    for rule in ("MID-V2-05/response-id", "MID-V2-05/echo-content", "MID-V2-05/no-echo",
                 "MID-V2-05/unmatched-echo"):
        assert rows[rule].outcome.value == "pass", rows[rule]


def test_an_accepted_prompt_never_echoed_before_the_end_is_no_echo() -> None:
    lines = _init() + [
        _prompt(2, "Long story"), _accepted(2, "u1"),
        _prompt(3, "Short"), _accepted(3, "u2"),
        update("user_message", "u1", content=[text("Long story")]), _idle()]
    t = transcript(2, lines)
    t.add(0, "harness", "harness", event="exit", data={"returncode": 0})
    found = grade(t.entries, protocol=2, options=Options(), select=["MID-V2-05/no-echo"])
    assert [f.outcome.value for f in found] == ["fail"], found


def test_an_echo_after_an_early_idle_is_paired_with_its_own_prompt() -> None:
    """An agent that reports idle before it echoes the prompt and answers the next prompt at
    once: the first prompt's echo arrives in what looks like the second turn. It is the first
    prompt's echo (by ID), not a wrong echo of the second; the second prompt's echo never
    comes before the transcript ends: that is what is missing."""
    lines = _init() + [
        _prompt(2, "First"), _accepted(2, "u1"), _idle(),
        _prompt(3, "Second"), _accepted(3, "u2"),
        update("user_message", "u1", content=[text("First")]),
        update("agent_message_chunk", "a1", content=text("One")), _idle()]
    rows = _grade(lines, ["MID-V2-05"])
    assert rows["MID-V2-05/response-id"].outcome.value == "pass", rows
    assert rows["MID-V2-05/echo-content"].outcome.value == "pass", rows
    no_echo = rows["MID-V2-05/no-echo"]
    assert no_echo.outcome.value == "fail" and "u2" in str(no_echo.expected or "") + str(
        no_echo.message), no_echo
