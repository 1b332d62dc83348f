"""The v2 draft rules of catalogue Appendix I on small hand-written transcripts: replayed
user IDs (MID-V2-11), replay primers (MID-V2-12), inter-session messages (the 'session'
kind), prompts in flight (MID-V2-05) and the profile that predates them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, cli_report
from helpers import text, transcript, update

from conformance.agent.driver import NO_SESSION_CAPABILITY
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


# -- identical prompts (issue 27, item 2): the prompt responses' IDs -------------------

def _same_prompt_turn(rid: int, response_id: str, echo_id: str, agent: str) -> list[Line]:
    return [_prompt(rid, "Again"), _accepted(rid, response_id),
            update("user_message", echo_id, content=[text("Again")]),
            update("agent_message_chunk", agent, content=text("ok")), _idle()]


@pytest.mark.parametrize("second_response,outcome", [("u1", "fail"), ("u2", "pass")])
def test_two_prompt_responses_that_reuse_one_id_are_user_message_reuse(
        second_response: str, outcome: str) -> None:
    """The same prompt twice in one v2 session. The echoes carry two IDs (u1, u2), so only
    the prompt responses can show the reuse: the second response naming u1 again is
    MID-A-02/user-message-reuse (Uniqueness.on_accepted), its evidence the two responses;
    two distinct response IDs pass."""
    lines = (_init() + _same_prompt_turn(2, "u1", "u1", "a1")
             + _same_prompt_turn(3, second_response, "u2", "a2"))
    first_response, second = 5, 10  # the seqs of the two session/prompt responses
    assert transcript(2, lines).entries[second].msg == {
        "jsonrpc": "2.0", "id": 3, "result": {"messageId": second_response}}
    rows = list(grade(transcript(2, lines).entries, protocol=2, options=Options(),
                      select=["MID-A-02/user-message-reuse"]))
    assert [f.outcome.value for f in rows] == [outcome], rows
    if outcome == "fail":
        found = rows[0]
        assert found.entries == (first_response, second), found
        assert "response of turn 2 names ID 'u1'" in found.message, found
        assert found.actual == "u1", found


# -- inter-session messages (issue 27, item 3): the "session" kind ---------------------

def _session_chunk(mid: str | None, words: str) -> Line:
    chunk: dict[str, Any] = {"sessionUpdate": "session_message_chunk", "content": text(words)}
    if mid is not None:
        chunk["messageId"] = mid
    return ("agent", {"jsonrpc": "2.0", "method": "session/update",
                      "params": {"sessionId": "s", "update": chunk}})


WORDS = ["The ", "other ", "session ", "says hi. "]
SESSION_CHUNKS = {
    "one-id": [_session_chunk("sm1", w) for w in WORDS],
    "changing-ids": [_session_chunk(f"sm{i}", w) for i, w in enumerate(WORDS)],
    "missing-id": [_session_chunk("sm1", "Hi "), _session_chunk(None, "there "),
                   _session_chunk("sm1", "you.")],
}
# Under acp-sdk-2.4.0: (MID-V2-01, MID-A-03/id-per-chunk, MID-A-03/gap)
SESSION_GRADES = {
    "one-id": ("pass", "pass", "pass"),
    "changing-ids": ("pass", "warn", "pass"),
    "missing-id": ("fail", "pass", "warn"),
}


@pytest.mark.parametrize("shape", sorted(SESSION_CHUNKS))
def test_session_message_chunks_are_graded_as_messages(shape: str) -> None:
    """session_message_chunks in a v2 turn under acp-sdk-2.4.0: one message of four chunks
    whose ID changes on every chunk is MID-A-03/id-per-chunk (a 'session' run), a chunk
    without an ID is MID-V2-01 (and a MID-A-03 gap between two chunks of one ID); whatever
    they carry, MID-S-04 never grades them (their messageId is no stray field)."""
    lines = _init() + [_prompt(2, "Hi"), _accepted(2, "u1"),
                       update("user_message", "u1", content=[text("Hi")]),
                       *SESSION_CHUNKS[shape], _idle()]
    rows = _grade(lines, ["MID-S-04", "MID-V2-01", "MID-A-03"])
    v2_01, per_chunk, gap = SESSION_GRADES[shape]
    assert rows["MID-V2-01"].outcome.value == v2_01, rows["MID-V2-01"]
    assert rows["MID-A-03/id-per-chunk"].outcome.value == per_chunk, rows
    assert rows["MID-A-03/gap"].outcome.value == gap, rows
    assert rows["MID-S-04/non-message-kind"].outcome.value == "pass", rows
    if per_chunk == "warn":
        assert rows["MID-A-03/id-per-chunk"].message.startswith(
            "4 consecutive session chunks"), rows["MID-A-03/id-per-chunk"]
    if v2_01 == "fail":
        missing = rows["MID-V2-01"]
        assert lines[missing.entries[0]] == SESSION_CHUNKS[shape][1], missing
    assert all(not r.requirement.startswith("MID-S-04") or r.outcome.value == "pass"
               for r in rows.values()), rows
    # the older profile has no "session" kind: the same chunks are unknown update kinds,
    # their messageId a stray field (MID-S-04), and no message rule grades them
    old = _grade(lines, ["MID-S-04", "MID-V2-01", "MID-A-03"], profile=REPO)
    assert old["MID-S-04/non-message-kind"].outcome.value == "warn", old
    for rule in ("MID-V2-01", "MID-A-03/id-per-chunk", "MID-A-03/gap"):
        assert old[rule].outcome.value == "not_applicable", old[rule]


# -- the session capability (issue 27, item 4), through the real CLI -------------------

def _agent_fixture(name: str, *args: str) -> str:
    return " ".join([sys.executable, str(REPO_ROOT / "fixtures" / "agents" / f"{name}.py"),
                     *args])


def test_an_agent_without_the_session_capability_is_not_applicable(tmp_path: Path) -> None:
    """A v2 agent that does not advertise capabilities.session made no session promise:
    every session case and every row is not_applicable (no_capability), the console says
    why in one line and counts nothing, and the run passes (no abort, no 'not tested')."""
    rc, report, out = cli_report("--agent", _agent_fixture("v2_no_session_capability"),
                                 "--protocol", "2", "--timeout", "5", tmp_path=tmp_path)
    assert rc == 0, out
    assert report["cases"], out
    for case in report["cases"]:
        assert (case["outcome"], case.get("reason")) == ("not_applicable", "no_capability"), case
        assert case.get("note") == NO_SESSION_CAPABILITY, case
    assert report["results"], out
    assert {(r["outcome"], r.get("reason")) for r in report["results"]} == {
        ("not_applicable", "no_capability")}
    assert report["summary"]["verdict"] == "pass" and report["summary"]["pass"] == 0
    said = [line for line in out.splitlines() if NO_SESSION_CAPABILITY in line]
    assert said == [f"summary: v2 not applicable: {NO_SESSION_CAPABILITY}"], out
    assert "aborted" not in out and " pass," not in out and "not tested" not in out, out
    assert "verdict: PASS" in out.splitlines(), out


@pytest.mark.parametrize("method", ["session/new", "session/prompt"])
def test_an_agent_that_advertises_sessions_and_refuses_one_is_no_capability_gap(
        tmp_path: Path, method: str) -> None:
    """The same agent but with capabilities.session, refusing session/new (or prompt) with a
    JSON-RPC error: it broke a promise it made, so the run fails as a refused request does
    (every case not run, v2 unfinished, exit 1), and nothing says no_capability."""
    refuses = REPO_ROOT / "fixtures" / "harness" / "refuses_request.py"
    rc, report, out = cli_report("--agent", f"{sys.executable} {refuses} --refuse {method}",
                                 "--protocol", "2", "--timeout", "5", tmp_path=tmp_path)
    assert rc == 1, out
    assert report["summary"]["verdict"] == "fail", report["summary"]
    assert report["cases"], out
    for case in report["cases"]:
        assert (case["outcome"], case.get("reason")) == ("not_applicable", "not_run"), case
        assert f"the agent refused {method} (error -32603" in case.get("note", ""), case
    reasons = {r.get("reason") for r in report["results"]}
    assert "no_capability" not in reasons and reasons == {"not_run"}, reasons
    assert NO_SESSION_CAPABILITY not in out and "v2 not applicable" not in out, out
    assert "summary: v2 not tested: no v2 case ran to its end" in out, out
    assert "verdict: FAIL" in out.splitlines(), out
