"""Hostile agents through the real CLI: each run ends on time with a verdict and evidence.

Every agent in fixtures/hostile/agents/ misbehaves in one way (crash, hang,
flood, lie). For each, the suite must: exit 1 (or 0 where nothing is broken),
report the expected finding with its evidence in the JSON report, write the
transcript and the JUnit file, end within its timeouts plus a margin (a bound
on a hang, not a speed benchmark), leave no process of the target's group
behind, and keep its memory bounded.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import Run, group_alive, run_agent

from conformance import transcript as tmod
from conformance.transport import TargetExited, TargetProcess, TargetTimeout

# --timeout of every run: long enough for a well-behaved start on a busy machine (the
# hostile part must be what ends the wait). The close grace is min(2 s, --timeout).
TIMEOUT = 4.0
GRACE = min(2.0, TIMEOUT)
SLACK = 15.0  # start-up, grading and a loaded machine; a hang would take HANG_LIMIT


def assert_contained(run: Run, *, waited: float, grace_rounds: int = 1) -> None:
    """The common promises: on time, reports and transcripts written, no process left."""
    limit = waited + grace_rounds * GRACE + SLACK
    assert run.elapsed < limit, f"run took {run.elapsed:.1f} s (bound {limit:.1f} s)"
    assert "Traceback" not in run.stderr, run.stderr
    assert run.report is not None, run.stderr
    ET.parse(run.workdir / "report.xml")  # well-formed JUnit
    assert run.transcripts, "no transcript written"
    for path in run.transcripts:
        tmod.load(path)  # complete and valid
    assert run.harness_events("exit"), "the transcript lacks the target's exit event"
    pgids = run.pgids()
    assert pgids, "the transcript's start event lacks the process group"
    for pgid in pgids:
        assert not group_alive(pgid), f"process group {pgid} survived the run"


def only(run: Run, requirement: str, outcome: str = "fail") -> dict:
    found = run.findings(requirement, outcome)
    assert found, (f"no {outcome} {requirement}; results: "
                   f"{[(r['requirement'], r['outcome']) for r in run.report['results']]}")
    return found[0]


def test_exits_at_start(tmp_path: Path) -> None:
    run = run_agent("exit_at_start", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "TARGET/exit")
    assert f["evidence"]["actual"]["returncode"] == 3
    assert "cannot read configuration" in f["evidence"]["actual"]["stderr_tail"]
    assert "initialize" in f["message"]
    assert_contained(run, waited=0)


def test_crashes_mid_stream(tmp_path: Path) -> None:
    run = run_agent("crash_mid_stream", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "TARGET/exit")
    assert f["evidence"]["actual"]["returncode"] == 101
    assert "panicked" in f["evidence"]["actual"]["stderr_tail"]
    assert "session/prompt" in f["message"]
    assert_contained(run, waited=0)


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_accepts_prompt_then_goes_silent(tmp_path: Path, protocol: str) -> None:
    run = run_agent("silent_after_prompt", tmp_path, timeout=TIMEOUT, protocol=protocol)
    assert run.returncode == 1, run.stderr
    f = only(run, "TARGET/hang")
    assert f["evidence"]["actual"]["silence"] is True
    assert f"within {TIMEOUT:g} s" in f["message"] or f"within {TIMEOUT} s" in f["message"]
    assert "prompt" in f["message"]
    assert_contained(run, waited=TIMEOUT)


def test_streams_chunks_forever(tmp_path: Path) -> None:
    # A turn that outgrows the recording cap (20,000 lines) is a flood: the wait is cut
    # there, long before --turn-timeout (6 x --timeout by default: 24 s here).
    run = run_agent("stream_forever", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "TARGET/hang")
    assert f["evidence"]["actual"]["silence"] is False
    assert "recording cap of 20000 lines" in f["message"] and "a flood" in f["message"]
    cap = only(run, "TARGET/output-cap", "info")
    assert cap["evidence"]["actual"]["unrecorded_lines"] >= 1
    # The chunks never stop, so closing stdin does not end it: SIGTERM does.
    assert run.harness_events("exit")[-1]["data"]["ended_by"] == "sigterm"
    assert run.max_rss_mb < 250, f"peak memory {run.max_rss_mb:.0f} MB"
    assert_contained(run, waited=TIMEOUT, grace_rounds=2)


def test_streams_forever_after_a_cancelled_turn(tmp_path: Path) -> None:
    turn = 5.0
    run = run_agent("streams_after_cancel", tmp_path, timeout=TIMEOUT, case="cancel-mid-turn",
                    extra=["--turn-timeout", str(turn)])
    assert run.returncode == 1, run.stderr
    only(run, "MID-A-09/after-cancel")
    f = only(run, "TARGET/hang")
    assert "lines kept coming" in f["message"]
    # Which wait the deadline cuts depends on how fast the machine drains the stream:
    # the grace window after the cancel, or (when the backlog is long) the wait for the
    # cancelled turn's end. Either way it is one of those two waits, and it ends.
    notes = [e["data"].get("note", "") for e in run.harness_events("note")]
    cut_waits = [e["data"].get("waiting_for", "") for e in run.harness_events("timeout")
                 if e["data"].get("deadline")]
    assert (any("grace window cut at" in n for n in notes)
            or any("prompt" in w for w in cut_waits)), (notes, cut_waits)
    # The grace window after the cancel and the next prompt's wait: two deadlines at most.
    assert_contained(run, waited=2 * turn, grace_rounds=2)


@pytest.mark.parametrize("name, waited_for, why", [
    ("mute_to_v2", "initialize", "the agent did not answer the v2 initialize"),
])
def test_a_v2_fault_every_case_repeats_costs_one_timeout(tmp_path: Path, name: str,
                                                         waited_for: str, why: str) -> None:
    cases = ["prompt-lifecycle", "ids-across-turns", "wire-shapes"]
    run = run_agent(name, tmp_path, timeout=TIMEOUT, protocol="both",
                    case=cases[0], extra=[a for c in cases[1:] for a in ("--case", c)])
    assert run.returncode == 1, run.stderr
    by_case: dict[str, dict[str, set[str]]] = {}
    for r in run.report["results"]:
        by_case.setdefault(r["case"], {}).setdefault(r["outcome"], set()).add(r["requirement"])
    [hang] = run.findings("TARGET/hang", "fail")  # the first v2 case in run order
    assert hang["case"].endswith("@v2") and waited_for in hang["message"], hang
    others = [f"{c}@v2" for c in cases if f"{c}@v2" != hang["case"]]
    assert len(others) == 2
    for case in others:
        assert set(by_case[case]) == {"not_applicable"}, by_case[case]
        said = {r["message"] for r in run.report["results"] if r["case"] == case}
        assert said == {f"not run: {why} in {hang['case']}"}, said
    for case in cases:  # v1 is untouched
        assert "fail" not in by_case[f"{case}@v1"], by_case[f"{case}@v1"]
    assert_contained(run, waited=TIMEOUT)  # one wait, not one per v2 case


V1_WAY = "then ended a turn the v1 way"
ASKED = "(the version asked for)"


@pytest.mark.parametrize("name, bad, found_says, said", [
    ("errors_v1_initialize", 1, "answered initialize (protocolVersion 1) with error -32602",
     "answered the v1 initialize with an error (error -32602"),
    ("claims_v1_speaks_v2", 1, f"answered protocolVersion 1 {ASKED}, then sent a v2 user_message",
     "answered protocolVersion 1, then sent a v2 user_message"),
    ("claims_v2_speaks_v1", 2, f"answered protocolVersion 2 {ASKED}, {V1_WAY}",
     f"answered protocolVersion 2, {V1_WAY}"),
    ("echoes_any_version", 2, f"answered protocolVersion 2 {ASKED}, {V1_WAY}",
     f"answered protocolVersion 2, {V1_WAY}"),
])
def test_a_failed_negotiation_is_one_finding_and_its_version_is_not_run(
        tmp_path: Path, name: str, bad: int, found_says: str, said: str) -> None:
    """An error to initialize, or a version answered and the other spoken: one
    TARGET/negotiation/agent fail naming the entry, at once (no wait, no TARGET/hang);
    that version's other cases are not run with that reason, never passes; the other
    version is graded as usual."""
    cases = ["prompt-lifecycle", "ids-across-turns", "wire-shapes"]
    run = run_agent(name, tmp_path, timeout=TIMEOUT, protocol="both",
                    case=cases[0], extra=[a for c in cases[1:] for a in ("--case", c)])
    assert run.returncode == 1, run.stderr
    [found] = run.findings("TARGET/negotiation/agent", "fail")
    first = found["case"]  # the first case of that version in run order
    assert first in {f"{c}@v{bad}" for c in cases} and found_says in found["message"], found
    assert found["evidence"]["entries"], found
    assert not run.findings("TARGET/hang", "fail")
    for r in run.report["results"]:
        if r["case"].endswith(f"@v{bad}"):
            assert r["outcome"] != "pass", r
            if r["requirement"] != "TARGET/negotiation/agent":
                assert r["outcome"] == "not_applicable" and r["reason"] == "not_run", r
    for case in cases:
        said_there = {r["message"] for r in run.report["results"] if r["case"] == f"{case}@v{bad}"
                      and r["requirement"] != "TARGET/negotiation/agent"}
        assert len(said_there) == 1, said_there
        assert said_there.pop().startswith(f"not run: the agent {said}"), case
        if f"{case}@v{bad}" != first:
            assert said_there == set() and first in next(
                r["message"] for r in run.report["results"] if r["case"] == f"{case}@v{bad}")
    good = 3 - bad
    assert not [r for r in run.report["results"] if r["case"].endswith(f"@v{good}")
                and r["outcome"] == "fail"]
    cases_of = {c["case"]: c for c in run.report["cases"]}
    assert all(not cases_of[f"{c}@v{bad}"].get("aborted") for c in cases)
    assert_contained(run, waited=0)  # no wait on the bad version


def test_writes_100mb_line_without_newline(tmp_path: Path) -> None:
    run = run_agent("huge_line", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    only(run, "TARGET/hang")
    f = only(run, "MID-S-06/framing")
    cut = re.search(r"line cap of (\d+) bytes \(the line was (\d+) bytes", f["message"])
    assert cut, f["message"]
    assert int(cut.group(1)) == 16 * 1024 * 1024
    # Up to 100 MB: the agent may still be writing when the suite ends it.
    assert 16 * 1024 * 1024 < int(cut.group(2)) <= 100 * 1024 * 1024 + 100
    assert "no newline" in f["message"]
    assert f["evidence"]["actual"].startswith('{"jsonrpc":"2.0","id":0,"result":{"padding":"xxx')
    assert len(f["evidence"]["actual"]) < 300  # the evidence is cut too
    # What the transcript keeps of the line is capped, and says how long it was.
    cut_entries = [e for e in _entries(run) if e.truncated]
    assert cut_entries and len(cut_entries[0].raw or "") == 16 * 1024 * 1024
    assert cut_entries[0].truncated == int(cut.group(2))
    assert run.max_rss_mb < 250, f"peak memory {run.max_rss_mb:.0f} MB"
    assert_contained(run, waited=TIMEOUT)


def test_writes_invalid_utf8(tmp_path: Path) -> None:
    run = run_agent("invalid_utf8", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "MID-S-06/framing")
    assert "invalid UTF-8 at byte" in f["message"]
    assert "\\xe9" in f["message"] and "\\xff\\xfe" in f["message"]  # the offending bytes
    assert f["evidence"]["actual"].startswith("base64:")
    # Everything else still ran: the handshake and both prompts were graded.
    assert not run.findings("TARGET/hang", "fail") and not run.findings("TARGET/exit", "fail")
    assert_contained(run, waited=0)


def test_writes_non_json_lines(tmp_path: Path) -> None:
    run = run_agent("non_json", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    # Both log lines are one fault (the agent logs to stdout): one finding, counted twice,
    # with the first line shown and both lines among its entries.
    [f] = run.findings("MID-S-06/framing", "fail")
    assert "loading model weights" in f["evidence"]["actual"], f
    assert f.get("occurrences") == 2 and len(f["evidence"]["entries"]) == 2, f
    assert "\x1b" not in run.stdout  # an ANSI escape from the target never reaches the console
    assert_contained(run, waited=0)


def test_writes_json_that_is_not_jsonrpc(tmp_path: Path) -> None:
    run = run_agent("not_jsonrpc", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    messages = " | ".join(f["message"] for f in run.findings("MID-S-06/jsonrpc", "fail"))
    assert '"jsonrpc": "2.0"' in messages
    assert "array" in messages or "batch" in messages
    assert_contained(run, waited=0)


def test_floods_stderr_while_behaving(tmp_path: Path) -> None:
    run = run_agent("stderr_flood", tmp_path, timeout=TIMEOUT)
    # The protocol traffic is fine, but 100 MB of logs is a flood: a fail with the
    # byte count as evidence, and an info row saying what the suite kept.
    assert run.returncode == 1, run.stdout + run.stderr
    flood = only(run, "TARGET/stderr-flood", "fail")
    assert flood["evidence"]["actual"]["stderr_bytes"] >= 100 * 1024 * 1024
    assert not [r for r in run.report["results"] if r["outcome"] == "fail"
                and r["requirement"] != "TARGET/stderr-flood"]
    f = only(run, "TARGET/output-cap", "info")
    assert f["evidence"]["actual"]["stderr_bytes"] >= 100 * 1024 * 1024
    assert f["evidence"]["actual"]["stderr_kept"] == 256 * 1024
    assert "the transcript keeps the first 262144 bytes" in f["message"]
    stderr_entries = [e for e in _entries(run) if e.stream == "stderr"]
    assert sum(len(e.raw or "") + 1 for e in stderr_entries) <= 256 * 1024 + len(stderr_entries)
    assert run.max_rss_mb < 80, f"peak memory {run.max_rss_mb:.0f} MB"  # 100 MB went by
    assert_contained(run, waited=0)


def test_grandchild_holds_pipes_after_the_agent_exits(tmp_path: Path) -> None:
    # A long --timeout: the exit must be noticed at once, not after a silence of 30 s.
    run = run_agent("grandchild_holds_pipes", tmp_path, timeout=30)
    assert run.returncode == 1, run.stderr
    f = only(run, "TARGET/exit")
    assert f["evidence"]["actual"]["output_held"] is True
    assert f["evidence"]["actual"]["returncode"] == 0
    assert "still holds its output open" in f["message"]
    assert run.elapsed < 2.0 + SLACK, f"took {run.elapsed:.1f} s: waited for the timeout?"
    assert_contained(run, waited=0)


def test_grandchild_that_leaves_the_group_cannot_block_the_run(tmp_path: Path) -> None:
    run = run_agent("grandchild_holds_pipes", tmp_path, timeout=TIMEOUT,
                    env={"HOSTILE_ESCAPE": "1"})
    try:
        assert run.returncode == 1, run.stderr
        only(run, "TARGET/exit")
        notes = [e["data"].get("note", "") for e in run.harness_events("note")]
        assert any("held by a process that left the group" in n for n in notes), notes
        assert_contained(run, waited=0, grace_rounds=2)
    finally:  # the escaped helper is ours: end it by its pid (it names it on stderr)
        for pid in re.findall(r"started helper process (\d+)", _stderr_of(run)):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_closes_stdout_but_keeps_running(tmp_path: Path) -> None:
    run = run_agent("closes_stdout", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "TARGET/exit")
    assert f["evidence"]["actual"]["still_running"] is True
    assert "closed its stdout but kept running" in f["message"]
    assert_contained(run, waited=TIMEOUT)


def test_answers_with_ids_that_match_nothing(tmp_path: Path) -> None:
    run = run_agent("unmatched_ids", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    found = run.findings("TARGET/unmatched-response", "fail")
    shown = {f["evidence"]["actual"]["id"] for f in found}
    assert shown == {'"0"', '{"id": 0}', "1000"}, shown
    only(run, "TARGET/hang")  # no answer ever came
    assert_contained(run, waited=TIMEOUT)


def test_ignores_sigterm(tmp_path: Path) -> None:
    run = run_agent("ignores_sigterm", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "TARGET/shutdown")
    assert f["evidence"]["actual"]["ended_by"] == "sigkill"
    assert f["evidence"]["actual"]["signal"] == "SIGKILL"
    assert_contained(run, waited=0, grace_rounds=2)


def test_slow_shutdown_is_information_with_its_duration(tmp_path: Path) -> None:
    """An agent that flushes a store for longer than the grace is ended by SIGTERM: how
    long that took is information, never a warning, and the run passes."""
    run = run_agent("slow_shutdown", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    f = only(run, "TARGET/shutdown-slow", "info")
    took = f["evidence"]["actual"]["exit_seconds"]
    assert GRACE <= took < 2 * GRACE + SLACK, took
    assert f"exited {took} s after its stdin closed" in f["message"]
    assert not run.findings("TARGET/shutdown-slow", "warn")
    assert {r["outcome"] for r in run.report["results"]
            if r["requirement"] == "TARGET/shutdown"} == {"pass"}
    assert_contained(run, waited=0, grace_rounds=2)


def test_target_that_stops_reading_cannot_block_a_write(tmp_path: Path) -> None:
    """A full stdin pipe ends in a timeout event, not a write blocked forever."""
    transcript = tmod.Transcript()
    proc = TargetProcess([sys.executable, "-c", "import time; time.sleep(60)"], transcript,
                         conn=0, src="agent", write_timeout=0.5, grace=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(TargetTimeout):
            proc.send(None, raw=b"x" * (4 * 1024 * 1024))
        assert time.monotonic() - started < 0.5 + SLACK
        events = [e for e in transcript if e.event == "timeout"]
        assert events and events[0].data["waiting_for"] == "the target to read its input"
    finally:
        info = proc.close()
    assert info.ended_by in ("sigterm", "stdin-eof")
    assert not group_alive(proc.pgid)


def test_lines_the_suite_has_not_taken_are_bounded(tmp_path: Path) -> None:
    """A target that writes faster than the suite reads fills its pipe, not our memory:
    the reader holds back at the byte budget, and once the suite reads on, every line
    arrives, in order."""
    lines, budget = 30_000, 256 * 1024
    code = (f"import sys\nfor i in range({lines}):\n"
            "    sys.stdout.write('{\"n\": %d, \"pad\": \"%s\"}\\n' % (i, 'x' * 1000))\n")
    transcript = tmod.Transcript()
    proc = TargetProcess([sys.executable, "-c", code], transcript, conn=0, src="agent",
                         grace=2.0, max_queued=budget)
    try:
        assert proc.held_back.wait(60), "the reader never reached the budget"
        one_line = 512 + 1100
        assert proc.queued <= budget + one_line
        seen = []
        while True:
            try:
                seen.append(proc.receive(60).msg["n"])
            except TargetExited:
                break
        assert seen == list(range(lines))
        assert proc.queued_peak <= budget + one_line
    finally:
        info = proc.close()
    assert info.returncode == 0
    assert not group_alive(proc.pgid)


def _entries(run: Run) -> list[tmod.Entry]:
    return [e for path in run.transcripts for e in tmod.load(path)[1]]


def _stderr_of(run: Run) -> str:
    return "".join(e.raw or "" for e in _entries(run) if e.stream == "stderr")


def test_fixture_table_lists_every_hostile_agent() -> None:
    readme = (Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "README.md")
    table = readme.read_text("utf-8")
    agents = sorted(p.stem for p in (readme.parent / "agents").glob("[a-z]*.py"))
    for name in agents:
        assert f"`{name}`" in table, f"{name} is missing from fixtures/hostile/README.md"
    tested = "".join(p.read_text("utf-8") for p in Path(__file__).parent.glob("test_*.py"))
    for name in agents:
        assert f'"{name}"' in tested, f"{name} has no test"


def test_a_ready_line_nobody_reads_any_more_does_not_end_the_agent(tmp_path: Path) -> None:
    """Cases side by side share one ready FIFO; the test reads the first line and closes
    it. An agent that writes after that must go on with its hostile part (a case the test
    interrupts must still be in flight), not exit as if its stdout had closed. Made certain
    here: a line longer than the FIFO holds blocks its writer until the reader closes."""
    import subprocess

    from helpers import wait_ready

    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    agents = Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "agents"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from _hostile import signal_ready; "
            "signal_ready('x' * 1_000_000); print('went on')")
    proc = subprocess.Popen([sys.executable, "-c", code, str(agents)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HOSTILE_READY_FIFO": str(fifo)})
    try:
        assert wait_ready(fifo).startswith("x")  # one read, then the FIFO is closed
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out) == (0, "went on\n"), err


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_well_formed_messages_with_inside_values_of_the_wrong_type(tmp_path: Path,
                                                                    protocol: str) -> None:
    """A sessionUpdate that is an array or an object, an update that is an array, params
    that are a string, permission requests whose sessionId is an array, whose first
    option is a string or whose options are a number, in every turn: the run grades them
    and ends with its reports. The driver used to look a v1 sessionUpdate up in a set of
    v2 kinds, and to take a string option for an object; either ended the whole run with
    an internal error (both found by editing a reference agent's output at random)."""
    run = run_agent("odd_update_shapes", tmp_path, timeout=TIMEOUT, protocol=protocol)
    assert run.returncode == 1, run.stderr
    assert "internal error" not in run.stderr, run.stderr
    # the string params break JSON-RPC 2.0 (params are an object or an array)
    [f] = run.findings("MID-S-06/jsonrpc", "fail")
    assert '"params" is neither an object nor an array' in f["message"], f
    assert_contained(run, waited=0)
    # the suite's answers: the one option that is an object, and cancelled with none
    answers: dict[str, list[object]] = {"odd-options": [], "number-options": []}
    for path in run.transcripts:
        for e in tmod.load(path)[1]:
            m = e.msg
            if e.src == "client" and isinstance(m, dict) and m.get("id") in answers:
                answers[m["id"]].append(m.get("result"))
    assert answers["odd-options"], "the suite never answered the request"
    assert all(r == {"outcome": {"outcome": "selected", "optionId": "b"}}
               for r in answers["odd-options"]), answers
    assert answers["number-options"] and all(
        r == {"outcome": {"outcome": "cancelled"}} for r in answers["number-options"]), answers
