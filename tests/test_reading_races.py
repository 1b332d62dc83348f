"""The benefit of the doubt against running agents: the race between the suite's request
and the target's output decides no fail or warn, in any run.

Each conformant fixture that writes while the suite's resume or load arrives is run
several times through the case that races it (``replay-marker-while-streaming@v2``, or
``resume-without-replay-while-streaming@v2`` and ``-while-queued@v2`` for a resume
without replayFrom, ``load-while-streaming@v1`` for a v1 load), v2 under
``acp-schema-1.21`` (the profile with the replay marker): clean every time. The reading
itself is held on hand-written transcripts in test_reading.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, load_json, outcomes, run_cli

RUNS = 4
MARKER = "replay-marker-while-streaming"
#: (fixture, the case whose request races its output, the protocol version)
RACERS = [("v2_new_message_before_replay", MARKER, 2), ("v2_pause_before_tool", MARKER, 2),
          ("v2_busy_resume_without_replay", "resume-without-replay-while-streaming", 2),
          ("v2_busy_queued_echo", "resume-without-replay-while-queued", 2),
          ("busy_load_while_streaming", "load-while-streaming", 1)]


@pytest.mark.slow
@pytest.mark.parametrize("name,case,protocol", RACERS, ids=[n for n, *_ in RACERS])
def test_a_racing_conformant_agent_is_clean_in_every_run(tmp_path: Path, name: str,
                                                         case: str, protocol: int) -> None:
    command = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / (name + '.py')}"
    for run in range(RUNS):
        report = tmp_path / f"run{run}.json"
        # v2 under the profile with the replay marker
        profile = ["--profile", "acp-schema-1.21"] if protocol == 2 else []
        proc = run_cli("--agent", command, "--protocol", str(protocol), *profile,
                       "--case", case, "--json", str(report),
                       "--transcripts", str(tmp_path / f"t{run}"), "-j", "1", timeout=240)
        assert report.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
        found = outcomes(load_json(report))
        assert proc.returncode == 0, (run, found, proc.stdout[-2000:])
        assert "fail" not in found and "warn" not in found, (run, found)
        assert len(found.get("pass", ())) >= 10, (run, found)  # it really graded the case


@pytest.mark.slow
def test_the_broken_demo_agents_racing_rows_are_the_same_in_every_run(tmp_path: Path) -> None:
    """The demo's broken agent races the suite's cancel (cancel-mid-turn) and its second
    prompt (prompts-in-flight): the rows (case, rule, outcome, message) do not move with
    how far it writes before it reads them."""
    command = f"{sys.executable} -m conformance.reference.broken agent"
    seen = []
    for run in range(RUNS - 1):
        report = tmp_path / f"run{run}.json"
        run_cli("--agent", command, "--profile", "acp-schema-1.21", "--case", "cancel-mid-turn",
                "--case", "prompts-in-flight", "--json", str(report), "-j", "1", timeout=240)
        assert report.exists()
        rows = {(r["case"], r["requirement"], r["outcome"], r["message"])
                for r in load_json(report)["results"] if r["outcome"] in ("fail", "warn", "info")}
        assert {c for c, *_ in rows} >= {"cancel-mid-turn@v1", "prompts-in-flight@v2"}, rows
        seen.append(rows)
    assert all(rows == seen[0] for rows in seen), seen
