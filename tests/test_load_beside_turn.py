"""A v1 session/load written while a prompt's turn streams, on hand-written transcripts.

A busy agent reads the load only once its turn is done: the turn's chunks that arrive
after the request are its live output (info MID-A-07/live-beside-load, naming the
request), its prompt response ends it in its own epoch, and the next prompt's messages
are the next turn's of the new epoch. Wherever the request falls in the stream, a
conformant agent gets no fail and no warn; a replay that reuses a live ID, or a replay
after the load response, still fails its rule (MID-A-07/replay-duplicate,
MID-A-07/after-response). The live run of the same race is ``load-while-streaming@v1``
with fixtures busy_load_while_streaming and busy_load_replay_duplicate.
"""

from __future__ import annotations

from typing import Any

import pytest
from wire import Line, req, res, start, text, transcript, upd

from conformance.checks import Options, grade
from conformance.checks.events import LIVE, REPLAY, MessageEvent, TurnEnd
from conformance.checks.timeline import Timeline

EVERY = ["MID-A-02", "MID-A-03", "MID-A-06", "MID-A-07", "MID-A-08", "MID-A-09", "MID-A-10"]
STORY = ["Part 1; ", "Part 2; ", "Part 3; ", "end."]


def chunk(mid: str, words: str, kind: str = "agent_message_chunk") -> Line:
    return upd(kind, mid, content=text(words))


LOAD = req(5, "session/load", sessionId="s", cwd="/", mcpServers=[])
FIRST = [req(2, "session/prompt", sessionId="s", prompt=[text("Hi")]),
         chunk("u1", "Hi", "user_message_chunk"), chunk("a1", "Hello "), chunk("a1", "there."),
         res(2, {"stopReason": "end_turn"})]


def replay(story_id: str = "b") -> list[Line]:
    return [chunk("u1", "Hi", "user_message_chunk"), chunk("a1", "Hello "),
            chunk("a1", "there."), chunk("u2", "Story", "user_message_chunk"),
            *[chunk(story_id, w) for w in STORY]]


def busy(at: int, window: list[Line], after_response: list[Line] | None = None,
         next_id: str = "c") -> list[Line]:
    """The story streams; the load is written after ``at`` of its chunks; the agent reads
    it after the turn's response, replays ``window`` and answers; a next turn, no echo."""
    story = [chunk("b", w) for w in STORY]
    return start(1) + FIRST + [
        req(3, "session/prompt", sessionId="s", prompt=[text("Story")]),
        *story[:at], LOAD, *story[at:], res(3, {"stopReason": "end_turn"}),
        *window, res(5), *(after_response or []),
        req(6, "session/prompt", sessionId="s", prompt=[text("More")]),
        chunk(next_id, "More "), chunk(next_id, "text."), res(6, {"stopReason": "end_turn"})]


def rows(lines: list[Line]) -> list[Any]:
    return list(grade(transcript(1, lines).entries, protocol=1, options=Options(), select=EVERY))


def by_outcome(lines: list[Line]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in rows(lines):
        out.setdefault(f.outcome.value, set()).add(f.requirement)
    return out


def test_the_old_turn_ends_with_its_response_and_the_next_turn_is_the_new_epochs() -> None:
    lines = busy(2, replay())
    tl = Timeline(1)
    evs = [ev for e in transcript(1, lines).entries for ev in tl.feed(e)]
    ends = [ev for ev in evs if isinstance(ev, TurnEnd)]
    # turn 0 and the story's turn 1 in epoch 0 (this one at its response, after the load),
    # then turn 0 of the load's epoch
    assert [(e.epoch.index, e.turn, e.ended_by) for e in ends] == [
        (0, 0, "response"), (0, 1, "response"), (1, 0, "response")], ends
    msgs = [ev for ev in evs if isinstance(ev, MessageEvent)]
    beside = [m for m in msgs if m.inside >= 0]
    assert beside and all((m.mid, m.phase, m.epoch.index, m.turn) == ("b", LIVE, 0, 1)
                          for m in beside), beside
    replayed = [m for m in msgs if m.phase == REPLAY]
    assert len(replayed) == 3 + 1 + len(STORY)
    # the next prompt's message (no echo before it) is the new epoch's turn, not the old one
    nxt = [m for m in msgs if m.mid == "c"]
    assert nxt and all((m.phase, m.epoch.index, m.turn) == (LIVE, 1, 0) for m in nxt), nxt


@pytest.mark.parametrize("at", [1, 2, 3, 4])
def test_a_conformant_agent_is_clean_wherever_the_load_falls(at: int) -> None:
    found = rows(busy(at, replay()))
    bad = [(f.requirement, f.outcome.value, f.message) for f in found
           if f.outcome.value in ("fail", "warn")]
    assert not bad, bad
    info = [f for f in found if f.requirement == "MID-A-07/live-beside-load"
            and f.outcome.value == "info"]
    if at == len(STORY):  # the request came after the last chunk: nothing to give
        assert not info
        return
    assert len(info) == 1, info
    assert "benefit of the doubt" in info[0].message and "entry" in info[0].message
    load_seq = next(e.seq for e in transcript(1, busy(at, replay())).entries
                    if isinstance(e.msg, dict) and e.msg.get("method") == "session/load")
    assert info[0].entries[0] == load_seq  # the evidence names the request


@pytest.mark.parametrize("at", [1, 3])
def test_a_replay_that_reuses_a_live_id_still_fails(at: int) -> None:
    # the replayed story carries the first turn's agent message ID
    found = by_outcome(busy(at, replay(story_id="a1")))
    assert "MID-A-07/replay-duplicate" in found.get("fail", set()), found
    assert "MID-A-07/live-beside-load" in found.get("info", set()), found


@pytest.mark.parametrize("at", [1, 3])
def test_a_replay_after_the_load_response_still_fails(at: int) -> None:
    """The story's turn ended with its response: the story replayed after the load
    response is a late replay (MID-A-07/after-response), not that turn going on."""
    early = replay()[:3]
    late = [chunk("b", w) for w in STORY]
    found = by_outcome(busy(at, early, after_response=late))
    assert "MID-A-07/after-response" in found.get("fail", set()), found


def test_a_next_turn_that_reuses_a_replayed_id_still_fails() -> None:
    found = by_outcome(busy(2, replay(), next_id="a1"))
    assert "MID-A-02/cross-turn-reuse" in found.get("fail", set()), found


def _idless(lines: list[Line], keep: str = "") -> list[Line]:
    """The same lines with no messageId on any chunk but ``keep``'s (a v1 agent without IDs,
    allowed: MID-A-05)."""
    out = []
    for src, msg in lines:
        update = msg.get("params", {}).get("update") if isinstance(msg.get("params"), dict) else None
        if isinstance(update, dict) and update.get("messageId") not in (None, keep):
            update = {k: v for k, v in update.items() if k != "messageId"}
            msg = {**msg, "params": {**msg["params"], "update": update}}
        out.append((src, msg))
    return out


@pytest.mark.parametrize("at", [1, 2, 3])
def test_chunks_without_ids_beside_the_load_are_the_turns(at: int) -> None:
    """No ID to match: a chunk of the turn before the replay begins is its output, never
    a replayed message (a replay of the story whose first part came before the request
    would otherwise shift every later replayed message onto a different live one)."""
    lines = _idless(busy(at, replay()))
    found = rows(lines)
    bad = [(f.requirement, f.outcome.value, f.message) for f in found
           if f.outcome.value in ("fail", "warn")]
    assert not bad, bad
    info = [f.message for f in found if f.requirement == "MID-A-07/live-beside-load"
            and f.outcome.value == "info"]
    assert len(info) == 1 and "without an ID" in info[0], info


def test_an_id_gap_beside_the_load_is_one_gap_and_no_collision() -> None:
    """One chunk of the story without its ID after the request (MID-A-03/gap, warn): the
    gap is graded, and no replayed message is taken for a different live one."""
    story = [chunk("b", w) for w in STORY]
    story[2] = _idless([story[2]])[0]
    lines = start(1) + FIRST + [
        req(3, "session/prompt", sessionId="s", prompt=[text("Story")]),
        *story[:1], LOAD, *story[1:], res(3, {"stopReason": "end_turn"}),
        *replay(), res(5)]
    found = by_outcome(lines)
    assert "MID-A-08/collides-other-epoch" not in found.get("warn", set()), found
    assert not found.get("fail"), found
