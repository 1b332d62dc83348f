"""The client role's clock-ended waits are visible, as the agent role's are
(tests/test_timers.py): the agent double's wait for the client's answer to a probe and the
pty driver's silence timeout are in the transcript header's ``timers``, and a fail that
rests on one names it and the option that lengthens it, live and from ``check``.

Real subprocesses: the reference client through its pty (no clock decides anything), the
one-shot fixture ``ignores_ids.py`` (never answers the liveness probe: the double's answer
wait ends on its clock) and the hostile ``never_ready`` client (the silence timeout)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from conftest import run_cli

from conformance.client.channel import ANSWER_WAIT_CAP
from conformance.client.reference import PROFILE_YAML
from conformance.client.runner import reference_client

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "fixtures" / "clients"
HOSTILE = REPO / "fixtures" / "hostile" / "clients"


def _run(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    report = tmp_path / "r.json"
    proc = run_cli(*args, "--protocol", "1", "--json", str(report), "--transcripts",
                   str(tmp_path / "t"), "--no-color", "-j", "1", timeout=300)
    assert report.exists(), proc.stdout + proc.stderr
    return proc.returncode, json.loads(report.read_text("utf-8")), proc.stdout


def _grouping(tmp_path: Path, command: str, profile: Path,
              *more: str) -> tuple[int, dict[str, Any], str]:
    """The client ``command`` driven by ``profile`` through the case client-grouping."""
    return _run(tmp_path, "--client", command, "--client-profile", str(profile), "--case",
                "client-grouping", *more)


def _timers(tmp_path: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((tmp_path / "t").glob("*.jsonl")):
        out += json.loads(path.read_text("utf-8").split("\n", 1)[0]).get("timers", [])
    return out


def _check(tmp_path: Path) -> dict[str, Any]:
    report = tmp_path / "check.json"
    run_cli("check", str(tmp_path / "t"), "--json", str(report), "--no-color")
    return json.loads(report.read_text("utf-8"))


def _faults(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["outcome"] in ("fail", "warn")]


def test_the_reference_client_leaves_no_clock_deciding(tmp_path: Path) -> None:
    command, _ = reference_client()
    profile = tmp_path / "reference.yaml"
    profile.write_text(PROFILE_YAML, encoding="utf-8")
    code, report, out = _grouping(tmp_path, command, profile)
    assert code == 0, out
    assert _timers(tmp_path) == []  # every wait ended on a message
    assert not any(r.get("timer") for r in report["results"])


def test_the_doubles_answer_wait_is_recorded_and_named(tmp_path: Path) -> None:
    """The client never answers the probe: the double gives up after its answer wait
    (--timeout, at most 5 s); MID-C-08/probe says that wait and --timeout rest under it.
    --timeout 8 keeps the client's own silence timeout (8 s) from ending the turn first."""
    command = f"{sys.executable} {CLIENTS / 'ignores_ids.py'} --agent-cmd {{agent}} --prompt {{prompt}}"
    code, report, out = _grouping(tmp_path, command, CLIENTS / "ignores-ids.yaml",
                                  "--timeout", "8")
    assert code == 1, out
    waits = [t for t in _timers(tmp_path) if t["timer"] == "agent double's answer wait"]
    assert waits and waits[0]["seconds"] == ANSWER_WAIT_CAP and waits[0]["option"] == "--timeout"
    assert "liveness probe" in waits[0]["why"] and isinstance(waits[0]["at"], int)
    [probe] = [r for r in _faults(report) if r["requirement"] == "MID-C-08/probe"]
    assert "rests on the agent double's answer wait (5.0 s" in probe["timer"], probe
    assert "lengthen it with --timeout SECONDS" in probe["timer"]
    assert "[timer: rests on the agent double's answer wait" in out
    checked = [r for r in _faults(_check(tmp_path)) if r["requirement"] == "MID-C-08/probe"]
    assert [r["timer"] for r in checked] == [probe["timer"]]


def test_the_pty_silence_timeout_is_recorded_and_named(tmp_path: Path) -> None:
    command = f"{sys.executable} {HOSTILE / 'never_ready.py'} --agent-cmd {{agent}}"
    code, report, out = _grouping(tmp_path, command, CLIENTS / "reference.yaml",
                                  "--timeout", "1.5")
    assert code == 1, out
    silence = [t for t in _timers(tmp_path) if t["timer"] == "silence timeout"]
    assert silence and silence[0]["seconds"] == 1.5 and silence[0]["option"] == "--timeout"
    assert "show ready" in silence[0]["why"]
    [hang] = [r for r in _faults(report) if r["requirement"] == "MID-C-08/hang"]
    assert "rests on the silence timeout (1.5 s, waiting for the client to show ready" \
        in hang["timer"], hang
    assert "lengthen it with --timeout SECONDS" in hang["timer"]
    checked = [r for r in _faults(_check(tmp_path)) if r["requirement"] == "MID-C-08/hang"]
    assert [r["timer"] for r in checked] == [hang["timer"]]
