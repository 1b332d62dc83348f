"""The fuzz road through pytest when the target's timing changes what a run draws: a
finding or a clear note, never Hypothesis' own flakiness error.

On a busy machine an agent can answer a replayed run differently from the run that
found a fault; Hypothesis then raises ``FlakyStrategyDefinition`` ("the second run
stopped drawing earlier than the first run") or ``FlakyFailure``. The fixture
``fixtures/harness/changes_on_replay.py`` does deterministically what such an agent does
by chance: it breaks MID-S-01 in the first process that gets a prompt and refuses
``session/new`` in every later one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, cli_env

CHANGES = REPO_ROOT / "fixtures" / "harness" / "changes_on_replay.py"


def pytest_fuzz(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env()
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin", "-p",
         "no:cacheprovider", "--rootdir", str(tmp_path), "-q", "-rs", "--acp-fuzz", *args],
        check=False, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_a_run_the_agent_does_not_repeat_reports_the_finding(tmp_path: Path) -> None:
    work, regs = tmp_path / "work", tmp_path / "regs"
    work.mkdir()
    proc = pytest_fuzz(work, "--acp-agent", f"{sys.executable} {CHANGES}",
                       "--acp-agent-env", f"ACP_FIXTURE_MARK={tmp_path / 'mark'}",
                       "--acp-protocol", "1", "--acp-regressions", str(regs))
    out = proc.stdout + proc.stderr
    assert (tmp_path / "mark").exists(), out  # the fault was shown, then runs changed
    assert proc.returncode == 1, out
    assert "RuleBroken[MID-S-01/type]" in out and "MID-S-01/type (v1)" in out, out
    assert "FlakyStrategyDefinition" not in out and "Inconsistent data generation" not in out, out
    assert [p.name for p in regs.glob("*.jsonl")], out  # shrunk and saved as any finding


class _Campaign:
    handled: dict[Any, Any] = {}
    masker = None


@pytest.mark.parametrize("error", ["FlakyStrategyDefinition", "FlakyFailure"])
def test_a_flaky_run_that_broke_no_rule_is_a_skip_that_says_why(error: str) -> None:
    """No rule broke in this process: not a pass and not Hypothesis' traceback, but a
    skip whose reason says the target did not repeat a run the same way."""
    from hypothesis import errors

    from conformance.pytest_plugin.fuzzing import timing_proof

    def test() -> None:
        if error == "FlakyFailure":
            raise errors.FlakyFailure("did not fail again", [AssertionError("x")])
        raise errors.FlakyStrategyDefinition("the second run stopped drawing earlier")

    with pytest.raises(pytest.skip.Exception) as skipped:
        timing_proof(test, _Campaign(), 1)()
    assert "did not repeat a run the same way" in str(skipped.value)
    assert error in str(skipped.value)


def test_a_flaky_failure_raises_the_rule_it_broke() -> None:
    """Hypothesis wraps the run's own error in its FlakyFailure group: that error (the
    rule broken, shrunk and saved) is what the test fails with."""
    from hypothesis import errors

    from conformance.fuzz.campaign import CampaignFailure
    from conformance.pytest_plugin.fuzzing import timing_proof

    class Broken(CampaignFailure):
        def __init__(self) -> None:
            AssertionError.__init__(self, "MID-S-01/type (v1): a number messageId")

    def test() -> None:
        raise errors.FlakyFailure("did not fail again", [Broken()])

    with pytest.raises(Broken, match="MID-S-01/type"):
        timing_proof(test, _Campaign(), 1)()
