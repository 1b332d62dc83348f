"""``--repeat N``: a race in the target is told from a steady fault, in every report.

The fixture ``fixtures/harness/sometimes_reuses.py`` breaks MID-A-02 in every other
process it starts (counted in a file), so ``--repeat 3`` of one single-process case
fails in its 2nd repetition only: the reports must say "fails in 1 of 3 runs, passes in
2", point at a failing and a passing transcript, and still fail the run (a fault seen in
any repetition is a fault). The merge itself is tested on results, both ways.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, cli_env, run_cli

from conformance.lifecycle import REPETITION, file_stem
from conformance.repetition import merge_runs
from conformance.results import CaseResult, Finding, Outcome, Reason

pytest_plugins = ["pytester"]

RACY = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'harness' / 'sometimes_reuses.py'}"
CASE = ("--case", "ids-across-turns", "--protocol", "1")
RULE = "MID-A-02/user-message-reuse"


@pytest.fixture(scope="module")
def racy_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One --repeat 3 run of the racy agent with every report written."""
    out = tmp_path_factory.mktemp("repeat")
    env = cli_env()
    env["ACP_FIXTURE_RACE_FILE"] = str(out / "count")
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "--agent", RACY, *CASE, "--repeat", "3",
         "--out", str(out), "--html", str(out / "r.html"), "--markdown", str(out / "r.md"),
         "--no-color", "-j", "1"],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=240, check=False)
    return {"out": out, "proc": proc,
            "json": json.loads((out / "acp-conformance.json").read_text("utf-8")),
            "transcripts": out / "transcripts"}


def test_a_race_fails_the_run_and_every_repetition_is_kept(racy_run: dict[str, Any]) -> None:
    proc, t = racy_run["proc"], racy_run["transcripts"]
    assert proc.returncode == 1, proc.stderr  # a fault in any repetition is a fault
    assert len((racy_run["out"] / "count").read_text().split()) == 3  # three processes
    names = sorted(p.name for p in t.glob("*.jsonl"))
    assert names == ["ids-across-turns@v1.jsonl", "ids-across-turns@v1.run-2.jsonl",
                     "ids-across-turns@v1.run-3.jsonl"]


def test_console_says_the_rate_and_both_transcripts(racy_run: dict[str, Any]) -> None:
    out, t = racy_run["proc"].stdout, racy_run["transcripts"]
    assert "each case played 3 times" in out
    assert "fails in 1 of 3 runs, passes in 2" in out
    assert f"a run where it fails: {t / 'ids-across-turns@v1.run-2.jsonl'}" in out
    assert f"a run where it passes: {t / 'ids-across-turns@v1.jsonl'}" in out
    assert f"transcript: {t / 'ids-across-turns@v1.run-2.jsonl'}" in out  # the failing run's


def test_json_names_the_rate_and_the_transcripts(racy_run: dict[str, Any]) -> None:
    data, t = racy_run["json"], racy_run["transcripts"]
    assert data["repeat"] == 3 and data["summary"]["unstable"] >= 1
    rows = [r for r in data["results"] if r["requirement"] == RULE]
    assert rows and all(r["outcome"] == "fail" for r in rows)
    rep = rows[0]["repeats"]
    assert rep["runs"] == 3 and rep["outcomes"] == {"fail": 1, "pass": 2}
    assert rep["transcripts"] == {"fail": str(t / "ids-across-turns@v1.run-2.jsonl"),
                                  "pass": str(t / "ids-across-turns@v1.jsonl")}
    # the wire lines are those of the failing repetition, not of the first
    assert rows[0]["evidence"]["transcript"] == rep["transcripts"]["fail"]
    assert any("msg_1" in line for line in rows[0]["evidence"]["lines"])
    case = data["cases"][0]
    assert case["runs"] == [str(t / n) for n in ("ids-across-turns@v1.jsonl",
                                                 "ids-across-turns@v1.run-2.jsonl",
                                                 "ids-across-turns@v1.run-3.jsonl")]
    steady = [r for r in data["results"] if r["requirement"] == "MID-S-06/framing"]
    assert steady and "repeats" not in steady[0]  # the same in every run: no mark


def test_junit_html_and_statement_say_it(racy_run: dict[str, Any]) -> None:
    out, t = racy_run["out"], racy_run["transcripts"]
    root = ET.parse(out / "acp-conformance.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["repeat"] == "3" and int(props["unstable"]) >= 1
    failure = next(tc.find("failure") for tc in root.iter("testcase")
                   if tc.get("name") == RULE)
    assert "fails in 1 of 3 runs, passes in 2" in failure.get("message")
    assert f"a run where it passes: {t / 'ids-across-turns@v1.jsonl'}" in failure.text
    html = (out / "r.html").read_text("utf-8")
    assert "each case played 3 times" in html and "fails in 1 of 3 runs, passes in 2" in html
    assert str(t / "ids-across-turns@v1.jsonl") in html
    assert str(t / "ids-across-turns@v1.run-2.jsonl") in html
    md = (out / "r.md").read_text("utf-8")
    assert "| Repetitions | each case played 3 times; a fault seen in any run counts" in md
    assert "### Unstable between repetitions" in md
    assert f"ids-across-turns@v1: {RULE} fails in 1 of 3 runs, passes in 2" in md


def test_report_from_json_keeps_the_repetitions(racy_run: dict[str, Any],
                                                tmp_path: Path) -> None:
    from conformance.report.jsonreport import read_json, to_json

    again = to_json(read_json(racy_run["out"] / "acp-conformance.json"))
    assert again["repeat"] == 3 and again["cases"][0]["runs"] == racy_run["json"]["cases"][0]["runs"]
    assert [r.get("repeats") for r in again["results"]] == [
        r.get("repeats") for r in racy_run["json"]["results"]]
    proc = run_cli("report", "--from", str(racy_run["out"] / "acp-conformance.json"),
                   "--markdown", str(tmp_path / "again.md"))
    assert proc.returncode == 1, proc.stderr
    assert "each case played 3 times" in (tmp_path / "again.md").read_text("utf-8")


def test_a_steady_target_is_the_same_in_every_repetition(tmp_path: Path) -> None:
    report = tmp_path / "ref.json"
    proc = run_cli("--agent", f"{sys.executable} -m conformance.reference.agent", *CASE,
                   "--repeat", "2", "--json", str(report), "--markdown", str(tmp_path / "r.md"),
                   "--transcripts", str(tmp_path / "t"), "--no-color")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text("utf-8"))
    assert data["repeat"] == 2 and data["summary"]["unstable"] == 0
    assert not any("repeats" in r for r in data["results"])
    assert "every rule came out the same in every run" in proc.stdout
    assert "every rule came out the same in every run" in (tmp_path / "r.md").read_text()
    assert len(list((tmp_path / "t").glob("*.jsonl"))) == 2


def test_repeat_is_refused_below_one() -> None:
    proc = run_cli("--agent", "x", "--repeat", "0")
    assert proc.returncode == 2 and "--repeat" in proc.stderr and "at least 1" in proc.stderr


def test_the_plugin_reports_a_race(plugin_pytest: Any, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_FIXTURE_RACE_FILE", str(tmp_path / "count"))
    result = plugin_pytest("--acp-agent", RACY, "--acp-case", "ids-across-turns",
                           "--acp-protocol", "1", "--acp-repeat", "3",
                           "--acp-json", str(tmp_path / "p.json"), "-q")
    text = result.stdout.str()
    assert result.ret == 1, text
    assert "fails in 1 of 3 runs, passes in 2" in text
    data = json.loads((tmp_path / "p.json").read_text("utf-8"))
    assert data["repeat"] == 3
    assert any(r.get("repeats", {}).get("outcomes") == {"fail": 1, "pass": 2}
               for r in data["results"])


# -- the merge, on results ------------------------------------------------------------


def _case(*rows: tuple[str, Outcome], path: str, **kw: Any) -> CaseResult:
    cr = CaseResult("c@v1", "", [], 1, transcript_path=path, **kw)
    cr.findings = [Finding(r, o, f"{r} {o}", case="c@v1") for r, o in rows]
    return cr


def test_merge_reports_each_rule_from_its_worst_run() -> None:
    a = _case(("R/1", Outcome.PASS), ("R/2", Outcome.WARN), path="a")
    b = _case(("R/1", Outcome.FAIL), ("R/2", Outcome.WARN), path="b")
    c = _case(("R/1", Outcome.PASS), ("R/2", Outcome.WARN), path="c")
    merged = merge_runs([a, b, c])
    rows = {f.requirement: f for f in merged.findings}
    assert rows["R/1"].outcome is Outcome.FAIL and rows["R/2"].outcome is Outcome.WARN
    assert rows["R/1"].repeats is not None and rows["R/2"].repeats is None
    assert rows["R/1"].repeats.text == "fails in 1 of 3 runs, passes in 2"
    assert rows["R/1"].repeats.kept() == [("fails", "b"), ("passes", "a")]
    assert merged.runs == ["a", "b", "c"] and merged.transcript_path == "b"
    assert merged.outcome is Outcome.FAIL


def test_merge_of_a_cut_run_says_it_was_cut() -> None:
    a = _case(("R/1", Outcome.FAIL), path="a")
    b = _case(("R/1", Outcome.PASS), path="b", cut="deadline", reason=Reason.CUT)
    merged = merge_runs([a, b])
    assert merged.cut == "deadline" and not merged.completed
    assert merged.findings[0].outcome is Outcome.FAIL  # the fault still counts


def test_run_names() -> None:
    assert file_stem("x@v1") == "x@v1"
    token = REPETITION.set(3)
    try:
        assert file_stem("x@v1") == "x@v1.run-3"
        assert file_stem("x@v1.agent-side") == "x@v1.agent-side.run-3"
    finally:
        REPETITION.reset(token)


def test_a_proxy_repetition_keeps_both_sides(tmp_path: Path) -> None:
    """Each repetition of a proxy case keeps its client side and its agent side, and the
    client side names its own agent side: ``check`` grades each repetition whole."""
    proxy = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'proxies' / 'transparent.py'} {{agent}}"
    t = tmp_path / "t"
    proc = run_cli("--proxy", proxy, "--case", "proxy-grouping", "--protocol", "2",
                   "--repeat", "2", "--transcripts", str(t), "--no-color")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in t.glob("*.jsonl")) == [
        "proxy-grouping@v2.agent-side.jsonl", "proxy-grouping@v2.agent-side.run-2.jsonl",
        "proxy-grouping@v2.jsonl", "proxy-grouping@v2.run-2.jsonl"]
    header = json.loads((t / "proxy-grouping@v2.run-2.jsonl").read_text().split("\n", 1)[0])
    assert header["agent_side"] == "proxy-grouping@v2.agent-side.run-2.jsonl"
    again = run_cli("check", str(t / "proxy-grouping@v2.run-2.jsonl"))
    assert again.returncode == 0, again.stdout + again.stderr
