"""The short path for long chunk runs changes no finding.

The timeline marks a chunk line that continues the previous line's message as
a repeat; the grader then skips the checkers that declare repeats a no-op and
two checkers take a shorter path. These tests grade random transcripts (runs of
one ID, reused IDs, gaps, kinds, cancels, replays, batches, bad lines, stderr
between chunks) both ways and demand the very same findings, and write one to
a file to check that reading it back is the same as the entries in memory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import GRADING_OPTION_SETS, assert_graded_the_same_both_ways
from random_transcripts import random_entries

from conformance import transcript as tmod
from conformance.checks import grade
from conformance.checks.timeline import Timeline
from conformance.transcript import Entry

OPTIONS = GRADING_OPTION_SETS


def _repeats(entries: list[Entry], protocol: int) -> tuple[int, int]:
    """Repeat lines (with an ID, without one) the short path would take."""
    timeline = Timeline(protocol)
    with_id = without = 0
    for e in entries:
        update = timeline.repeat_update(e)
        if update is not None:
            if timeline.last_chunk is not None and timeline.last_chunk.mid is None:
                without += 1
            else:
                with_id += 1
        timeline.feed(e)
    return with_id, without


@pytest.mark.parametrize("protocol", [1, 2])
def test_random_transcripts_grade_the_same_with_and_without_the_short_path(protocol: int) -> None:
    seen = [0, 0]
    for seed in range(30):
        entries = random_entries(seed, protocol)
        for i, n in enumerate(_repeats(entries, protocol)):
            seen[i] += n
        for options in OPTIONS:
            fast = grade(entries, protocol=protocol, options=options)
            slow = grade(entries, protocol=protocol, options=options, repeats=False)
            assert fast == slow, f"seed {seed}, protocol {protocol}"
    assert seen[0] > 100 and seen[1] > 50, seen  # the short path was really taken, both kinds


@pytest.mark.parametrize("shape", ["long", "real"])
@pytest.mark.parametrize(("no_ids", "violation"), [(False, "none"), (True, "none"),
                                                   (False, "cross-turn-reuse")])
def test_benchmark_transcripts_grade_the_same_both_ways(tmp_path: Path, shape: str,
                                                        no_ids: bool, violation: str) -> None:
    """The offline benchmark's shapes: long runs and real LLM-shaped short runs, with IDs
    and without, conformant and with the planted violation (it reuses an ID, so it has
    IDs)."""
    from bench.gen_transcript import generate

    path = tmp_path / "t.jsonl"
    generate(path, updates=4000, shape=shape, no_ids=no_ids, violation=violation,
             chunks_per_message=40)
    entries = list(tmod.iter_entries(path)[1])
    assert _repeats(entries, 1)[1 if no_ids else 0] > 1000
    for options in OPTIONS:
        assert grade(entries, protocol=1, options=options) == grade(
            entries, protocol=1, options=options, repeats=False)


def _recorded() -> list[Path]:
    root = Path(__file__).resolve().parents[1] / "fixtures"
    return sorted(root.rglob("*.jsonl"))


@pytest.mark.parametrize("path", _recorded(), ids=lambda p: p.parent.name + "/" + p.name)
def test_recorded_transcripts_grade_the_same_both_ways(path: Path) -> None:
    """Every transcript kept in the repository (the live transcripts of every broken agent
    are graded both ways in test_agent_suite)."""
    assert_graded_the_same_both_ways(path)


def test_the_findings_are_the_same_on_a_transcript_read_back_from_a_file(tmp_path: Path) -> None:
    entries = random_entries(7, 1, steps=200)
    path = tmp_path / "t.jsonl"
    tmod.from_entries({"role": "agent", "protocol": 1}, entries).save(path)
    _header, read = tmod.iter_entries(path)
    back = list(read)
    assert [e.to_json() for e in back] == [e.to_json() for e in entries]
    assert grade(back, protocol=1) == grade(entries, protocol=1, repeats=False)


def test_the_fast_json_reader_reads_what_the_standard_one_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Transcript lines parsed by msgspec give the entries json.loads gives; what msgspec
    refuses (NaN, lone surrogates) or would read otherwise takes the general path."""
    entries = random_entries(3, 2, steps=120)
    t = tmod.from_entries({"role": "agent", "protocol": 2}, entries)
    for raw in ('{"jsonrpc":"2.0","id":1,"result":{"n":NaN}}',
                '{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":{}}',
                '{"jsonrpc":"2.0","method":"x","params":{"s":"\\ud800"}}'):
        t.add(0, "agent", "stdout", raw.encode())
    path = tmp_path / "t.jsonl"
    t.save(path)
    fast = [e.to_json() for e in tmod.iter_entries(path)[1]]
    monkeypatch.setitem(sys.modules, "msgspec.json", None)  # import fails: the fallback
    slow = [e.to_json() for e in tmod.iter_entries(path)[1]]
    assert fast == slow
    assert slow[-2]["msg"]["id"] == 123456789012345678901234567890


def test_the_timeline_shares_one_string_per_id(tmp_path: Path) -> None:
    """The sessionId and messageId of each update the timeline reads whole come out as the
    string object of their first occurrence (the checkers keep an ID a message; a copy a
    line would grow memory), in the events and in the entry's update, equal to what
    json.loads reads. A repeat line is not read whole: its event carries its first
    line's IDs. (The reader shared them on every line before: 9% of a bare parse.)"""
    t = tmod.Transcript({"role": "agent", "protocol": 1})
    for n in range(4):
        t.add(0, "agent", "stdout", json.dumps(
            {"jsonrpc": "2.0", "method": "session/update",
             "params": {"sessionId": "sess_1", "update": {
                 "sessionUpdate": "agent_message_chunk" if n != 2 else "agent_thought_chunk",
                 "messageId": f"msg_{n // 2}", "content": {"type": "text", "text": "x"}}}}
        ).encode())
    path = tmp_path / "t.jsonl"
    t.save(path)
    read = list(tmod.iter_entries(path)[1])
    assert [e.to_json() for e in read] == [e.to_json() for e in t.entries]
    timeline = Timeline(1)
    events = [ev for e in read for ev in timeline.feed(e) if hasattr(ev, "mid")]
    assert [ev.repeat for ev in events] == [False, True, False, False]
    sids = [ev.session for ev in events]
    mids = [ev.mid for ev in events]
    assert sids[0] is sids[1] is sids[2] is sids[3]
    assert mids == ["msg_0", "msg_0", "msg_1", "msg_1"]
    assert mids[0] is mids[1] and mids[2] is mids[3] and mids[1] is not mids[2]
    whole = [read[i].msg["params"] for i in (0, 2, 3)]  # the lines read whole
    assert whole[0]["sessionId"] is whole[1]["sessionId"] is whole[2]["sessionId"]
    assert whole[1]["update"]["messageId"] is whole[2]["update"]["messageId"]
