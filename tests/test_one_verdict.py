"""One verdict: the same traffic gets the same grade live and offline.

Every broken fixture (agents and clients) x protocol is run live with --transcripts,
then ``check`` grades the saved transcripts: the findings, the summary and the exit
code must be identical, because both grade each case from the scope its transcript
header records (conformance/lifecycle.py). The comparison (``offline.py``) is made
on the live run each fixture's own test makes (test_agent_suite.py under the default
profile, test_client_fixtures.py), so each fixture runs live once. Here: the grading
options are recorded and reproduced, and a transcript with no recorded scope is
graded with the default scope, and its case says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO_ROOT, run_cli
from offline import assert_check_agrees


def live_then_check(args: list[str], tmp_path: Path) -> None:
    live_json = tmp_path / "live.json"
    live = run_cli(*args, "--transcripts", str(tmp_path / "t"), "--json", str(live_json),
                   "--no-color", timeout=300)
    assert live_json.exists(), live.stdout + live.stderr
    assert_check_agrees(live_json, tmp_path / "t", live.returncode, args)


def test_grading_options_are_recorded_and_reproduced(tmp_path: Path) -> None:
    command = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"
    live_then_check(["--agent", command, "--protocol", "1", "--cross-turn-reuse", "warn",
                     "--strict-ids", "--case", "ids-across-turns"], tmp_path)
    report = json.loads((tmp_path / "check.json").read_text(encoding="utf-8"))
    reuse = [r for r in report["results"] if r["requirement"] == "MID-A-02/cross-turn-reuse"]
    assert reuse and {r["outcome"] for r in reuse} == {"warn"}  # as recorded, not the default


def test_a_transcript_without_scope_is_graded_by_default_and_says_so(tmp_path: Path) -> None:
    command = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"
    proc = run_cli("--agent", command, "--protocol", "1", "--case", "ids-across-turns",
                   "--transcripts", str(tmp_path / "t"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    path = tmp_path / "t" / "ids-across-turns@v1.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    for key in ("scope", "ended", "requirements"):
        header.pop(key)
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    check = run_cli("check", str(foreign), "--json", str(out))
    assert check.returncode == 1
    report = json.loads(out.read_text(encoding="utf-8"))
    assert "no grading scope recorded" in report["cases"][0]["note"]
    assert "no grading scope recorded" in check.stdout
    assert any(r["requirement"] == "MID-A-02/cross-turn-reuse" and r["outcome"] == "fail"
               for r in report["results"])
