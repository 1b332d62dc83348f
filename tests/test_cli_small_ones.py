"""The command line's small promises, each through the real command line: a report on
standard output (``--json -``), output paths refused before the run, options that do not
apply to the role refused, ``-q``, one not-applicable count, the partial verdict's names,
and a target to try ``fuzz`` on.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import run_cli

REFERENCE = shlex.join([sys.executable, "-m", "conformance.reference.agent"])
SMALL = ("--case", "identical-prompts*", "-j", "1", "--no-color")  # a few cases, both versions


def test_json_dash_writes_the_report_to_stdout_and_nothing_else(tmp_path: Path) -> None:
    proc = run_cli("--agent", REFERENCE, *SMALL, "--json", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout is the JSON report, whole
    assert report["summary"]["verdict"] == "pass"
    assert "verdict: PASS" in proc.stderr  # the console summary went to stderr
    assert not (tmp_path / "-").exists()
    assert not (tmp_path / "transcripts").exists()  # no folder beside a file named "-"


@pytest.mark.parametrize("option", ["--junit", "--markdown"])
def test_junit_and_markdown_dash_go_to_stdout(tmp_path: Path, option: str) -> None:
    proc = run_cli("--agent", REFERENCE, *SMALL, option, "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    if option == "--junit":
        assert ET.fromstring(proc.stdout).tag == "testsuites"
    else:
        assert proc.stdout.startswith("# acp-conformance: agent")
        assert "verdict:" not in proc.stdout
    assert not (tmp_path / "-").exists()


def test_two_reports_on_stdout_are_refused(tmp_path: Path) -> None:
    proc = run_cli("--agent", REFERENCE, "--json", "-", "--junit", "-", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "acp-conformance: error: --json - and --junit -: only one report can go to standard "
        "output"]
    assert proc.stdout == ""


def test_html_dash_is_refused(tmp_path: Path) -> None:
    proc = run_cli("--agent", REFERENCE, "--html", "-", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--html -: this output is a file" in proc.stderr


@pytest.mark.parametrize("option,path", [
    ("--html", "/proc/x.html"), ("--json", "/proc/no/such/x.json"),
    ("--markdown", "/proc/x.md"), ("--transcripts", "/proc/t"), ("--out", "/proc/o"),
    ("--certify", "/proc/c"), ("--write-baseline", "/proc/b.yaml"),
])
def test_unwritable_output_paths_are_refused_before_the_run(tmp_path: Path, option: str,
                                                            path: str) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    started = tmp_path / "started"
    agent = shlex.join([sys.executable, "-c", f"open({str(started)!r}, 'w')"])
    proc = run_cli("--agent", agent, option, path, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"acp-conformance: error: {option}: cannot "
                                                   "write into /proc"), lines
    assert not started.exists()  # refused before the target started


@pytest.mark.parametrize("args,option,role", [
    (["--agent", REFERENCE, "--client-profile", "p.yaml"], "--client-profile", "agent"),
    (["--agent", REFERENCE, "--proxy-adapts"], "--proxy-adapts", "agent"),
    (["--client", "c {agent}", "--grace", "1"], "--grace", "client"),
    (["--client", "c {agent}", "--model-server"], "--model-server", "client"),
    (["--client", "c {agent}", "--agent-config", "a=b"], "--agent-config", "client"),
    (["--client-adapter", "m:f", "--proxy-adapts"], "--proxy-adapts", "client"),
    (["--proxy", "p {agent}", "--client", "c {agent}"], "--client", "proxy"),
    (["--proxy", "p {agent}", "--client-profile", "p.yaml"], "--client-profile", "proxy"),
])
def test_options_of_another_role_are_refused(tmp_path: Path, args: list[str], option: str,
                                             role: str) -> None:
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"acp-conformance: error: {option} does not apply to the "
                               f"{role} role")


def test_quiet_prints_the_verdict_line_only(tmp_path: Path) -> None:
    proc = run_cli("--agent", REFERENCE, *SMALL, "-q", "--out", str(tmp_path / "out"),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        line for line in proc.stdout.splitlines() if line.startswith("verdict: PASS")]
    assert len(proc.stdout.splitlines()) == 1
    assert proc.stderr == ""
    assert (tmp_path / "out" / "acp-conformance.json").is_file()  # reports as asked


def _console_counts(text: str) -> dict[str, int]:
    """The per-version count lines of a console summary, added up."""
    import re

    total: dict[str, int] = {}
    for line in text.splitlines():
        if re.match(r"^(summary:)?\s+v\d ", line) and " pass, " in line:
            for n, what in re.findall(r"(\d+) (pass|fail|warn|info|not applicable)", line):
                key = what.replace(" ", "_")
                total[key] = total.get(key, 0) + int(n)
    return total


def test_one_not_applicable_count_in_the_console_and_the_json(tmp_path: Path) -> None:
    """One run: the console's per-version counts add up to the JSON summary's, not
    applicable included (a rule's row in a version it does not apply to is in neither)."""
    report = tmp_path / "r.json"
    proc = run_cli("--agent", REFERENCE, "--case", "identical-prompts*", "--case", "load-*",
                   "-j", "1", "--no-color", "--json", str(report), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(report.read_text(encoding="utf-8"))["summary"]
    console = _console_counts(proc.stdout)
    assert console["not_applicable"] > 0
    assert console == {k: summary[k] for k in console}
    assert set(console) == {"pass", "fail", "warn", "info", "not_applicable"}


def test_the_partial_verdict_names_the_musts_not_exercised(tmp_path: Path) -> None:
    """The reference agent on a few cases: the console, the JSON headline and the Markdown
    statement give one verdict, and it names each MUST requirement the run did not
    exercise (the ones the JSON's coverage lists)."""
    report, statement = tmp_path / "r.json", tmp_path / "r.md"
    proc = run_cli("--agent", REFERENCE, "--case", "identical-prompts*", "--protocol", "2",
                   "-j", "1", "--no-color", "--json", str(report), "--markdown",
                   str(statement), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text(encoding="utf-8"))
    missing = data["coverage"]["v2"]["not_exercised"]
    assert missing, data["coverage"]
    headline = data["summary"]["headline"]
    assert headline.startswith("PASS, partial: ")
    assert headline.endswith(f"(not exercised: {', '.join(missing[:6])}"
                             + (f" and {len(missing) - 6} more)" if len(missing) > 6 else ")"))
    assert f"verdict: {headline}\n" in proc.stdout
    assert f"| Verdict | **{headline}** |" in statement.read_text(encoding="utf-8")


def test_fuzz_demo_finds_shrinks_and_saves_the_bundled_broken_agents_fault(
        tmp_path: Path) -> None:
    """``fuzz --demo``, the documented target to try ``fuzz`` on: the bundled broken
    agent's MID-A-02 is found, shrunk and saved, and the run exits 1."""
    out = tmp_path / "out"
    proc = run_cli("fuzz", "--demo", "--effort", "ci", "--seed", "1", "--out", str(out),
                   "--no-color", "--json", str(tmp_path / "f.json"), cwd=tmp_path, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert "FAIL MID-A-02/" in proc.stdout and "minimal counterexample" in proc.stdout
    saved = sorted((out / "regressions").glob("mid-a-02-*.jsonl"))
    assert saved, proc.stdout
    report = json.loads((tmp_path / "f.json").read_text(encoding="utf-8"))
    assert report["summary"]["verdict"] == "fail"
    assert "fuzz --demo --effort ci" in (Path(__file__).parents[1] / "README.md").read_text(
        encoding="utf-8")


def test_fuzz_demo_takes_no_target(tmp_path: Path) -> None:
    proc = run_cli("fuzz", "--demo", "--agent", REFERENCE, cwd=tmp_path)
    assert proc.returncode == 2
    assert "--demo fuzzes a bundled broken agent: not with --agent" in proc.stderr


def test_quiet_fuzz_prints_the_verdict_line_only(tmp_path: Path) -> None:
    proc = run_cli("fuzz", "--demo", "--effort", "ci", "--seed", "1", "-q", "--out",
                   str(tmp_path / "out"), cwd=tmp_path, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == ["verdict: FAIL"]
    assert sorted((tmp_path / "out" / "regressions").glob("mid-a-02-*.jsonl"))


@pytest.mark.parametrize("option", ["--out", "--regressions"])
def test_fuzz_output_folders_are_refused_before_the_run(tmp_path: Path, option: str) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    proc = run_cli("fuzz", "--demo", option, "/proc/x", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"acp-conformance: error: {option}: cannot write into /proc (No such file or directory)"]
    assert "seed" not in proc.stdout  # nothing generated


def test_check_json_dash_in_process_gives_stdout_back(tmp_path: Path) -> None:
    """``check FILE --json -``: the report on stdout, and afterwards sys.stdout is what it
    was (the command line hands it back whatever the command did)."""
    before = sys.stdout
    transcript = Path(__file__).parents[1] / "fixtures" / "regressions" / \
        "mid-a-09-after-cancel-3f04d29577.jsonl"
    proc = run_cli("check", str(transcript), "--json", "-", "--no-color", cwd=tmp_path)
    assert sys.stdout is before
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["summary"]["verdict"] == "fail"
    assert "verdict: FAIL" in proc.stderr


def test_a_live_run_and_check_do_not_load_hypothesis(tmp_path: Path) -> None:
    """Only the commands that draw (``fuzz``, ``replay``) import Hypothesis: a live run and
    ``check`` start without it (it is about a third of a live run's start-up CPU)."""
    code = ("import sys; from conformance.cli import main; "
            f"rc = main(['--agent', {REFERENCE!r}, *{list(SMALL)!r}, '--out', 'o']); "
            "rc2 = main(['check', 'o/transcripts', '--json', 'c.json']); "
            "print(rc, rc2, 'hypothesis' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "0 0 False", out.stdout + out.stderr
    assert json.loads((tmp_path / "c.json").read_text())["summary"]["verdict"] == "pass"
