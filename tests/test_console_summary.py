"""The console summary by protocol version, through the real command line.

By default only the rules that failed or warned are rows, then a Failures section (one
block per failing rule) and a legend; ``--show all`` lists every rule with its v1 and v2
outcomes side by side; a rule that does not apply to a version shows "-"; a version the
target did not support is said once in the header and gets no column; one count line per
version.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from conftest import run_cli, v1_only_agent


def row(stdout: str, requirement: str) -> list[str]:
    """The cells of one requirement's row: [v1 cell, v2 cell, ...]."""
    for line in stdout.splitlines():
        if line.startswith(requirement + " "):
            return re.findall(r"(?:PASS|FAIL|WARN|INFO|N/A) +\d+ \S+(?: \d+ \S+)*|-",
                              line[len(requirement):])
    raise AssertionError(f"no row for {requirement}:\n{stdout}")


def test_demo_shows_each_version_side_by_side(tmp_path: Path) -> None:
    proc = run_cli("demo", "--case", "prompt-lifecycle", "--case", "client-grouping",
                   "--json", str(tmp_path / "demo.json"), "--no-color", "--show", "all", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    agent, client = proc.stdout.split("Running the client suite", 1)
    for part in (agent, client):
        assert re.search(r"^requirement\s+v1\s+v2$", part, re.MULTILINE), part
        assert re.search(r"^summary: v1 \d+ pass, 0 fail", part, re.MULTILINE), part
        assert re.search(r"^\s+v2 \d+ pass, 0 fail", part, re.MULTILINE), part
        assert "NOT_APPLICABLE" not in part
    assert row(agent, "MID-S-06/framing") == ["PASS 1 pass", "PASS 1 pass"]
    assert row(agent, "MID-V2-05/no-echo") == ["-", "PASS 1 pass"]  # a v2 rule: no v1 cell
    assert row(agent, "MID-A-06/live-echo")[1] == "-"  # and a v1 rule: no v2 cell
    assert row(client, "MID-C-03/merged") == ["PASS 1 pass", "PASS 1 pass"]


def test_a_failure_in_one_version_shows_in_its_column(tmp_path: Path) -> None:
    proc = run_cli("--agent", f"{sys.executable} fixtures/agents/v2_no_echo.py",
                   "--case", "prompt-lifecycle", "--json", str(tmp_path / "r.json"),
                   "--no-color", "--show", "all")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    v1, v2 = row(proc.stdout, "MID-V2-05/no-echo")
    assert v1 == "-" and re.fullmatch(r"FAIL \d+ fail", v2)
    assert row(proc.stdout, "TARGET/exit") == ["PASS 1 pass", "PASS 1 pass"]
    detail = lines[lines.index(next(x for x in lines if x.startswith("MID-V2-05/no-echo"))) + 1]
    assert "never echoed" in detail and "[prompt-lifecycle@v2 #" in detail
    assert re.search(r"^summary: v1 \d+ pass, 0 fail, ", proc.stdout, re.MULTILINE)
    assert re.search(r"^\s+v2 \d+ pass, [1-9]\d* fail, ", proc.stdout, re.MULTILINE)
    assert proc.stdout.rstrip().endswith("verdict: FAIL")


def test_an_unsupported_version_is_said_once_in_the_header(tmp_path: Path) -> None:
    agent = v1_only_agent(tmp_path)
    proc = run_cli("--agent", f"{sys.executable} {agent}", "--case", "prompt-lifecycle",
                   "--case", "ids-across-turns", "--json", str(tmp_path / "r.json"),
                   "--no-color", "--show", "all",
                   "--agent-env", f"ACP_REFERENCE_STATE_DIR={tmp_path}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = ("v2: not supported by the target (the agent answered protocolVersion 1); "
              "2 cases not testable")
    assert proc.stdout.count(header) == 1, proc.stdout
    assert "v2 unsupported" not in proc.stdout  # no note per case
    assert re.search(r"^requirement\s+v1$", proc.stdout, re.MULTILINE), proc.stdout
    # Both v1 cases grade every agent rule (the scope rule, docs/grading.md).
    assert row(proc.stdout, "MID-A-02/user-message-reuse") == ["PASS 2 pass"]
    table = proc.stdout.split("requirement", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert table and all(len(row(proc.stdout, line.split()[0])) == 1 for line in table)
    assert re.search(r"^summary: v1 \d+ pass", proc.stdout, re.MULTILINE)
    assert " v2 " not in proc.stdout


def test_only_an_unsupported_version_leaves_no_table(tmp_path: Path) -> None:
    agent = v1_only_agent(tmp_path)
    proc = run_cli("--agent", f"{sys.executable} {agent}", "--protocol", "2",
                   "--case", "prompt-lifecycle", "--json", str(tmp_path / "r.json"),
                   "--no-color")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "v2: not supported by the target" in proc.stdout
    assert not re.search(r"^requirement\s", proc.stdout, re.MULTILINE)  # no table
    assert "summary: no protocol version was tested" in proc.stdout
    # nothing was measured: the headline never claims a bare PASS (docs/grading.md)
    assert "verdict: PASS, partial: 0 of " in proc.stdout


def test_cases_not_run_after_a_hang_are_one_note_not_rows(tmp_path: Path) -> None:
    """The first v2 case hangs at initialize; the other v2 cases are not run. They are one
    note in the header; their not-testable findings make no rows."""
    proc = run_cli("--agent", f"{sys.executable} fixtures/hostile/agents/mute_to_v2.py",
                   "--timeout", "2", "--case", "ids-across-turns", "--case", "prompt-lifecycle",
                   "--case", "wire-shapes", "--json", str(tmp_path / "r.json"), "--no-color",
                   "--show", "all")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("  note: prompt-lifecycle@v2 and 1 more: not run: the agent did not answer the v2 "
            "initialize in ids-across-turns@v2") in proc.stdout
    v1, v2 = row(proc.stdout, "TARGET/hang")
    assert v1 == "PASS 3 pass" and v2 == "FAIL 1 fail"
    # The cases not run add nothing: each v2 cell counts the one case that ran.
    table = proc.stdout.split("requirement", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    v2_cells = [row(proc.stdout, line.split()[0])[1] for line in table
                if not line.startswith(" ")]
    assert v2_cells and all(c == "-" or re.fullmatch(r"\S+ +1 \S+", c) for c in v2_cells), v2_cells


def test_a_version_no_selected_case_applies_to_gets_no_column(tmp_path: Path) -> None:
    """--case picked only v2 cases: no v1 column of dashes and no 'v1 0 pass' line."""
    proc = run_cli("--client-adapter", "conformance.client.reference:make_client",
                   "--case", "client-empty-id-v2", "--json", str(tmp_path / "r.json"),
                   "--no-color", "--show", "all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^requirement\s+v2$", proc.stdout, re.MULTILINE), proc.stdout
    assert re.search(r"^summary: v2 \d+ pass, 0 fail", proc.stdout, re.MULTILINE)
    assert " v1 " not in proc.stdout.split("requirement", 1)[1]


def test_the_default_console_shows_failures_first_and_fits_one_screen(tmp_path: Path) -> None:
    proc = run_cli("--agent", f"{sys.executable} fixtures/agents/per_turn_counter.py",
                   "--case", "ids-across-turns", "--case", "ids-across-sessions",
                   "--protocol", "1", "--json", str(tmp_path / "r.json"),
                   "--transcripts", str(tmp_path / "t"), "--no-color")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    table = out.split("requirement", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    rules = [line.split()[0] for line in table if not line.startswith("(")]
    assert rules == ["MID-A-02/cross-turn-reuse", "MID-A-02/user-message-reuse"], out
    assert "--show all lists them" in table[-1]
    failures = out.split("\nFailures\n", 1)[1]
    assert failures.startswith("MID-A-02/cross-turn-reuse: FAIL, 3 faults, seen in 1 case "
                               "(ids-across-turns@v1)"), failures
    block = failures.split("\nMID-A-02/user-message-reuse", 1)[0]
    assert "    expected:   a fresh ID per message" in block
    assert "    actual:     msg_2" in block
    assert re.search(r"^    entries:    #\d+, #\d+.* of ids-across-turns@v1$", block, re.MULTILINE)
    assert f"    transcript: {tmp_path / 't' / 'ids-across-turns@v1.jsonl'}" in block
    assert "legend: " in out and "n/a: not exercised" in out and "-: does not apply" in out
    assert out.index("Failures") < out.index("legend:") < out.index("summary:")
    assert out.rstrip().endswith("verdict: FAIL")
    assert len(out.splitlines()) < 40  # one screen


def test_verbose_explains_every_version_column(tmp_path: Path) -> None:
    proc = run_cli("--agent", f"{sys.executable} fixtures/agents/v2_no_echo.py",
                   "--case", "prompt-lifecycle", "--json", str(tmp_path / "r.json"),
                   "--no-color", "-v")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index(next(x for x in lines if x.startswith("TARGET/exit ")))
    assert lines[at + 1].startswith("    v1: ") and lines[at + 2].startswith("    v2: ")
    at = lines.index(next(x for x in lines if x.startswith("MID-V2-05/no-echo ")))
    assert lines[at + 1].startswith("    v2: ") and "never echoed" in lines[at + 1]


def test_report_from_json_is_silent_unless_asked(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run_cli("--agent", f"{sys.executable} fixtures/agents/per_turn_counter.py",
                   "--case", "ids-across-turns", "--protocol", "1", "--json", str(report),
                   "--no-color")
    assert proc.returncode == 1
    quiet = run_cli("report", "--from", str(report), "--markdown", str(tmp_path / "m.md"))
    assert quiet.returncode == 1 and quiet.stdout == "", quiet.stdout
    assert (tmp_path / "m.md").exists()
    shown = run_cli("report", "--from", str(report), "--show", "failures", "--no-color")
    assert shown.stdout == proc.stdout


def test_report_from_json_into_an_output_folder(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run_cli("--agent", f"{sys.executable} fixtures/agents/per_turn_counter.py",
                   "--case", "ids-across-turns", "--protocol", "1", "--json", str(report))
    assert proc.returncode == 1
    again = run_cli("report", "--from", str(report), "--out", str(tmp_path / "out"))
    assert again.returncode == 1 and again.stdout == ""
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "acp-conformance.html", "acp-conformance.md", "acp-conformance.xml"]
