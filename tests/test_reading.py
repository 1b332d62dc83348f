"""The transcript's one reading (timeline.Carried): which turn, replay window or request a
message update belongs to is decided once, and every rule grades that reading.

A ``session/resume`` with ``replayFrom`` written while a turn streams races the target's
output: updates the target could have written before it read the request are the turn's
(the benefit of the doubt), never the replay's, and MID-V2-13 records them as info with
the request as evidence. The replay rules (MID-V2-06, MID-V2-12, MID-A-08) and the marker
rule (MID-V2-13) read every update the same way: an update is graded as live by one and as
replay by another never.
"""

from __future__ import annotations

from typing import Any

import pytest
from wire import (
    PREVIEW,
    Line,
    req,
    res,
    resume,
    start,
    text,
    transcript,
    upd,
)

from conformance.checks import Options, grade
from conformance.checks.events import LIVE, REPLAY, MessageEvent
from conformance.checks.timeline import Timeline
from conformance.profiles import get as get_profile

MARKER = upd("replay_complete")
IDLE = upd("state_update", state="idle", stopReason="end_turn")
EVERY = ["MID-V2-13", "MID-V2-12", "MID-V2-11", "MID-V2-06", "MID-A-08", "MID-A-02",
         "MID-A-07", "MID-A-09", "MID-A-10", "MID-A-03"]


def chunk(mid: str, words: str, kind: str = "agent_message_chunk") -> Line:
    return upd(kind, mid, content=text(words))


def whole(kind: str, mid: str, *words: str) -> Line:
    return upd(kind, mid, content=[text(w) for w in words])


# the live turn: a thought, then message "a" streams; the suite's resume arrives after it
STREAMING = start(2) + [
    req(2, "session/prompt", sessionId="s", prompt=[text("Write a story")]),
    res(2, {"messageId": "u2"}), whole("user_message", "u2", "Write a story"),
    upd("state_update", state="running"),
    chunk("t", "Thinking ", "agent_thought_chunk"), chunk("t", "hard.", "agent_thought_chunk"),
    chunk("a", "Here is "), chunk("a", "the first message.")]
# the replay of that history, the first message (and the new one) as whole messages
REPLAY_LINES = [whole("user_message", "u2", "Write a story"),
                whole("agent_thought", "t", "Thinking ", "hard."),
                whole("agent_message", "a", "Here is ", "the first message."),
                whole("agent_message", "b", "The second ", "message ")]
NEW = [chunk("b", "The second "), chunk("b", "message ")]  # the next message of the turn


def found(lines: list[Line], select: list[str], options: Options = PREVIEW) -> list[Any]:
    return grade(transcript(2, lines).entries, protocol=2, options=options, select=select)


def graded(lines: list[Line], select: list[str] = EVERY,
           options: Options = PREVIEW) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in found(lines, select, options):
        out.setdefault(f.outcome.value, set()).add(f.requirement)
    return out


def messages(lines: list[Line]) -> list[MessageEvent]:
    tl = Timeline(2, replay_marker=True)
    return [ev for e in transcript(2, lines).entries for ev in tl.feed(e)
            if isinstance(ev, MessageEvent)]


def test_new_message_chunks_before_the_replay_are_live() -> None:
    """The issue's transcript: two chunks of a new message of the live turn right after the
    resume request, the turn's idle, then the replay: clean, and recorded as info."""
    lines = STREAMING + [resume(5), *NEW, IDLE, *REPLAY_LINES, MARKER, res(5)]
    out = graded(lines)
    assert "fail" not in out and "warn" not in out, out
    assert "MID-V2-13/live-before-replay" in out.get("info", set())
    # the reading: the new message is the live turn's (its epoch and turn), with the
    # request's entry as evidence; the replayed whole messages are the replay
    evs = messages(lines)
    request_seq = len(STREAMING)
    new = [ev for ev in evs if ev.mid == "b" and ev.form == "chunk"]
    assert [(ev.phase, ev.inside, ev.epoch.index, ev.turn) for ev in new] == [
        (LIVE, request_seq, 0, 0)] * 2
    assert all(ev.phase == REPLAY for ev in evs if ev.form == "upsert" and ev.seq > request_seq)
    info = [f for f in found(lines, ["MID-V2-13"]) if f.requirement.endswith("before-replay")]
    assert info and all(request_seq in f.entries for f in info)
    assert all("benefit of the doubt" in f.message for f in info)


def test_the_same_without_the_marker_profile() -> None:
    """Under a profile without replay_complete the response closes the window: the new
    message's chunks are still the live turn's (MID-V2-06 and MID-A-08 read them so)."""
    lines = STREAMING + [resume(5), *NEW, IDLE, *REPLAY_LINES, res(5)]
    for name in ("acp-sdk-2.4.0", "acp-repo-2026-08-22"):
        out = graded(lines, options=Options(profile=get_profile(name)))
        assert "fail" not in out and "warn" not in out, (name, out)


@pytest.mark.parametrize("at", range(0, len(REPLAY_LINES) + 1))
def test_two_rules_share_one_reading(at: int) -> None:
    """Wherever a chunk of a new message comes in the window, MID-V2-13 (which grades it
    when live) and MID-V2-12 (which grades it when replayed) read it the same way: exactly
    one of them sees it."""
    stray = chunk("n", "A new message.")
    window = REPLAY_LINES[:at] + [stray] + REPLAY_LINES[at:]
    lines = STREAMING + [resume(5), *window, MARKER, res(5)]
    ev = next(e for e in messages(lines) if e.mid == "n")
    marker = {f.requirement for f in found(lines, ["MID-V2-13"]) if f.outcome.value != "pass"
              and "live" in f.requirement and f.outcome.value != "not-applicable"}
    primer = {f.requirement for f in found(lines, ["MID-V2-12"]) if f.outcome.value == "fail"}
    if at == 0:  # before the replay begins: the benefit of the doubt, live
        assert ev.phase == LIVE and ev.inside == len(STREAMING)
        assert marker == {"MID-V2-13/live-before-replay"} and not primer
    else:  # after a replayed update: the target has read the request, so it is replay
        assert ev.phase == REPLAY
        assert not marker and primer == {"MID-V2-12"}


def test_a_live_message_chunk_after_the_replay_began_is_one_warn() -> None:
    """A chunk of the message the turn was streaming, after the replay began, is
    live-inside (warn) and nothing else: no rule also reads it as a replayed chunk."""
    lines = STREAMING + [resume(5), *REPLAY_LINES[:2], chunk("a", " And more."),
                         *REPLAY_LINES[2:3], MARKER, res(5)]
    out = graded(lines)
    assert out.get("warn") == {"MID-V2-13/live-inside"} and "fail" not in out, out


def test_the_turn_goes_on_after_the_window_until_its_idle() -> None:
    """After the response the carried turn streams on: its messages, and a new one the
    replay did not show, are live (no late replay); after its idle a replayed ID is late."""
    after = [chunk("b", "goes on."), chunk("c", "A third message.")]
    lines = STREAMING + [resume(5), *NEW, *REPLAY_LINES, MARKER, res(5), *after, IDLE]
    out = graded(lines)
    assert "fail" not in out and "warn" not in out, out
    older = Options(profile=get_profile("acp-sdk-2.4.0"))
    lines = STREAMING + [resume(5), *NEW, *REPLAY_LINES, res(5), *after, IDLE,
                         whole("agent_message", "a", "Here is ", "the first message.")]
    out = graded(lines, ["MID-V2-06"], older)
    assert out.get("fail") == {"MID-V2-06"} or out.get("fail") == {"MID-V2-06/after-response"}, out


def test_a_second_prompt_while_the_carried_turn_streams() -> None:
    """A prompt written after the resume while the carried turn still streams: the turn's
    output before the prompt is accepted, and its idle, are the carried turn's, so the
    new prompt's own response and echo are in its turn (no out-of-turn record)."""
    lines = STREAMING + [resume(5), *REPLAY_LINES[:3], MARKER, res(5),
                         req(6, "session/prompt", sessionId="s", prompt=[text("More")]),
                         chunk("a", " more of it."), chunk("c", "A last message."), IDLE,
                         res(6, {"messageId": "u6"}), whole("user_message", "u6", "More"),
                         chunk("d", "The answer."), IDLE]
    out = graded(lines)
    assert "fail" not in out and "warn" not in out, out
    assert "MID-A-09/out-of-turn" not in out.get("info", set()), out
    evs = {ev.mid: ev for ev in messages(lines) if ev.form == "chunk"}
    assert (evs["c"].epoch.index, evs["c"].turn) == (0, 0)  # the carried turn
    assert (evs["d"].epoch.index, evs["d"].turn) == (1, 0)  # the new prompt's


def v1_turn(rid: int, *lines: Line, cancel: bool = False, stop: str = "end_turn") -> list[Line]:
    out = [req(rid, "session/prompt", sessionId="s", prompt=[text(f"Prompt {rid}")]),
           chunk(f"u{rid}", f"Prompt {rid}", "user_message_chunk"), *lines]
    if cancel:
        return out
    return out + [res(rid, {"stopReason": stop})]


CANCEL = ("client", {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}})


def v1_graded(lines: list[Line], select: list[str]) -> list[Any]:
    return grade(transcript(1, lines).entries, protocol=1, options=Options(), select=select)


@pytest.mark.parametrize("tail", [0, 1, 2])
def test_a_cancelled_turn_tail_decides_no_reuse(tail: int) -> None:
    """v1 cancel-mid-turn with a per-turn counter: the suite cancels at the turn's first
    output, and how much the agent writes before it reads the cancel is the race. An ID
    used first in that tail (after session/cancel) is no prior use, so the rows are the same
    however far the tail goes: the reuse of the thought ID written before the cancel."""
    written = [chunk("m3", "Here is "), chunk("m3", "the reply.")][:tail]
    lines = start(1) + v1_turn(2, chunk("m2", "Thinking", "agent_thought_chunk"),
                               cancel=True) + [CANCEL, *written, res(2, {"stopReason": "cancelled"})]
    lines += v1_turn(3, chunk("m2", "Thinking", "agent_thought_chunk"), chunk("m3", "Hello."))
    faults = sorted(f.message for f in v1_graded(lines, ["MID-A-02"])
                    if f.outcome.value == "fail")
    assert faults == ["thought ID 'm2' of turn 1 reappears in turn 2"], faults


def test_an_id_written_before_the_cancel_is_a_prior_use() -> None:
    """Only the tail gets the benefit of the doubt: the same ID before the cancel fails."""
    lines = start(1) + v1_turn(2, chunk("m3", "Here is "), cancel=True) + [
        CANCEL, res(2, {"stopReason": "cancelled"})] + v1_turn(3, chunk("m3", "Hello."))
    faults = [f.message for f in v1_graded(lines, ["MID-A-02"]) if f.outcome.value == "fail"]
    assert faults == ["agent ID 'm3' of turn 1 reappears in turn 2"], faults


def test_where_the_cancel_falls_in_a_cancelled_turn_moves_no_reuse_row() -> None:
    """The demo's race: the suite cancels after the turn's first output, and whether the
    agent's next message (m3) was written before or after it read the cancel is timing.
    A later turn reusing the cancelled turn's IDs is one row per pair of turns, worded by
    its first reuse, wherever the cancel falls (CI saw an extra m3 row in some runs)."""
    body = [chunk("m2", "Thinking", "agent_thought_chunk"), chunk("m3", "Here is "),
            chunk("m3", "the reply.")]
    seen = []
    for at in (1, 2, 3):
        lines = start(1) + v1_turn(2, *body[:at], cancel=True) + [
            CANCEL, *body[at:], res(2, {"stopReason": "cancelled"})]
        lines += v1_turn(3, chunk("m2", "Thinking", "agent_thought_chunk"), chunk("m3", "Hi."))
        seen.append(sorted((f.requirement, f.outcome.value, f.message)
                           for f in v1_graded(lines, ["MID-A-02"]) if f.outcome.value == "fail"))
    assert all(rows == seen[0] for rows in seen), seen
    assert [m for r, _, m in seen[0] if r == "MID-A-02/cross-turn-reuse"] == [
        "thought ID 'm2' of turn 1 reappears in turn 2"], seen[0]


def v2_counter_turn(rid: int, words: str) -> list[Line]:
    """A v2 turn of an agent whose ID counter restarts every prompt (the demo's bug)."""
    return [res(rid, {"messageId": "msg_1"}), whole("user_message", "msg_1", words),
            upd("state_update", state="running"),
            chunk("msg_2", "Thinking ", "agent_thought_chunk"),
            chunk("msg_2", "hard.", "agent_thought_chunk"),
            chunk("msg_3", "Here is "), chunk("msg_3", "a reply."), IDLE]


@pytest.mark.parametrize("at", range(0, 8))
def test_a_second_prompt_in_flight_lands_anywhere_with_the_same_rows(at: int) -> None:
    """prompts-in-flight@v2 against the demo's broken agent: wherever the suite's second
    prompt lands in the first turn's output, the first turn's output is the first turn's
    (the agent could have written it before it read the prompt), so the rows are equal."""
    first = v2_counter_turn(2, "Write a story")
    second = req(3, "session/prompt", sessionId="s", prompt=[text("Reply twice")])
    lines = start(2) + [req(2, "session/prompt", sessionId="s",
                            prompt=[text("Write a story")])]
    lines += first[:at] + [second] + first[at:] + v2_counter_turn(3, "Reply twice")
    rows = {(f.requirement, f.outcome.value, f.message)
            for f in grade(transcript(2, lines).entries, protocol=2, options=PREVIEW,
                           select=["MID-A-02", "MID-V2-05", "MID-A-09"])
            if f.outcome.value in ("fail", "warn", "info")}
    assert rows == {("MID-A-02/user-message-reuse", "fail",
                     "the session/prompt response of turn 2 names ID 'msg_1', which the "
                     "response of turn 1 named")}, rows


def test_a_reuse_after_an_empty_replay_is_graded_like_any_other() -> None:
    """resume-replay-fresh-process: a live ID reused after a replayFrom resume whose replay
    is empty fails as it does after a resume without replay; a replay that shows the
    history starts a view of its own (its IDs are graded inside it)."""
    first = [req(2, "session/prompt", sessionId="s", prompt=[text("Hi")]),
             res(2, {"messageId": "u1"}), whole("user_message", "u1", "Hi"), IDLE]
    again = [req(6, "session/prompt", sessionId="s", prompt=[text("More")]),
             res(6, {"messageId": "u1"}), whole("user_message", "u1", "More"), IDLE]

    def reuse(window: list[Line], params: Line) -> set[str]:
        lines = start(2) + first + [params, *window, res(5)] + again
        return {f.requirement for f in found(lines, ["MID-A-02"])
                if f.outcome.value == "fail"}

    assert reuse([], resume(5, omit=True)) == {"MID-A-02/user-message-reuse"}
    assert reuse([MARKER], resume(5)) == {"MID-A-02/user-message-reuse"}
    # a replay that shows the message: the live reuse is one of the replayed message's ID
    shown = [whole("user_message", "u1", "Hi"), MARKER]
    assert reuse(shown, resume(5)) == {"MID-A-02/user-message-reuse"}
    # the message says which turn it reuses
    lines = start(2) + first + [resume(5), MARKER, res(5)] + again
    msgs = [f.message for f in found(lines, ["MID-A-02"]) if f.outcome.value == "fail"]
    assert msgs and "before the resume or load" in msgs[0], msgs
