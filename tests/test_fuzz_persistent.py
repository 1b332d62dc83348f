"""Persistent agent fuzzing: many generated runs on one agent process.

Against live processes: the reference agent is fuzzed with reuse and stays
clean; a fixture whose fault needs many sessions on one process
(``session_table_reset``) is found by persistent fuzzing and not by a fresh
process per run within the same budget, and its counterexample keeps the
earlier runs' steps it needs, replays to the same fail on a fresh process, and
grades offline to it. The step-list arithmetic (:func:`compose`) and the
progress line are checked without a target.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, run_cli
from helpers import fixture_target, reference_target, saved_and_read

from conformance.checks import Options
from conformance.fuzz import persistent, regressions
from conformance.fuzz.agent_fuzz import run_agent_fuzz
from conformance.fuzz.agent_machine import AgentFuzzConfig
from conformance.fuzz.settings import Budget, get_effort

CROSS = "session_table_reset"
PERSISTENT = {fx["name"]: fx for fx in yaml.safe_load(
    (REPO_ROOT / "fixtures" / "agents" / "manifest.yaml").read_text())["persistent"]}


def test_compose_plays_later_runs_on_the_same_process() -> None:
    first = ["start", "new_session", {"prompt": {"text": "a"}}, "new_session",
             {"switch": {"session": 0}}]
    second = ["start", "new_session", "new_session", {"switch": {"session": 1}},
              {"prompt": {"text": "b"}}]
    steps = persistent.compose([first], second)
    # the second run's start is not played (its process was reused) and its switch names
    # its own second session, the process's fourth
    assert steps == first + ["new_session", "new_session", {"switch": {"session": 3}},
                             {"prompt": {"text": "b"}}]
    assert persistent.earlier_sessions([first]) == 2
    assert persistent.compose([], second) == second


def test_reference_agent_is_fuzzed_on_reused_processes(tmp_path: Path) -> None:
    effort = get_effort("ci", max_examples=30)
    # persistent on purpose, also where $ACP_FUZZ_FRESH_PROCESS makes fresh the default
    reused = run_agent_fuzz(AgentFuzzConfig(reference_target(tmp_path / "a"), strict=True,
                                            runs_per_process=persistent.DEFAULT_RUNS_PER_PROCESS),
                            effort, 20261129)
    fresh = run_agent_fuzz(AgentFuzzConfig(reference_target(tmp_path / "b"), strict=True,
                                           runs_per_process=1), effort, 20261129)
    assert reused.failures == [] and fresh.failures == [], (
        [(f.requirement, f.steps) for f in reused.failures + fresh.failures])
    assert reused.reused > reused.examples // 2  # most runs started on a kept process
    assert fresh.reused == 0
    assert reused.processes < fresh.processes
    passed = {r for rows in reused.coverage.values() for r, f in rows.items()
              if f.outcome.value == "pass"}
    assert len(passed) >= 15  # a reused process's runs are graded as fully as fresh ones


def test_cross_session_fault_needs_persistent_mode(tmp_path: Path) -> None:
    """The fixture reuses IDs only after 40 IDs in one process: a fresh process per run
    never gets there; persistent fuzzing does, and the counterexample keeps the earlier
    runs' steps, replays to the same fail on a fresh process, and is fixed by the
    reference agent."""
    effort = get_effort("ci", max_examples=150)
    effort = type(effort)(**{**effort.__dict__, "time_budget": 240.0})

    def config(state: Path, runs: int) -> AgentFuzzConfig:
        return AgentFuzzConfig(fixture_target(CROSS, state), protocols=(1,), strict=True,
                               max_failures=1, shrink_attempts=40, shrink_budget=120,
                               runs_per_process=runs)

    fresh = run_agent_fuzz(config(tmp_path / "fresh", 1), effort, 1)
    assert fresh.failures == [], [(f.requirement, f.steps) for f in fresh.failures]
    assert fresh.reused == 0

    found = run_agent_fuzz(config(tmp_path / "persistent", 50), effort, 1)
    assert len(found.failures) == 1, found.notes
    failure = found.failures[0]
    assert failure.requirement in PERSISTENT[CROSS]["expect"]["v1"]["fail"], failure.requirement
    assert not failure.unconfirmed
    assert failure.history_steps > 0 and failure.earlier_sessions >= 1
    line = persistent.describe_history(failure)
    assert line is not None
    assert f"seen after {failure.earlier_sessions} earlier session(s)" in line
    assert failure.steps[0] == "start" and failure.steps.count("start") == 1

    reg = saved_and_read(tmp_path / "lib", failure, found)
    assert reg.steps == failure.steps
    assert reg.header["earlier_sessions"] == failure.earlier_sessions
    common = {"options": Options(), "strict": True, "cwd": str(tmp_path), "attempts": 2}
    still = regressions.replay_agent(reg, fixture_target(CROSS, tmp_path / "replay"), **common)
    assert still.status == regressions.STILL_FAILING, still.note
    assert failure.requirement in {f.requirement for f in still.findings}
    fixed = regressions.replay_agent(reg, reference_target(tmp_path / "ref"), **common)
    assert fixed.status == regressions.FIXED, [f.message for f in fixed.findings]
    # check grades the saved file as the fuzzer did
    checked = run_cli("check", str(reg.path), "--strict")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert failure.requirement in checked.stdout


def test_progress_shows_runs_per_second_and_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    budget = Budget(get_effort("ci"), label="agent", stream=stream, quiet_for=0, every=0)
    budget.started -= 4.0  # four seconds in
    budget.processes, budget.reused = 2, 6
    for _ in range(8):
        budget.example_started()
    line = stream.getvalue().rsplit("\r", 1)[-1]
    assert "8 runs" in line and "runs/s" in line, line
    assert "(6 runs on a reused one)" in line, line


def test_fresh_process_and_runs_per_process_are_checked() -> None:
    bad = run_cli("fuzz", "--agent", "python3 -c pass", "--runs-per-process", "0")
    assert bad.returncode == 2 and "--runs-per-process" in bad.stderr
    both = run_cli("fuzz", "--agent", "python3 -c pass", "--fresh-process",
                   "--runs-per-process", "5")
    assert both.returncode == 2 and "--fresh-process" in both.stderr
