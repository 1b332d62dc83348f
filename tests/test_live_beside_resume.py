"""MID-V2-06 on hand-written transcripts: a v2 session/resume without replayFrom arrives
while a prompt's turn streams, and the agent answers it only after the turn ends (what a
busy LLM agent does). The turn's own output in that window is live (info
MID-V2-06/live-beside-resume, citing the request); real history replayed in the same
window is still an unrequested replay (fail). A queued prompt's echo and turn, which the
agent started before it read the resume, are live too (not replay)."""

from __future__ import annotations

from typing import Any

import pytest
from wire import PREVIEW, Line, req, res, resume, start, text, transcript, upd

from conformance.checks import Options, grade
from conformance.checks.events import LIVE, MessageEvent
from conformance.checks.timeline import Timeline


def found_rows(lines: list[Line], options: Options) -> list[Any]:
    return [f for f in grade(transcript(2, lines).entries, protocol=2, options=options,
                             select=["MID-V2-06", "MID-V2-13", "MID-V2-12", "MID-A-08"])]


def clean_but_beside(rows: list[Any]) -> list[Any]:
    """No fail and no warn; the info rows of MID-V2-06/live-beside-resume (at least one)."""
    bad = [(f.requirement, f.outcome.value, f.message) for f in rows
           if f.outcome.value in ("fail", "warn")]
    assert not bad, bad
    info = [f for f in rows if f.requirement == "MID-V2-06/live-beside-resume"
            and f.outcome.value == "info"]
    assert info, [(f.requirement, f.outcome.value) for f in rows]
    return info


def chunk(mid: str, t: str) -> Line:
    return upd("agent_message_chunk", mid, content=text(t))


def streaming_then_resume(how: dict[str, Any], window: list[Line]) -> list[Line]:
    return start(2) + [
        req(2, "session/prompt", sessionId="s", prompt=[text("Hello")]),
        res(2, {"messageId": "u2"}), upd("user_message", "u2", content=[text("Hello")]),
        chunk("a", "Let me look "), chunk("a", "at the file."),
        resume(5, **how),
        # written before the agent read the resume: the rest of its turn, a new message too
        chunk("a", " Done."), chunk("b", "Now the "), chunk("b", "tool."),
        upd("state_update", state="idle", stopReason="end_turn"),
        *window, res(5)]


HOW = [{"omit": True}, {"replay": None}]
OPTIONS = [Options(), PREVIEW]


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "acp-schema-1.21"])
@pytest.mark.parametrize("how", HOW, ids=["omitted", "null"])
def test_the_turns_own_chunks_beside_the_resume_are_info(how: dict[str, Any],
                                                          options: Options) -> None:
    rows = found_rows(streaming_then_resume(how, []), options)
    info = clean_but_beside(rows)
    assert "benefit of the doubt" in info[0].message


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "acp-schema-1.21"])
@pytest.mark.parametrize("how", HOW, ids=["omitted", "null"])
def test_history_replayed_in_the_same_window_still_fails(how: dict[str, Any],
                                                          options: Options) -> None:
    history = [upd("user_message", "u2", content=[text("Hello")]),
               upd("agent_message", "a", content=[text("Let me look at the file. Done.")])]
    rows = found_rows(streaming_then_resume(how, history), options)
    fails = {f.requirement for f in rows if f.outcome.value == "fail"}
    assert "MID-V2-06/unrequested-replay" in fails, [(f.requirement, f.outcome.value)
                                                     for f in rows]
    assert any(f.requirement == "MID-V2-06/live-beside-resume" and f.outcome.value == "info"
               for f in rows)


def test_without_a_streaming_turn_a_replay_still_fails() -> None:
    lines = start(2) + [
        req(2, "session/prompt", sessionId="s", prompt=[text("Hello")]),
        res(2, {"messageId": "u2"}), upd("user_message", "u2", content=[text("Hello")]),
        chunk("a", "Hi."), upd("state_update", state="idle", stopReason="end_turn"),
        resume(5, omit=True), upd("user_message", "u2", content=[text("Hello")]),
        chunk("a", "Hi."), res(5)]
    rows = found_rows(lines, Options())
    assert "MID-V2-06/unrequested-replay" in {f.requirement for f in rows
                                              if f.outcome.value == "fail"}
    assert not [f for f in rows if f.requirement == "MID-V2-06/live-beside-resume"
                and f.outcome.value == "info"]


# A second prompt queued behind the streaming one: its echo, then its turn, land in the
# window too (the agent finished the first turn and started the next before it read the
# resume). The echo may come as a whole user_message or v1-style as user_message_chunk.
def queued_then_resume(echo: Line, window_tail: list[Line]) -> list[Line]:
    idle = upd("state_update", state="idle", stopReason="end_turn")
    return start(2) + [
        req(2, "session/prompt", sessionId="s", prompt=[text("Story")]),
        res(2, {"messageId": "u2"}), upd("user_message", "u2", content=[text("Story")]),
        chunk("a", "Part 1; "),
        req(3, "session/prompt", sessionId="s", prompt=[text("Next")]),
        res(3, {"messageId": "u3"}),
        chunk("a", "Part 2; "),
        resume(5, omit=True),
        chunk("a", "end."), idle,
        echo, chunk("b", "Next answer."), *window_tail, idle, res(5)]


ECHOES = {"chunk": upd("user_message_chunk", "u3", content=text("Next")),
          "whole": upd("user_message", "u3", content=[text("Next")])}


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "acp-schema-1.21"])
@pytest.mark.parametrize("form", sorted(ECHOES))
def test_a_queued_prompts_echo_in_the_window_is_live(form: str, options: Options) -> None:
    lines = queued_then_resume(ECHOES[form], [])
    clean_but_beside(grade(transcript(2, lines).entries, protocol=2, options=options))
    tl = Timeline(2)
    evs = [ev for e in transcript(2, lines).entries for ev in tl.feed(e)
           if isinstance(ev, MessageEvent) and ev.mid in ("u3", "b")]
    resume_seq = 11
    assert [(ev.mid, ev.phase, ev.turn, ev.inside) for ev in evs] == [
        ("u3", LIVE, 1, resume_seq), ("b", LIVE, 1, resume_seq)], evs


@pytest.mark.parametrize("form", sorted(ECHOES))
@pytest.mark.parametrize("history", [
    upd("user_message", "u2", content=[text("Story")]),  # a user message shown before
    upd("agent_message", "a", content=[text("Part 1; Part 2; end.")]),  # an agent one
], ids=["user", "agent"])
def test_history_after_a_queued_echo_still_fails(form: str, history: Line) -> None:
    rows = found_rows(queued_then_resume(ECHOES[form], [history]), Options())
    assert "MID-V2-06/unrequested-replay" in {f.requirement for f in rows
                                              if f.outcome.value == "fail"}, \
        [(f.requirement, f.outcome.value) for f in rows]


@pytest.mark.parametrize("form", sorted(ECHOES))
def test_a_second_echo_under_a_new_id_is_an_unmatched_echo_not_a_replay(form: str) -> None:
    """A user message under an ID the session never showed and no response named, in the
    queued turn (an agent that echoes each prompt twice): nothing shown before is shown
    again, so no replay; MID-V2-05 warns of the prompt shown twice."""
    extra = upd("user_message", "u9", content=[text("Next")])
    rows = grade(transcript(2, queued_then_resume(ECHOES[form], [extra])).entries,
                 protocol=2, options=Options())
    graded = {(f.requirement, f.outcome.value) for f in rows}
    assert ("MID-V2-06/unrequested-replay", "fail") not in graded, graded
    assert ("MID-V2-05/unmatched-echo", "warn") in graded, graded


def test_a_queued_echo_under_a_reused_id_is_its_own_fault_only() -> None:
    """An agent whose ID counter restarts every prompt names msg_1 for both prompts and
    echoes the queued one under it in the window: the echo is the queued prompt's (its
    response named that ID), so the one fault is the reuse (MID-A-02), not a replay and
    not a missing echo."""
    idle = upd("state_update", state="idle", stopReason="end_turn")
    lines = start(2) + [
        req(2, "session/prompt", sessionId="s", prompt=[text("Story")]),
        res(2, {"messageId": "msg_1"}), upd("user_message", "msg_1", content=[text("Story")]),
        chunk("msg_2", "Part 1; "),
        req(3, "session/prompt", sessionId="s", prompt=[text("Next")]),
        res(3, {"messageId": "msg_1"}),
        resume(5, omit=True), chunk("msg_2", "end."), idle,
        upd("user_message", "msg_1", content=[text("Next")]), chunk("msg_2", "Next."), idle,
        res(5)]
    rows = grade(transcript(2, lines).entries, protocol=2, options=Options())
    fails = {f.requirement for f in rows if f.outcome.value == "fail"}
    assert "MID-A-02/user-message-reuse" in fails, fails
    assert not fails & {"MID-V2-06/unrequested-replay", "MID-V2-05/no-echo"}, fails


def test_a_resume_as_the_queued_turn_starts_does_not_read_it_as_the_last_turn_rebuilt() -> None:
    """The demo's broken agent (its counter restarts at every prompt, its texts repeat)
    ends the first turn, accepts the queued prompt, and only then reads the suite's resume
    without replayFrom: the queued turn's echo and first thought chunk, under the first
    turn's IDs and texts, come in the window. They are the queued turn's output (its ID
    reuse is MID-A-02's), never the first turn's thought rebuilt by a replay (MID-V2-06):
    what the first turn streamed is not the queued turn's (the demo gave that fail in some
    runs and not in others)."""
    idle = upd("state_update", state="idle", stopReason="end_turn")
    thought = upd("agent_thought_chunk", "msg_2", content=text("Thinking about "))
    lines = start(2) + [
        req(2, "session/prompt", sessionId="s", prompt=[text("Story")]),
        res(2, {"messageId": "msg_1"}), upd("user_message", "msg_1", content=[text("Story")]),
        thought, chunk("msg_3", "Part 1; "),
        req(3, "session/prompt", sessionId="s", prompt=[text("Next")]),
        chunk("msg_3", "end."), idle, res(3, {"messageId": "msg_1"}),
        resume(5, omit=True),
        upd("user_message", "msg_1", content=[text("Next")]), thought, res(5),
        upd("agent_thought_chunk", "msg_2", content=text("how to answer.")),
        chunk("msg_3", "Next."), idle]
    rows = grade(transcript(2, lines).entries, protocol=2, options=Options())
    fails = {f.requirement for f in rows if f.outcome.value == "fail"}
    assert "MID-A-02/user-message-reuse" in fails, fails
    assert not fails & {"MID-V2-06/unrequested-replay", "MID-V2-05/no-echo"}, fails


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "acp-schema-1.21"])
def test_the_turn_restating_its_own_message_in_the_window_is_live(options: Options) -> None:
    """A v2 agent restates its last streamed message as a whole upsert under the same ID
    (catalogue K.6) before its idle, after the resume came: nothing replays in this window,
    so that upsert of a live ID is the turn's, not history."""
    lines = streaming_then_resume({"omit": True}, [])
    at = next(i for i, (_, m) in enumerate(lines)
              if m.get("params", {}).get("update", {}).get("state") == "idle")
    lines.insert(at, upd("agent_message", "b", content=[text("Now the tool.")]))
    rows = found_rows(lines, options)
    bad = [(f.requirement, f.outcome.value) for f in rows if f.outcome.value in ("fail", "warn")]
    assert not bad, bad


def test_a_queued_echo_under_the_previous_prompts_id_is_its_fault_only() -> None:
    """The queued prompt echoed under the ID the first prompt's response named (a wrong
    echo): MID-V2-05/response-id, wherever the resume falls; never a replay."""
    lines = queued_then_resume(upd("user_message", "u2", content=[text("Next")]), [])
    rows = grade(transcript(2, lines).entries, protocol=2, options=Options())
    fails = {f.requirement for f in rows if f.outcome.value == "fail"}
    assert "MID-V2-05/response-id" in fails, fails
    assert "MID-V2-06/unrequested-replay" not in fails, fails


# The turn's next message written whole (an upsert under a new ID, then perhaps its chunks),
# before the agent read the resume: as live as its chunks would be (the benefit of the
# doubt). Seen on a busy machine: a v2 agent whose turn writes a session message whole,
# then streams it, graded MID-V2-06/unrequested-replay fail in one run of a case.
WHOLE = {"agent": ("agent_message", "agent_message_chunk"),
         "thought": ("agent_thought", "agent_thought_chunk")}


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "acp-schema-1.21"])
@pytest.mark.parametrize("kind", sorted(WHOLE))
@pytest.mark.parametrize("then_chunks", [False, True], ids=["whole", "whole-then-chunks"])
def test_a_new_message_written_whole_beside_the_resume_is_live(
        kind: str, then_chunks: bool, options: Options) -> None:
    whole, part = WHOLE[kind]
    tail = [upd(part, "w", content=text("A note ")), upd(part, "w", content=text("arrives."))] \
        if then_chunks else []
    lines = start(2) + [
        req(2, "session/prompt", sessionId="s", prompt=[text("Hello")]),
        res(2, {"messageId": "u2"}), upd("user_message", "u2", content=[text("Hello")]),
        chunk("a", "Let me look."),
        resume(5, omit=True),
        upd(whole, "w", content=[text("A note arrives.")]), *tail,
        chunk("b", "Done."), upd("state_update", state="idle", stopReason="end_turn"),
        res(5)]
    clean_but_beside(found_rows(lines, options))
    tl = Timeline(2, session_messages=False)
    phases = {ev.seq: ev.phase for e in transcript(2, lines).entries for ev in tl.feed(e)
              if isinstance(ev, MessageEvent) and ev.mid == "w"}
    assert phases and set(phases.values()) == {LIVE}, phases


@pytest.mark.parametrize("kind", sorted(WHOLE))
def test_an_earlier_turns_message_upserted_in_the_window_still_fails(kind: str) -> None:
    """The control: an upsert under an ID the session showed in an earlier turn is history
    shown again (a resume without replayFrom replays nothing), whatever streams."""
    whole, part = WHOLE[kind]
    idle = upd("state_update", state="idle", stopReason="end_turn")
    lines = start(2) + [
        req(2, "session/prompt", sessionId="s", prompt=[text("Hello")]),
        res(2, {"messageId": "u2"}), upd("user_message", "u2", content=[text("Hello")]),
        upd(part, "old", content=text("Earlier.")), idle,
        req(3, "session/prompt", sessionId="s", prompt=[text("Again")]),
        res(3, {"messageId": "u3"}), upd("user_message", "u3", content=[text("Again")]),
        chunk("a", "Let me look."),
        resume(5, omit=True),
        upd(whole, "old", content=[text("Earlier.")]),
        chunk("a", " Done."), idle, res(5)]
    rows = found_rows(lines, Options())
    assert "MID-V2-06/unrequested-replay" in {f.requirement for f in rows
                                              if f.outcome.value == "fail"}, \
        [(f.requirement, f.outcome.value) for f in rows]


def idle_in_the_window_then(after: list[Line]) -> list[Line]:
    """The agent answers a resume without replayFrom with an idle state report while its
    turn streams (what the interop matrix's SDK-based v2 agents did), then its response,
    then ``after``."""
    return start(2) + [
        req(2, "session/prompt", sessionId="s", prompt=[text("Write a long story.")]),
        res(2, {"messageId": "u2"}), upd("user_message", "u2", content=[text("Write a long story.")]),
        upd("state_update", state="running"), chunk("a", "Sentence 1. "),
        resume(5, omit=True), upd("state_update", state="idle", stopReason="end_turn"),
        res(5), *after]


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "acp-schema-1.21"])
def test_the_turns_message_going_on_after_its_idle_is_out_of_turn_not_replay(
        options: Options) -> None:
    """Its message goes on after the response (its ID, the next text): no history shown
    again, so no MID-V2-06 fail; it is output after the turn's idle, which
    MID-A-09/out-of-turn records. Starting the message again with its first chunk text (a
    replay rebuilding it) still fails."""
    going_on = idle_in_the_window_then([chunk("a", "Sentence 2. "), chunk("a", "Sentence 3. ")])
    rows = grade(transcript(2, going_on).entries, protocol=2, options=options,
                 select=["MID-V2-06", "MID-A-09"])
    assert not [(f.requirement, f.message) for f in rows if f.outcome.value == "fail"]
    [info] = [f for f in rows if f.requirement == "MID-A-09/out-of-turn"
              and f.outcome.value == "info"]
    entries = transcript(2, going_on).entries
    assert [entries[n].msg["params"]["update"]["content"]["text"] for n in info.entries] == [
        "Sentence 2. ", "Sentence 3. "], info
    assert "arrives after the turn ended" in info.message
    again = idle_in_the_window_then([chunk("a", "Sentence 1. "), chunk("a", "Sentence 2. ")])
    fails = {f.requirement for f in grade(transcript(2, again).entries, protocol=2,
                                          options=options, select=["MID-V2-06"])
             if f.outcome.value == "fail"}
    assert fails == {"MID-V2-06/unrequested-replay"}
