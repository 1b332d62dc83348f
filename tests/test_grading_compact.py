"""What the grader keeps per message got smaller and its dispatch shorter; no finding
changed.

An update line's Frame goes only to ``on_update_frame`` (or to no handler where
a checker says ``on_frame`` does nothing there): grading with every Frame sent
to ``on_frame`` gives the same findings. ``Uniqueness`` keeps the first use of
an ID as one packed int and a turn's few chunk IDs as a tuple (a set past
``TURN_TUPLE``): a return to an earlier ID is found in either form, with the ID
it returned after, and the entries a reuse cites are the right ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import GRADING_OPTION_SETS, text, transcript, update
from random_transcripts import random_entries
from replay_transcripts import replay_entries

from conformance import transcript as tmod
from conformance.checks import base, grade
from conformance.checks.identity import TURN_TUPLE, Uniqueness
from conformance.checks.replay import Replay
from conformance.results import Outcome
from conformance.transcript import Entry, Transcript


def _init(version: int, capabilities: dict[str, Any] | None = None) -> list[Any]:
    return [("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": version}}),
            ("agent", {"jsonrpc": "2.0", "id": 0, "result": {
                "protocolVersion": version, **({"capabilities": capabilities}
                                               if capabilities else {})}})]


def _updates_only() -> Transcript:
    """The agent's only stdout lines are session/update notifications (Framing, Liveness
    see that it spoke only through them), then it exits."""
    t = Transcript({"protocol": 1})
    t.add(0, "harness", "harness", event="start", data={"pid_role": "agent"})
    for src, msg in [_prompt(1), _chunk("m1", "hello"), _chunk("m1", " there")]:
        t.add(0, src, "stdin" if src == "client" else "stdout", json.dumps(msg).encode())
    t.add(0, "harness", "harness", event="exit", data={"returncode": 0, "ended_by": "stdin-eof"})
    return t


def _v2_kind_in_v1() -> Transcript:
    """Answered 1, then a v2 upsert (TARGET/negotiation/agent reads the update line)."""
    return transcript(1, [*_init(1), _prompt(1),
                          update("agent_message", "m1", content=[text("hi")]), _done(1)])


def _rewind_of_a_sent_id() -> Transcript:
    """v2, session.rewind advertised: a rewind to an ID the agent sent (AddressedMethods
    learns it from the update line) that succeeds is no fault."""
    return transcript(2, [*_init(2, {"session": {"rewind": {}}}), _prompt(1),
                          _chunk("m1", "hello"),
                          ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
                              "sessionId": "s", "update": {"sessionUpdate": "state_update",
                                                           "state": "idle"}}}),
                          ("client", {"jsonrpc": "2.0", "id": 9, "method": "session/rewind",
                                      "params": {"sessionId": "s", "toMessageId": "m1"}}),
                          ("agent", {"jsonrpc": "2.0", "id": 9, "result": {}})])


def _fixtures() -> list[Path]:
    return sorted((Path(__file__).resolve().parents[1] / "fixtures").rglob("*.jsonl"))


def _cases() -> list[tuple[str, list[Entry], int, str]]:
    cases = [(f"random-{p}-{seed}", random_entries(seed, p), p, "agent")
             for p in (1, 2) for seed in range(8)]
    cases += [(f.__name__, f().entries, f().header.get("protocol", 1), "agent")
              for f in (_updates_only, _v2_kind_in_v1, _rewind_of_a_sent_id)]
    for path in _fixtures():
        header, read = tmod.iter_entries(path)
        cases.append((path.name, list(read), int(header.get("protocol") or 1),
                      str(header.get("role") or "agent")))
    return cases


def test_update_frames_grade_as_they_would_through_on_frame(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cases = _cases()
    graded = {(name, n): grade(entries, protocol=p, options=o, role=role)
              for name, entries, p, role in cases for n, o in enumerate(GRADING_OPTION_SETS)}
    # the crafted transcripts hang on an update line's Frame (each checker's on_update_frame)
    rows = {name: {f.requirement: f.outcome for f in graded[name, 0]}
            for name in ("_updates_only", "_v2_kind_in_v1", "_rewind_of_a_sent_id")}
    assert rows["_updates_only"]["MID-S-06/framing"] is Outcome.PASS
    assert rows["_updates_only"]["TARGET/exit"] is Outcome.PASS
    assert rows["_v2_kind_in_v1"]["TARGET/negotiation/agent"] is Outcome.FAIL
    # (a success naming an ID the agent never sent would fail; this one names one it sent)
    assert rows["_rewind_of_a_sent_id"]["MID-V2-16/unknown-id"] is Outcome.NOT_APPLICABLE
    # every Frame through on_frame (no short path: a repeat line's Frame is an update line's)
    monkeypatch.setattr(base, "is_update_frame", lambda entry, ev: False)
    for name, entries, p, role in cases:
        for n, o in enumerate(GRADING_OPTION_SETS):
            assert grade(entries, protocol=p, options=o, role=role,
                         repeats=False) == graded[name, n], (name, n)


def _prompt(rid: int) -> tuple[str, dict[str, Any]]:
    return ("client", {"jsonrpc": "2.0", "id": rid, "method": "session/prompt",
                       "params": {"sessionId": "s", "prompt": [text("go")]}})


def _done(rid: int) -> tuple[str, dict[str, Any]]:
    return ("agent", {"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})


def _chunk(mid: str, words: str = "x") -> tuple[str, dict[str, Any]]:
    return update("agent_message_chunk", mid, content=text(words))


@pytest.mark.parametrize("ids", [2, TURN_TUPLE, TURN_TUPLE + 3])
def test_a_return_to_an_earlier_id_is_found_in_a_tuple_or_a_set(ids: int) -> None:
    lines = [_prompt(1)]
    for i in range(ids):
        lines += [_chunk(f"m{i}"), _chunk(f"m{i}")]
    lines += [_chunk("m0"), _done(1)]
    found = [f for f in grade(transcript(1, lines).entries, protocol=1)
             if f.requirement == "MID-A-02/interleave" and f.outcome is not Outcome.PASS]
    assert len(found) == 1, found
    assert f"after 'm{ids - 1}'" in found[0].message
    assert found[0].entries == (len(lines) - 2,)


def test_a_turn_returning_within_its_tuple_keeps_the_last_id() -> None:
    """m0 m1 m0 m1: two returns, the second after m0 (the tuple keeps the last ID last)."""
    lines = [_prompt(1), _chunk("m0"), _chunk("m1"), _chunk("m0"), _chunk("m1"), _done(1)]
    found = [f for f in grade(transcript(1, lines).entries, protocol=1)
             if f.requirement == "MID-A-02/interleave" and f.outcome is not Outcome.PASS]
    assert sorted(f.message.split(" after ")[1][:4] for f in found) == ["'m0'", "'m1'"]


def test_a_reuse_cites_the_first_use_across_turns_and_kinds() -> None:
    lines = [_prompt(1), _chunk("a1"), _done(1),
             _prompt(2), update("agent_thought_chunk", "a1", content=text("hm")),
             _chunk("a1"), _done(2)]
    t = transcript(1, lines)
    seqs = [e.seq for e in t.entries]
    rows = {f.requirement: f for f in grade(t.entries, protocol=1)
            if f.outcome is not Outcome.PASS and f.requirement.startswith("MID-A-02/")}
    assert rows["MID-A-02/cross-kind-reuse"].entries == (seqs[1], seqs[4])
    assert "an agent message and a thought message" in rows["MID-A-02/cross-kind-reuse"].message
    assert rows["MID-A-02/cross-turn-reuse"].entries == (seqs[1], seqs[5])
    assert "of turn 1 reappears in turn 2" in rows["MID-A-02/cross-turn-reuse"].message


@pytest.mark.parametrize("protocol", [1, 2])
def test_turns_let_go_early_grade_as_turns_kept_to_the_end(
        protocol: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replayed turn is compared with its live turn as soon as the replay's next turn
    begins (and let go), a live turn is packed when the next turn begins, the turn a replay
    may see stream beside it waits for the end, and a turn's chunk-ID tables go once a later
    turn of its phase is updated (v1 live turns, replayed turns): the findings are those of
    keeping every turn to the end, row for row, evidence and order included."""
    cases = [replay_entries(seed, protocol) for seed in range(60)]
    cases += [replay_entries(seed, protocol, storm=True) for seed in range(6)]
    cases += [random_entries(seed, protocol) for seed in range(8, 80)]  # v2 75: back to turn 0
    cases += [entries for _, entries, p, role in _cases() if p == protocol and role == "agent"]
    when = {"early": 0, "end": 0}
    at_end = [False]
    compare, finish = Replay.compare, Replay.finish

    def counted(self: Replay, *a: Any) -> None:
        when["end" if at_end[0] else "early"] += 1
        compare(self, *a)

    def finishing(self: Replay) -> None:
        at_end[0] = True
        try:
            finish(self)
        finally:
            at_end[0] = False

    monkeypatch.setattr(Replay, "compare", counted)
    monkeypatch.setattr(Replay, "finish", finishing)
    graded = [grade(entries, protocol=protocol, options=o) for entries in cases
              for o in GRADING_OPTION_SETS]
    assert when["early"] > 100 and when["end"] > 10, when  # both ways were really taken
    rows = {(f.requirement, f.outcome) for found in graded for f in found}
    for rule in ("MID-A-08/collides-other-epoch", "MID-A-03/replay-crosscheck",
                 "MID-A-07/replay-duplicate" if protocol == 1 else "MID-V2-06/replay-duplicate"):
        assert any(r == rule and o in (Outcome.FAIL, Outcome.WARN) for r, o in rows), rule
    # more faults of the cross-check's rules than are listed: the counted rest agrees too
    assert any(f.faults > 1 and f.requirement == "MID-A-03/replay-crosscheck"
               for found in graded for f in found)
    monkeypatch.setattr(Replay, "early", False)
    monkeypatch.setattr(Uniqueness, "early", False)
    when.update(early=0, end=0)
    again = [grade(entries, protocol=protocol, options=o) for entries in cases
             for o in GRADING_OPTION_SETS]
    assert when["early"] == 0 and when["end"] > 200, when
    assert again == graded


def test_a_turn_carried_beside_a_resume_keeps_its_chunk_ids_past_a_later_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """v1: a resume without replay while turn 1 streams carries it on in its epoch, past a
    new prompt's echo (turn 2): its chunk IDs are still its own tables when it returns to
    an earlier ID (MID-A-02/interleave), though a later turn was updated in between."""
    t = transcript(1, [*_init(1), _prompt(1), _chunk("A", "one"), _chunk("B", "two"),
                       ("client", {"jsonrpc": "2.0", "id": 2, "method": "session/resume",
                                   "params": {"sessionId": "s"}}),
                       ("agent", {"jsonrpc": "2.0", "id": 2, "result": {}}),
                       _prompt(3), update("user_message_chunk", "U", content=text("go")),
                       _chunk("A", "three")])
    found = grade(t.entries, protocol=1)
    row = next(f for f in found if f.requirement == "MID-A-02/interleave")
    assert row.outcome is Outcome.WARN and "return to ID 'A' after 'B' in turn 1" in row.message
    monkeypatch.setattr(Uniqueness, "early", False)
    assert grade(t.entries, protocol=1) == found
