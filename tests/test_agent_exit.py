"""An agent that exits on its own mid-case is a crash the suite did not cause: a
``TARGET/exit`` fail with its evidence, wherever in the case the exit comes (a wait for a
message, a grace window, or between the last step and the suite closing its stdin), and
never read as the quiet end of a turn or as an exit that followed the suite's close.

Real subprocesses: the CLI against fixtures/hostile/agents/exits_after_second_prompt.py
(which accepts its second prompt, then exits 0) and against the reference agent; the
driver itself against a real agent process for the exit that no wait sees."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from conformance.agent.driver import ClientDriver
from conformance.grading import grade_recorded
from conformance.results import Outcome
from conformance.transcript import Transcript

REPO = Path(__file__).resolve().parents[1]
FIXTURE = "exits_after_second_prompt"  # fixtures/hostile/agents/
EXITS = f"{sys.executable} {REPO / 'fixtures' / 'hostile' / 'agents' / (FIXTURE + '.py')}"
REFERENCE = f"{sys.executable} -m conformance.reference.agent"
CASE = "prompts-in-flight"


def _run(tmp_path: Path, agent: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    report = tmp_path / "report.json"
    proc = run_cli("--agent", agent, "--protocol", "2", "--timeout", "5", "--json",
                   str(report), "--transcripts", str(tmp_path / "t"), "--no-color", *extra,
                   timeout=300)
    assert report.exists(), proc.stdout + proc.stderr
    return proc.returncode, json.loads(report.read_text(encoding="utf-8")), proc.stdout


def _rows(report: dict[str, Any], rule: str, outcome: str | None = None) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["requirement"] == rule
            and (outcome is None or r["outcome"] == outcome)]


def test_an_exit_after_accepting_a_queued_prompt_is_a_crash_with_evidence(
        tmp_path: Path) -> None:
    """prompts-in-flight@v2: the second prompt is answered after the first turn's idle and
    the agent exits. The driver used to take that answer for the end of both turns and
    wait for the echo in a grace window, which took the closed output for a quiet end
    (only MID-V2-05/no-echo; TARGET/exit passed). It now waits for the second turn."""
    code, report, out = _run(tmp_path, EXITS, "--case", CASE)
    assert code == 1, out
    [exit_row] = _rows(report, "TARGET/exit", "fail")
    assert exit_row["case"] == f"{CASE}@v2"
    actual = exit_row["evidence"]["actual"]
    assert actual["returncode"] == 0 and not actual["still_running"], actual
    assert "prompt budget of this process spent" in actual["stderr_tail"], actual
    assert "the prompt to end" in exit_row["message"], exit_row
    # the transcript says the exit came before the suite closed the agent's stdin
    lines = (tmp_path / "t" / f"{CASE}@v2.jsonl").read_text(encoding="utf-8").splitlines()
    events = [json.loads(line).get("event") for line in lines[1:]]
    assert events.count("early-exit") == 1, events
    assert events.index("early-exit") < events.index("exit")
    # `check` on the saved transcript: the same row
    check = tmp_path / "check.json"
    run_cli("check", str(tmp_path / "t"), "--json", str(check), "--no-color")
    checked = json.loads(check.read_text(encoding="utf-8"))
    assert [r["message"] for r in _rows(checked, "TARGET/exit", "fail")] == [exit_row["message"]]


def test_the_reference_agent_passes_the_same_case(tmp_path: Path) -> None:
    code, report, out = _run(tmp_path, REFERENCE, "--case", CASE)
    assert code == 0, out
    assert [r["outcome"] for r in _rows(report, "TARGET/exit")] == ["pass"]
    assert not [r for r in report["results"] if r["outcome"] in ("fail", "warn")]


def test_every_case_that_sends_two_prompts_records_the_exit(tmp_path: Path) -> None:
    """In every case: each v2 case whose process gets a second prompt fails TARGET/exit
    with the exit code, the others pass it (one process, one prompt: no exit)."""
    code, report, out = _run(tmp_path, EXITS, "--keep-going")
    assert code == 1, out
    failed = {r["case"] for r in _rows(report, "TARGET/exit", "fail")}
    passed = {r["case"] for r in _rows(report, "TARGET/exit", "pass")}
    assert f"{CASE}@v2" in failed and "prompt-lifecycle@v2" in failed, failed
    assert "resume-without-replay@v2" in passed, passed  # one prompt per process
    for row in _rows(report, "TARGET/exit", "fail"):
        assert row["evidence"]["actual"]["returncode"] == 0, row
    for path in (tmp_path / "t").glob("*.jsonl"):
        events = [json.loads(line).get("event") for line in
                  path.read_text(encoding="utf-8").splitlines()[1:]]
        assert events.count("early-exit") <= 1, path.name


def _drive_one_prompt(tmp_path: Path, argv: list[str], wait: float) -> Transcript:
    """One v2 prompt to its end, then stop the agent once its process has ended on its own
    (or after a short wait, for an agent that does not end)."""
    transcript = Transcript({"role": "agent", "protocol": 2, "case": "exit-between-steps"})
    driver = ClientDriver(argv, transcript, protocol=2, timeout=10, cwd=str(tmp_path),
                          env={"ACP_REFERENCE_STATE_DIR": str(tmp_path / "state")})
    driver.start()
    try:
        driver.new_session()
        assert driver.prompt("Reply with two separate messages.") is None
        assert driver.proc is not None
        driver.proc.exited.wait(wait)  # the exit, if any, has happened: no wait saw it
    finally:
        driver.stop()
    return transcript


EXITS_AFTER_FIRST_TURN = """
import os, sys
sys.path.insert(0, {repo!r})
from conformance.reference.agent import ReferenceAgent, main

class ExitsAfterTurn(ReferenceAgent):
    def end_turn(self, turn, stop_reason):
        super().end_turn(turn, stop_reason)
        os._exit(3)

sys.exit(main(agent_class=ExitsAfterTurn))
"""


def test_an_exit_between_steps_is_not_taken_for_the_suites_close(tmp_path: Path) -> None:
    """An agent that exits after its turn's idle, before the suite closes its stdin: the
    driver records the early exit at stop (TARGET/exit fail, exit code 3); the reference
    agent, stopped the same way, has none."""
    script = tmp_path / "exits_after_turn.py"
    script.write_text(EXITS_AFTER_FIRST_TURN.format(repo=str(REPO)), encoding="utf-8")
    for argv, crashed in (([sys.executable, str(script)], True),
                          ([sys.executable, "-m", "conformance.reference.agent"], False)):
        transcript = _drive_one_prompt(tmp_path, argv, 10 if crashed else 0.5)
        early = [e for e in transcript.entries if e.event == "early-exit"]
        found = [f for f in grade_recorded(transcript.header, transcript.entries, protocol=2,
                                           select=["TARGET/exit"])
                 if f.requirement == "TARGET/exit"]
        if crashed:
            assert len(early) == 1 and early[0].data["returncode"] == 3, early
            assert "had not closed its stdin" in early[0].data["waiting_for"]
            assert [f.outcome for f in found] == [Outcome.FAIL], found
        else:
            assert early == [], early
            assert [f.outcome for f in found] == [Outcome.PASS], found


EXITS_AFTER_RESTORING = """
import os, sys
sys.path.insert(0, {repo!r})
from conformance.reference.agent import ReferenceAgent, main

class ExitsAfterRestoring(ReferenceAgent):
    def finish_restore(self, request_id, session, result, *, replay):
        super().finish_restore(request_id, session, result, replay=replay)
        os._exit(4)

sys.exit(main(agent_class=ExitsAfterRestoring))
"""


@pytest.mark.parametrize(("case", "protocol"), [("load-keeps-ids", "1"),
                                                 ("replay-marker-empty-session", "2")])
def test_an_exit_in_a_grace_window_is_not_its_quiet_end(tmp_path: Path, case: str,
                                                        protocol: str) -> None:
    """A case whose last step is a load or a resume ends in the grace window that follows
    its answer: an agent that exits there used to pass TARGET/exit (the window took the
    closed output for silence, the exit was recorded as following the suite's close)."""
    script = tmp_path / "exits_after_restoring.py"
    script.write_text(EXITS_AFTER_RESTORING.format(repo=str(REPO)), encoding="utf-8")
    report = tmp_path / "report.json"
    proc = run_cli("--agent", f"{sys.executable} {script}", "--protocol", protocol, "--case",
                   case, "--profile", "acp-schema-1.21" if protocol == "2" else "acp-sdk-2.4.0",
                   "--timeout", "5", "--json", str(report), "--no-color", timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [row] = _rows(json.loads(report.read_text(encoding="utf-8")), "TARGET/exit", "fail")
    assert row["evidence"]["actual"]["returncode"] == 4, row
    assert "the grace window to close (after session/" in row["message"], row
