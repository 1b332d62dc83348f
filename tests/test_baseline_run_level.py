"""Baselines adopt every fault: a run-level fault (an agent that answers protocolVersion 2
and then speaks v1: ``TARGET/negotiation/agent``, after which no v2 case runs) is written
by ``--write-baseline`` as an entry ``--baseline`` reads, for its version, under a comment
of what it means and its usual fix; listed, the run passes and says the version was left
untested as expected; a target that no longer fails it has the entry reported stale, and
fails. The same baseline through the pytest plugin: the fault is an xfail, the session
passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, run_cli

pytest_plugins = ["pytester"]

BROKEN = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'hostile' / 'agents' / 'claims_v2_speaks_v1.py'}"
REFERENCE = f"{sys.executable} -m conformance.reference.agent"
ENTRY = "*@v2:TARGET/negotiation/agent"


def test_a_negotiation_fault_is_written_read_expected_and_goes_stale(tmp_path: Path) -> None:
    written = tmp_path / "acp-baseline.yaml"
    common = ("--timeout", "5", "--no-color", "--out", str(tmp_path / "out"))
    first = run_cli("--agent", BROKEN, *common, "--write-baseline", str(written), timeout=300)
    assert first.returncode == 1, first.stdout + first.stderr  # writing it changes no verdict
    assert f"baseline: wrote 1 expected failure(s) to {written}" in first.stderr
    text = written.read_text(encoding="utf-8")
    assert "not listable" not in text
    assert yaml.safe_load(text)["expected_failures"] == [ENTRY]
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if ENTRY in line)
    meaning = lines[at - 1]  # the entry says what it means and the usual fix
    assert meaning.lstrip().startswith("# the agent answered protocolVersion 2")
    assert "--protocol 1" in meaning and "negotiation" in meaning

    again = run_cli("--agent", BROKEN, *common, "--baseline", str(written), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "baseline: 1 expected failure(s), 0 unexpected, 0 stale" in again.stdout
    assert ("v2 not tested, as expected: the baseline lists TARGET/negotiation/agent"
            in again.stdout)
    assert "verdict with baseline: PASS" in again.stdout
    assert "not tested: no v2 case ran to its end" in again.stderr  # the reports still say so

    fixed = run_cli("--agent", REFERENCE, "--agent-env",
                    f"ACP_REFERENCE_STATE_DIR={tmp_path / 'state'}", "--case", "prompt-lifecycle",
                    *common, "--baseline", str(written), timeout=300)
    assert fixed.returncode == 1, fixed.stdout + fixed.stderr
    assert "0 unexpected, 1 stale" in fixed.stdout
    assert f"stale: {ENTRY} ({written}:" in fixed.stdout


def test_a_hand_written_entry_for_the_case_is_read(tmp_path: Path) -> None:
    """The shape the issue was refused with: a case-pinned run-level entry."""
    path = tmp_path / "b.yaml"
    path.write_text("- prompt-lifecycle@v2:TARGET/negotiation/agent\n", encoding="utf-8")
    proc = run_cli("--agent", BROKEN, "--case", "prompt-lifecycle", "--timeout", "5",
                   "--no-color", "--out", str(tmp_path / "out"), "--baseline", str(path),
                   timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "baseline: 1 expected failure(s), 0 unexpected, 0 stale" in proc.stdout


def test_the_plugin_reads_the_written_baseline(pytester: pytest.Pytester,
                                               monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    written = tmp_path / "acp-baseline.yaml"
    first = run_cli("--agent", BROKEN, "--timeout", "5", "--no-color", "--out",
                    str(tmp_path / "out"), "--write-baseline", str(written), timeout=300)
    assert first.returncode == 1 and written.exists(), first.stderr
    args = ("-p", "conformance.pytest_plugin", "-p", "no:cacheprovider", "--acp-agent", BROKEN,
            "--acp-timeout", "5", "-rxs")
    plain = pytester.runpytest_subprocess(*args, timeout=300)
    assert plain.ret == 1
    plain.assert_outcomes(passed=14, failed=1, skipped=17)
    listed = pytester.runpytest_subprocess(*args, "--acp-baseline", str(written), timeout=300)
    assert listed.ret == 0, listed.stdout.str()[-3000:]
    listed.assert_outcomes(passed=14, xfailed=1, skipped=17)
    text = listed.stdout.str()
    assert "baseline lists 1 failure(s): TARGET/negotiation/agent" in text
    assert "v2 not tested, as expected" in text
