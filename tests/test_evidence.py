"""Evidence travels with every report: the transcripts a report names are kept, and each
failing finding carries its transcript's path and the wire lines it points at (console,
JUnit, JSON); ``show FILE#N`` prints a transcript readably with the finding's lines marked.

Real runs of the per-turn-counter agent (it reuses message IDs across turns: MID-A-02)."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import REPO_ROOT, load_json, run_cli

BROKEN = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"
ONE_CASE = ("--agent", BROKEN, "--case", "ids-across-turns", "--protocol", "1", "--no-color")


def named_paths(text: str) -> list[str]:
    """Every transcript path a console line or text report names."""
    return re.findall(r"transcript: (\S+\.jsonl)", text)


@pytest.mark.parametrize("option,name", [("--html", "r.html"), ("--json", "r.json"),
                                         ("--junit", "r.xml")])
def test_a_run_naming_one_report_keeps_every_transcript_it_names(
        tmp_path: Path, option: str, name: str) -> None:
    proc = run_cli(*ONE_CASE, option, str(tmp_path / "out" / name), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    named = named_paths(proc.stdout)
    report = (tmp_path / "out" / name).read_text(encoding="utf-8")
    if option == "--json":
        data = load_json(tmp_path / "out" / name)
        assert all(c["transcript"] for c in data["cases"])  # the JSON names each case's
        named += [c["transcript"] for c in data["cases"]]
        named += [r["evidence"]["transcript"] for r in data["results"]
                  if r["outcome"] == "fail"]
    else:
        named += named_paths(report)
    assert named, proc.stdout
    for path in named:  # relative paths are the run's working folder's
        assert (tmp_path / path).is_file() or Path(path).is_file(), path
    # beside the report, in a transcripts/ folder; no scratch folder named anywhere
    assert (tmp_path / "out" / "transcripts" / "ids-across-turns@v1.jsonl").is_file()
    assert "acp-conformance-" not in " ".join(named)


def test_no_transcripts_names_none_but_keeps_the_lines(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run_cli(*ONE_CASE, "--json", str(report), "--no-transcripts", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not (tmp_path / "transcripts").exists()
    assert named_paths(proc.stdout) == []
    data = load_json(report)
    assert [c["transcript"] for c in data["cases"]] == [None]
    failed = [r for r in data["results"] if r["outcome"] == "fail"]
    assert failed and all("transcript" not in r["evidence"] for r in failed)
    assert all(r["evidence"]["lines"] for r in failed)  # the lines travel regardless
    both = run_cli(*ONE_CASE, "--transcripts", str(tmp_path / "t"), "--no-transcripts")
    assert both.returncode == 2 and "give one of them" in both.stderr


def test_a_junit_failure_holds_the_wire_lines(tmp_path: Path) -> None:
    junit = tmp_path / "r.xml"
    proc = run_cli(*ONE_CASE, "--junit", "r.xml", cwd=tmp_path)  # paths as given
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failures = {tc.get("name"): tc.find("failure") for tc in ET.parse(junit).iter("testcase")}
    body = failures["MID-A-02/user-message-reuse"].text or ""
    lines = body.splitlines()
    assert "  transcript: transcripts/ids-across-turns@v1.jsonl (acp-conformance show " \
           "transcripts/ids-across-turns@v1.jsonl#6)" in lines, body
    wire = [line for line in lines if re.match(r"  #\d+ +>> agent  \{", line)]
    assert [w.split()[0] for w in wire] == ["#6", "#20", "#34"], body  # the finding's entries
    assert all('"sessionUpdate":"user_message_chunk","messageId":"msg_1"' in w for w in wire)


def test_the_console_and_json_carry_the_lines_masked(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = run_cli(*ONE_CASE, "--json", "r.json", "--mask", "Thinking about", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    block = proc.stdout.split("\nFailures\n", 1)[1].split("\nMID-A-02/user-message-reuse", 1)[0]
    assert "    transcript: transcripts/ids-across-turns@v1.jsonl" in block
    assert re.search(r'\n    #7 +>> agent  \{.*"messageId":"msg_2"', block), block
    finding = next(r for r in load_json(report)["results"]
                   if r["requirement"] == "MID-A-02/cross-turn-reuse")
    lines = finding["evidence"]["lines"]
    assert len(lines) == 5 and all(">> agent" in x for x in lines)
    assert "Thinking about" not in proc.stdout + report.read_text(encoding="utf-8")
    assert any('"text":"*** "' in x for x in lines)  # masked like everything else
    again = run_cli("report", "--from", str(report), "--junit", str(tmp_path / "again.xml"))
    assert again.returncode == 1, again.stderr
    rebuilt = "".join(f.text or "" for f in ET.parse(tmp_path / "again.xml").iter("failure"))
    assert lines[0] in rebuilt  # the JSON keeps them: a report rebuilt from it shows them too


def test_show_prints_a_transcript_readably_with_the_findings_lines_marked(
        tmp_path: Path) -> None:
    proc = run_cli(*ONE_CASE, "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert proc.returncode == 1
    path = tmp_path / "transcripts" / "ids-across-turns@v1.jsonl"
    shown = run_cli("show", f"{path}#6,20")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"{path}: case ids-across-turns@v1, agent ")
    marked = [line for line in lines if line.startswith("#") and line[5:7] == ">>"]
    assert [m.split()[0] for m in marked] == ["#6", "#20"]
    assert all('user_message_chunk messageId="msg_1"' in m for m in marked), marked
    assert any("agent_thought_chunk messageId=\"msg_2\" \"Thinking about \"" in line
               for line in lines)
    assert any("session/prompt #2" in line for line in lines)
    around = run_cli("show", f"{path}#6", "--around", "1").stdout.splitlines()
    assert [line.split()[0] for line in around[1:] if line.startswith("#")] == [
        "#5", "#6", "#7"]
    missing = run_cli("show", f"{path}#999")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "no entry #999" in missing.stderr
