"""Transcripts: written for every case, loadable by `check`, graded offline exactly as live."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO_ROOT, load_json, run_cli

from conformance.transcript import FORMAT, FORMAT_VERSION

BROKEN = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"


def rows(report: dict) -> list[tuple[str, str, str, str]]:
    return sorted((r["case"], r["requirement"], r["outcome"], r["message"])
                  for r in report["results"])


def test_offline_check_grades_like_the_live_run(tmp_path: Path) -> None:
    live = run_cli("--agent", BROKEN, "--protocol", "1", "--transcripts", str(tmp_path / "t"),
                   "--json", str(tmp_path / "live.json"))
    assert live.returncode == 1
    files = sorted((tmp_path / "t").glob("*.jsonl"))
    assert len(files) >= 5
    offline = run_cli("check", str(tmp_path / "t"), "--json", str(tmp_path / "off.json"))
    assert offline.returncode == 1, offline.stderr
    live_rows = [r for r in rows(load_json(tmp_path / "live.json"))]
    off_rows = rows(load_json(tmp_path / "off.json"))
    # Offline grading runs every agent rule; the live run only each case's checks.
    assert set(live_rows) <= set(off_rows)
    assert {r[1] for r in off_rows if r[2] == "fail"} >= {"MID-A-02/cross-turn-reuse"}


def test_transcript_format(tmp_path: Path) -> None:
    proc = run_cli("--agent", f"{sys.executable} -m conformance.reference.agent", "--protocol",
                   "2", "--case", "prompt-lifecycle", "--transcripts", str(tmp_path))
    assert proc.returncode == 0
    lines = (tmp_path / "prompt-lifecycle@v2.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == FORMAT and header["version"] == FORMAT_VERSION
    assert header["protocol"] == 2 and header["case"] == "prompt-lifecycle@v2"
    entries = [json.loads(line) for line in lines[1:]]
    assert [e["seq"] for e in entries] == list(range(len(entries)))
    assert all(e["t"] >= 0 for e in entries)
    sent = [e for e in entries if e["src"] == "client"]
    got = [e for e in entries if e["src"] == "agent" and e["stream"] == "stdout"]
    assert sent and got
    for e in sent + got:  # the raw line is kept and parses to the recorded message
        assert json.loads(e["raw"]) == e["msg"]
    assert entries[0]["event"] == "start" and entries[-1]["event"] == "exit"


def test_corrupt_transcripts_are_input_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    run_cli("--agent", f"{sys.executable} -m conformance.reference.agent", "--protocol", "1",
            "--case", "wire-shapes", "--transcripts", str(tmp_path / "t"))
    src = next((tmp_path / "t").glob("*.jsonl")).read_text()
    good.write_text(src)
    assert run_cli("check", str(good)).returncode == 0
    cases = {
        "truncated.jsonl": src[: len(src) // 2],
        "garbage.jsonl": src.splitlines()[0] + "\n{not json\n",
        "noheader.jsonl": "\n".join(src.splitlines()[1:]) + "\n",
        "empty.jsonl": "",
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        proc = run_cli("check", str(path))
        assert proc.returncode == 2, (name, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("acp-conformance: error: ") and str(path) in proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage\n")
    proc = run_cli("check", str(tmp_path / "binary.jsonl"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
