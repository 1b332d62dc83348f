"""``fuzz`` and the suite agree on what they both see: a negotiation or lifecycle fault
the suite fails is a fail in ``fuzz`` too, in the same version, under the same rule.

Each broken negotiation fixture (fixtures/hostile: an agent that answers one version
and speaks another, answers any version, or errors to initialize; one that never
answers a v2 initialize) is run through both, for real: the suite on one case per
version, ``fuzz`` at its smallest effort.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import REPO_ROOT, agent_command, cli_env

FIXTURES = {  # fixture -> the (rule, version) fault the suite fails it for
    "claims_v2_speaks_v1": ("TARGET/negotiation/agent", 2),
    "echoes_any_version": ("TARGET/negotiation/agent", 2),
    "claims_v1_speaks_v2": ("TARGET/negotiation/agent", 1),
    "errors_v1_initialize": ("TARGET/negotiation/agent", 1),
    "mute_to_v2": ("TARGET/hang", 2),
}


def run(args: list[str], tmp: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    report = tmp / "report.json"
    done = subprocess.run([sys.executable, "-m", "conformance", *args, "--json", str(report),
                           "--out", str(tmp / "out"), "--no-color"],
                          cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True,
                          timeout=600, check=False)
    assert report.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return done, json.loads(report.read_text("utf-8"))


def failing(report: dict) -> set[tuple[str, int]]:
    protocol = {c["case"]: c["protocol"] for c in report["cases"]}
    return {(r["requirement"], protocol[r["case"]]) for r in report["results"]
            if r["outcome"] == "fail"}


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_fuzz_fails_what_the_suite_fails(tmp_path: Path, fixture: str) -> None:
    fault = FIXTURES[fixture]
    agent = agent_command(fixture)
    suite, suite_report = run(["--agent", agent, "--case", "prompt-lifecycle",
                               "--timeout", "3"], tmp_path / "suite")
    assert suite.returncode == 1, suite.stderr
    assert fault in failing(suite_report)

    fuzz, fuzz_report = run(["fuzz", "--agent", agent, "--effort", "ci", "--seed", "1",
                             "--timeout", "3", "--no-save"], tmp_path / "fuzz")
    assert fuzz.returncode == 1, fuzz.stdout[-3000:] + fuzz.stderr[-2000:]
    assert fuzz_report["summary"]["verdict"] == "fail"
    assert fault in failing(fuzz_report), (failing(fuzz_report), fuzz.stdout[-3000:])
    assert "PASS" not in fuzz.stdout.split("verdict:")[-1]
