"""Distributed runs: ``pytest -n 2`` (pytest-xdist) gives the same results as a serial run.

The same selection of cases runs against the per-turn-counter fixture agent
(it fails MID-A-02, so the comparison covers findings with evidence) once
serially and once over two xdist workers; the suite's JSON reports must be
equal apart from where the transcripts were written, and the JUnit outcomes
must match. Every case works in its own temporary directory, which the
transcripts show.

A fault that settles a version (a failed negotiation; the same exit in two consecutive
cases) gives the same item counts and findings over two workers as serially: one failed
item per case that carries it, the other items of the version skipped with a short line
naming them.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parents[1]
AGENT = shlex.join([sys.executable, str(REPO_ROOT / "fixtures/agents/per_turn_counter.py")])
SELECT = ["-k", "ids-across-turns or wire-shapes"]


def run(pytester: pytest.Pytester, name: str, *extra: str) -> tuple[pytest.RunResult, Path]:
    out = pytester.path / name
    result = pytester.runpytest_subprocess(
        "-p", "conformance.pytest_plugin", "-p", "no:cacheprovider", "--acp-agent", AGENT,
        *SELECT, "--acp-json", str(out / "report.json"), "--acp-transcripts", str(out / "t"),
        "--junitxml", str(out / "junit.xml"), "-v", *extra, timeout=300)
    return result, out


def normalised(out: Path) -> dict[str, Any]:
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    for case in data["cases"]:
        case["transcript"] = Path(case["transcript"]).name
    return dict(data)


def outcomes(out: Path) -> dict[str, str]:
    root = ET.parse(out / "junit.xml").getroot()
    return {tc.get("name") or "": "failed" if tc.find("failure") is not None else "passed"
            for tc in root.iter("testcase")}


def test_two_workers_give_the_serial_results(pytester: pytest.Pytester,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # only the plugins named here
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    serial, s_out = run(pytester, "serial")
    # Every case grades every agent rule: the per-turn counter's reused IDs fail wire-shapes
    # too (it plays two turns), not only the case written for them.
    serial.assert_outcomes(passed=0, failed=4)
    parallel, p_out = run(pytester, "parallel", "-p", "xdist.plugin", "-n", "2")
    parallel.assert_outcomes(passed=0, failed=4)
    text = parallel.stdout.str()
    assert "[gw0]" in text and "[gw1]" in text  # both workers ran cases

    assert normalised(p_out) == normalised(s_out)
    assert outcomes(p_out) == outcomes(s_out) == {
        "ids-across-turns[v1]": "failed", "ids-across-turns[v2]": "failed",
        "wire-shapes[v1]": "failed", "wire-shapes[v2]": "failed"}
    report = normalised(p_out)
    assert [c["case"] for c in report["cases"]] == [
        "ids-across-turns@v1", "wire-shapes@v1", "ids-across-turns@v2", "wire-shapes@v2"]
    assert any(r["outcome"] == "fail" and r["evidence"]["entries"] for r in report["results"])

    # each case ran in its own working directory (from session/new on the wire)
    per_case: list[set[str]] = []
    for path in sorted((p_out / "t").glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        per_case.append({e["msg"]["params"]["cwd"] for e in lines[1:]
                         if isinstance(e.get("msg"), dict)
                         and e["msg"].get("method") == "session/new"})
    assert len(per_case) == 4 and all(per_case)
    every = set().union(*per_case)
    assert len(every) == sum(len(c) for c in per_case)  # no directory shared by two cases
    assert not any(os.path.exists(c) for c in every)  # and each was removed afterwards


HOSTILE = REPO_ROOT / "fixtures" / "hostile" / "agents"


def counts(pytester: pytest.Pytester, name: str, fixture: str,
           *extra: str) -> tuple[dict[str, int], str, dict[str, Any]]:
    """The item outcomes, the console and the suite's JSON report of one session against a
    hostile fixture (every case, both versions)."""
    out = pytester.path / name
    agent = shlex.join([sys.executable, str(HOSTILE / f"{fixture}.py")])
    result = pytester.runpytest_subprocess(
        "-p", "conformance.pytest_plugin", "-p", "no:cacheprovider", "--acp-agent", agent,
        "--acp-timeout", "5", "--acp-json", str(out / "report.json"), "-rfs", *extra,
        timeout=600)
    outcomes = result.parseoutcomes()
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return {k: outcomes.get(k, 0) for k in ("passed", "failed", "skipped")}, \
        result.stdout.str(), report


def fails(report: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((r["case"], r["requirement"]) for r in report["results"]
                  if r["outcome"] == "fail")


@pytest.mark.parametrize("fixture, carriers", [
    # answers protocolVersion 2, then speaks v1: one finding, in the version's first case
    ("claims_v2_speaks_v1", ["identical-prompts[v2]"]),
    # exits mid-stream in every case: several faults, the same one in two consecutive cases
    # settles each version (the engine's shortcut), which a worker cannot see on its own
    ("crash_mid_stream", ["identical-prompts[v1]", "ids-across-turns[v1]",
                          "identical-prompts[v2]", "replayed-user-ids[v2]"]),
])
def test_version_settling_faults_count_the_same_over_two_workers(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fixture: str,
        carriers: list[str]) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    serial, s_text, s_report = counts(pytester, "serial", fixture)
    parallel, p_text, p_report = counts(pytester, "parallel", fixture,
                                        "-p", "xdist.plugin", "-n", "2")
    assert "2 workers [32 items]" in p_text  # xdist ran it
    assert parallel == serial, (serial, parallel)
    assert serial["failed"] == len(carriers)  # one failed item per item carrying the fault
    assert fails(p_report) == fails(s_report)
    summary = [line for line in s_text.splitlines() if " case(s) against " in line]
    assert summary and summary == [line for line in p_text.splitlines()
                                   if " case(s) against " in line]  # "1 fail" both ways
    for text in (s_text, p_text):
        for item in carriers:
            assert f"FAILED acp-agent::{item}" in text
        skips = [line for line in text.splitlines() if line.startswith("SKIPPED [")]
        assert skips and all("was settled by the fault that" in line for line in skips)
        assert sum(int(line.split("]")[0][9:]) for line in skips) == serial["skipped"]
        assert all(len(line) < 300 for line in skips)  # a short line, not the long sentence
