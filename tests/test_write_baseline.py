"""``--write-baseline FILE``: an agent that fails today adopts the suite in one command.

The file lists the run's fails (headed by the catalogue revision and the day); the same
target run with ``--baseline FILE`` passes; a target that no longer fails an entry has it
reported stale, and fails, as a hand-written baseline does."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from conftest import REPO_ROOT, load_json, run_cli

BROKEN = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"
REFERENCE = f"{sys.executable} -m conformance.reference.agent"
CASES = ("--case", "ids-across-turns", "--case", "prompt-lifecycle", "--protocol", "1",
         "--no-color")


def test_a_written_baseline_turns_a_failing_run_green_and_goes_stale_when_fixed(
        tmp_path: Path) -> None:
    written = tmp_path / "ci" / "acp-baseline.yaml"
    (tmp_path / "ci").mkdir()
    first = run_cli("--agent", BROKEN, *CASES, "--json", str(tmp_path / "first.json"),
                    "--write-baseline", str(written))
    assert first.returncode == 1, first.stdout + first.stderr  # writing it changes no verdict
    assert f"baseline: wrote 4 expected failure(s) to {written}" in first.stderr
    text = written.read_text(encoding="utf-8")
    report = load_json(tmp_path / "first.json")
    header = text.split("expected_failures:", 1)[0]
    assert f"graded against catalogue {report['graded_against']['catalogue']} on " \
           f"{report['date']}" in header
    assert all(line.startswith("#") for line in header.strip().splitlines())
    entries = yaml.safe_load(text)["expected_failures"]
    fails = {f"{r['case']}:{r['requirement']}" for r in report["results"]
             if r["outcome"] == "fail"}
    assert sorted(entries) == sorted(fails) and len(entries) == 4

    again = run_cli("--agent", BROKEN, *CASES, "--baseline", str(written))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "baseline: 8 expected failure(s), 0 unexpected, 0 stale" in again.stdout
    assert "verdict with baseline: PASS" in again.stdout

    state = f"ACP_REFERENCE_STATE_DIR={tmp_path / 'state'}"
    fixed = run_cli("--agent", REFERENCE, "--agent-env", state, *CASES,
                    "--baseline", str(written))
    assert fixed.returncode == 1, fixed.stdout + fixed.stderr
    assert "0 unexpected, 4 stale" in fixed.stdout
    assert f"stale: ids-across-turns@v1:MID-A-02/cross-turn-reuse ({written}:" in fixed.stdout


def test_a_clean_run_writes_an_empty_baseline_and_a_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    proc = run_cli("--agent", REFERENCE, "--agent-env",
                   f"ACP_REFERENCE_STATE_DIR={tmp_path / 'state'}", *CASES,
                   "--json", str(tmp_path / "r.json"), "--write-baseline", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert yaml.safe_load(path.read_text(encoding="utf-8")) == {"expected_failures": []}
    refused = run_cli("--agent", REFERENCE, *CASES, "--write-baseline", str(tmp_path))
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("is a directory, expected a file path")
