"""Timers that decide a verdict are visible: every wait that ends on a clock is in the
transcript header with its length, and what it decided says which timer and which option
lengthens it.

``fixtures/harness/slow_update_after_cancel.py`` sends one more chunk 0.8 s after its
cancelled turn ended: past the default grace window (0.25 s), so it lands after the
suite moved on. The run must say so (a case note naming ``--grace``, and the timer on any
finding that points at the late line); with ``--grace 3`` the same chunk is graded where
it belongs (MID-A-09/after-cancel). ``check`` reads the same from the transcript, and
reads a transcript recorded before timers were kept.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO_ROOT, run_cli

from conformance.results import Finding, Outcome
from conformance.timers import annotate, late_notes, record
from conformance.transcript import Transcript, load

SLOW = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'harness' / 'slow_update_after_cancel.py'}"
REFERENCE = f"{sys.executable} -m conformance.reference.agent"
CASE = ("--case", "cancel-mid-turn")


def _run(tmp_path: Path, agent: str, *extra: str) -> tuple[int, dict, str]:
    report = tmp_path / "r.json"
    proc = run_cli("--agent", agent, *CASE, *extra, "--json", str(report), "--transcripts",
                   str(tmp_path / "t"), "--no-color", timeout=300)
    return proc.returncode, json.loads(report.read_text("utf-8")), proc.stdout + proc.stderr


def _header(path: Path) -> dict:
    return json.loads(path.read_text("utf-8").split("\n", 1)[0])


def test_the_grace_window_is_recorded_with_its_length(tmp_path: Path) -> None:
    code, _, out = _run(tmp_path, REFERENCE, "--protocol", "1", "--grace", "0.5")
    assert code == 0, out
    timers = _header(tmp_path / "t" / "cancel-mid-turn@v1.jsonl")["timers"]
    grace = [t for t in timers if t["timer"] == "grace window"]
    assert grace and grace[0]["seconds"] == 0.5 and grace[0]["option"] == "--grace"
    assert grace[0]["why"] == "after a cancelled turn" and isinstance(grace[0]["at"], int)
    assert "ran out" not in out  # the reference writes nothing after it: nothing to say


def test_a_late_update_is_said_and_a_longer_grace_grades_it(tmp_path: Path) -> None:
    code, data, out = _run(tmp_path / "short", SLOW)
    notes = {c["case"]: c["note"] for c in data["cases"]}
    for case in ("cancel-mid-turn@v1", "cancel-mid-turn@v2"):
        assert "grace window (0.25 s, after a cancelled turn) ran out" in notes[case], out
        assert "--grace SECONDS" in notes[case]
    assert "lengthen it with --grace SECONDS" in out  # the console says it too
    late = {c["case"]: int(c["note"].split("output #", 1)[1].split(" ", 1)[0])
            for c in data["cases"]}
    pointing = [r for r in data["results"] if r["outcome"] in ("fail", "warn")
                and late[r["case"]] in r["evidence"]["entries"]]
    assert all("--grace SECONDS" in r.get("timer", "") for r in pointing)
    assert not [r for r in data["results"] if r["requirement"] == "MID-A-09/after-cancel"
                and r["outcome"] == "fail"]  # the fault went past the window ...

    code, data, out = _run(tmp_path / "long", SLOW, "--grace", "3")
    assert code == 1, out
    fails = {(r["case"], r["requirement"]) for r in data["results"] if r["outcome"] == "fail"}
    assert fails == {("cancel-mid-turn@v1", "MID-A-09/after-cancel"),
                     ("cancel-mid-turn@v2", "MID-A-09/after-cancel")}  # ... and is graded here
    assert not any("ran out" in c["note"] for c in data["cases"])


def test_check_says_the_same_and_reads_old_transcripts(tmp_path: Path) -> None:
    _run(tmp_path, SLOW, "--protocol", "1")
    path = tmp_path / "t" / "cancel-mid-turn@v1.jsonl"
    again = run_cli("check", str(path), "--json", str(tmp_path / "c.json"), "--no-color")
    checked = json.loads((tmp_path / "c.json").read_text("utf-8"))
    live = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert checked["cases"][0]["note"] == live["cases"][0]["note"], again.stderr
    assert ([r.get("timer") for r in checked["results"]]
            == [r.get("timer") for r in live["results"]])
    # a transcript from before timers were kept: no header field, no note
    header, entries = load(path)
    header.pop("timers")
    header["ended"]["note"] = ""
    old = Transcript(header)
    old.entries = entries
    old.save(tmp_path / "old.jsonl")
    proc = run_cli("check", str(tmp_path / "old.jsonl"), "--json", str(tmp_path / "o.json"))
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads((tmp_path / "o.json").read_text("utf-8"))
    assert not any(r.get("timer") for r in data["results"])


def test_a_hang_says_which_timer_to_lengthen(tmp_path: Path) -> None:
    silent = f"{sys.executable} -c 'import time; time.sleep(60)'"
    report = tmp_path / "h.json"
    proc = run_cli("--agent", silent, "--case", "ids-across-turns", "--protocol", "1",
                   "--timeout", "1", "--json", str(report), "--no-transcripts", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    hang = [r for r in json.loads(report.read_text("utf-8"))["results"]
            if r["requirement"] == "TARGET/hang"]
    assert hang and hang[0]["outcome"] == "fail"
    assert "silence timeout (1.0 s, waiting for the initialize response)" in hang[0]["timer"]
    assert "lengthen it with --timeout SECONDS" in hang[0]["timer"]
    assert "[timer: rests on the silence timeout" in proc.stdout


def _entry(t: Transcript, src: str, msg: dict) -> None:
    t.add(0, src, "stdin" if src == "client" else "stdout", json.dumps(msg).encode())


def test_annotate_only_what_came_between_the_clock_and_the_next_read() -> None:
    t = Transcript({"role": "agent"})
    chunk = {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk", "messageId": "m",
                                     "content": {"type": "text", "text": "x"}}}}
    echo = {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": "user_message_chunk", "messageId": "u",
                                     "content": {"type": "text", "text": "p"}}}}
    _entry(t, "agent", chunk)  # 0: before the window ran out
    record(t.header, "grace window", 0.25, "--grace", "after a cancelled turn", 0)
    _entry(t, "client", {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {}})
    _entry(t, "agent", chunk)  # 2: late: after the clock, before the echo of the next prompt
    _entry(t, "agent", echo)  # 3: the agent read the next prompt
    _entry(t, "agent", chunk)  # 4: the next turn's own
    found = [Finding("R/a", Outcome.FAIL, "m", entries=(2,)),
             Finding("R/b", Outcome.FAIL, "m", entries=(4,)),
             Finding("R/c", Outcome.PASS, "m", entries=(2,)),
             Finding("R/d", Outcome.WARN, "m", entries=(0,))]
    out = {f.requirement: f.timer for f in annotate(found, t.header, t.entries)}
    assert "grace window (0.25 s, after a cancelled turn)" in out["R/a"]
    assert out["R/b"] == out["R/c"] == out["R/d"] == ""
    assert len(late_notes(t.header, t.entries)) == 1
    t.header["timers"][0]["live"] = True  # a turn still ran: its later output is expected
    assert late_notes(t.header, t.entries) == []
    assert annotate(found, t.header, t.entries)[0].timer == ""
