"""The benefit of the doubt against running agents: the race between the suite's request
and the target's output decides no fail or warn, in any run.

Each conformant fixture that writes while the suite's ``session/resume`` arrives is run
several times through ``replay-marker-while-streaming@v2`` under ``acp-schema-1.21``
(the profile with the replay marker): clean every time. The reading itself is held on
hand-written transcripts in test_reading.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, load_json, outcomes, run_cli

RUNS = 4
RACERS = ["v2_new_message_before_replay", "v2_pause_before_tool"]


@pytest.mark.slow
@pytest.mark.parametrize("name", RACERS)
def test_a_racing_conformant_agent_is_clean_in_every_run(tmp_path: Path, name: str) -> None:
    command = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / (name + '.py')}"
    for run in range(RUNS):
        report = tmp_path / f"run{run}.json"
        proc = run_cli("--agent", command, "--protocol", "2", "--profile", "acp-schema-1.21",
                       "--case", "replay-marker-while-streaming", "--json", str(report),
                       "--transcripts", str(tmp_path / f"t{run}"), "-j", "1", timeout=240)
        assert report.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
        found = outcomes(load_json(report))
        assert proc.returncode == 0, (run, found, proc.stdout[-2000:])
        assert "fail" not in found and "warn" not in found, (run, found)
        assert len(found.get("pass", ())) >= 10, (run, found)  # it really graded the case
