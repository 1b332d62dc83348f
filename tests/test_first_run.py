"""What a first run shows, through the real command line: --help names every subcommand,
bundled model scripts by name, client transcripts named like the agent's, relative paths
in --client, and finding texts with the right article."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, cli_report, run_cli

from conformance.cli import SUBCOMMANDS
from conformance.client.runner import absolute_paths
from conformance.model import with_article

MODEL_DIR = REPO_ROOT / "cases" / "model"


def test_help_names_every_subcommand() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    for name in SUBCOMMANDS:
        assert re.search(rf"^  {re.escape(name)} +\S", proc.stdout, re.MULTILINE), name
    assert max(len(line) for line in proc.stdout.splitlines()) <= 84
    for name in SUBCOMMANDS:  # each one named is a subcommand main() knows
        sub = run_cli(name, "--help")
        assert sub.returncode == 0, (name, sub.stderr)
        assert sub.stdout.startswith("usage: acp-conformance"), (name, sub.stdout[:200])
        assert "--agent CMD | --client CMD" not in sub.stdout.splitlines()[0], name


def test_list_shows_the_bundled_model_scripts() -> None:
    proc = run_cli("list")
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.split("Model scripts (--model-script NAME):", 1)[1]
    names = sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))
    assert names and "repeat-ids" in names
    assert [line.split()[0] for line in section.strip("\n").splitlines()
            if not line.startswith("   ")] == names  # a long description wraps


def test_model_script_by_bundled_name(tmp_path: Path) -> None:
    agent = f"{sys.executable} fixtures/agents/llm_agent.py"
    rc, report, out = cli_report("--agent", agent, "--protocol", "1", "--case",
                                 "ids-across-turns", "--timeout", "20", "--model-script",
                                 "repeat-ids", "--transcripts", str(tmp_path / "t"),
                                 tmp_path=tmp_path)
    assert rc == 1, out
    assert {r["outcome"] for r in report["results"]
            if r["requirement"] == "MID-A-02/cross-turn-reuse"} == {"fail"}
    header = json.loads((tmp_path / "t" / "ids-across-turns@v1.jsonl").read_text().split("\n")[0])
    assert header["model_script"] == "repeat-ids"


def test_an_unknown_model_script_names_the_bundled_ones(tmp_path: Path) -> None:
    proc = run_cli("--agent", "true", "--model-script", "repeat-idz")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("acp-conformance: error: --model-script repeat-idz: no such "
                                   "file, and no bundled script of that name (bundled: "
                                   "cancel, repeat-ids, text-tool-text)")
    path = tmp_path / "repeat-ids"  # a folder path is never taken for a bundled name
    proc = run_cli("--agent", "true", "--model-script", str(path / "repeat-ids"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_relative_client_path_and_transcript_names(tmp_path: Path) -> None:
    """The client runs in a scratch folder; its relative script path still resolves against
    the folder the suite started in, and its transcripts are named <case>@v<N>.jsonl."""
    rc, report, out = cli_report(
        "--client", "python3 fixtures/clients/trimmed.py --agent-cmd {agent}",
        "--client-profile", "fixtures/clients/reference.yaml", "--case", "client-opacity",
        "--transcripts", str(tmp_path / "t"), tmp_path=tmp_path)
    assert rc == 1, out
    failed = {r["requirement"] for r in report["results"] if r["outcome"] == "fail"}
    assert "MID-C-02/merged" in failed and "MID-C-08/exit" not in failed, failed
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [
        "client-opacity@v1.jsonl", "client-opacity@v2.jsonl"]
    assert [c["transcript"] for c in report["cases"]] == [
        str(tmp_path / "t" / "client-opacity@v1.jsonl"),
        str(tmp_path / "t" / "client-opacity@v2.jsonl")]


def test_which_client_words_become_absolute(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "client.py").write_text("")
    (tmp_path / "client.py").write_text("")
    (tmp_path / "acp").mkdir()  # a folder named like a subcommand stays a word
    words = ["python3", "bin/client.py", "client.py", "acp", "--agent-cmd", "{agent}",
             "--config=bin/client.py", "-v", "./missing/x", "/abs/path", "{prompt}"]
    base = str(tmp_path)
    assert absolute_paths(words, base) == [
        "python3", os.path.join(base, "bin", "client.py"), os.path.join(base, "client.py"),
        "acp", "--agent-cmd", "{agent}", "--config=" + os.path.join(base, "bin", "client.py"),
        "-v", "./missing/x", "/abs/path", "{prompt}"]
    assert absolute_paths(["client.py", "x"], base) == ["client.py", "x"]  # PATH lookup
    assert absolute_paths(["./bin/client.py"], base) == [os.path.join(base, "bin", "client.py")]


@pytest.mark.parametrize("word,expected", [
    ("agent", "an agent"), ("user", "a user"), ("thought", "a thought"),
    ("agent_message_chunk", "an agent_message_chunk"),
    ("user_message_chunk", "a user_message_chunk"), ("usage_update", "a usage_update"),
    ("integer", "an integer"), ("object", "an object"), ("null", "a null"),
    ("absent", "an absent"), ("wrong-type", "a wrong-type"), ("upsert", "an upsert"),
    (8, "an 8"), (11, "an 11"), (18, "an 18"), (80, "an 80"), (2000, "a 2000"),
    (1024, "a 1024"), (11000, "an 11000"), (110, "a 110"),
])
def test_indefinite_article(word: object, expected: str) -> None:
    assert with_article(word) == expected


SLIP = re.compile(r"\b[Aa] (?!us|uni|one\b)[aeiouAEIOU8]|\b[Aa]n (?![aeiouAEIOU8]|11|18)\w")


@pytest.mark.parametrize("fixture,args,shown", [
    ("update_after_cancel", ("--case", "cancel-mid-turn", "--protocol", "1"),
     "an agent_message_chunk arrives after the turn ended as cancelled"),
    ("cross_kind_reuse", ("--protocol", "1"), "names a thought message and an agent message"),
    ("v2_bad_upsert_content", ("--protocol", "2"), "agent_message content is an object"),
])
def test_finding_texts_use_the_right_article(tmp_path: Path, fixture: str,
                                             args: tuple[str, ...], shown: str) -> None:
    rc, report, out = cli_report("--agent", f"{sys.executable} fixtures/agents/{fixture}.py",
                                 *args, tmp_path=tmp_path)
    assert rc in (0, 1), out  # cross-kind reuse is a warn in v1
    messages = {r["message"] for r in report["results"]}
    assert any(shown in m for m in messages), sorted(messages)
    assert not [m for m in messages if SLIP.search(m)]


def test_version() -> None:
    from conformance import __version__

    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"acp-conformance {__version__}"


def test_demo_broken_shows_a_failure_of_each_side(tmp_path: Path) -> None:
    proc = run_cli("demo", "--broken", "--json", str(tmp_path / "b.json"), "--no-color",
                   cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    agent, client = proc.stdout.split("Running the client suite", 1)
    assert "broken agent" in agent and "\nFailures\nMID-A-02/" in agent, agent
    assert "broken client" in client and "\nFailures\nMID-C-02/merged: FAIL" in client, client
    # each broken target names itself, never the reference
    assert "\ntarget reports itself as acp-conformance-broken-agent 0.1.0\n" in agent
    assert "\ntarget reports itself as acp-conformance-broken-client 0.1.0\n" in client
    assert json.loads((tmp_path / "b.json").read_text())["summary"]["verdict"] == "fail"
    assert json.loads((tmp_path / "b-client.json").read_text())["summary"]["verdict"] == "fail"
    assert "next:" in proc.stdout.rsplit("verdict: FAIL", 1)[1]


def test_plain_demo_ends_with_what_to_run_next(tmp_path: Path) -> None:
    proc = run_cli("demo", "--case", "wire-shapes", "--case", "client-grouping",
                   "--json", str(tmp_path / "d.json"), "--no-color", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tail = proc.stdout.rstrip().rsplit("\nnext:\n", 1)
    assert len(tail) == 2, proc.stdout
    commands = [line.split("#")[0].strip() for line in tail[1].splitlines()]
    assert "acp-conformance demo --broken" in commands
    assert sum('--agent "my-agent --acp"' in c for c in commands) == 3


def test_a_run_writes_into_one_output_folder_only(tmp_path: Path) -> None:
    """Outside this repository a run writes ./acp-conformance-reports/ and nothing else,
    says so as it starts, and --out DIR moves all of it."""
    agent = f"{sys.executable} -m conformance.reference.agent"
    env = f"ACP_REFERENCE_STATE_DIR={tmp_path / 'state'}"
    work = tmp_path / "work"
    work.mkdir()
    proc = run_cli("--agent", agent, "--agent-env", env, "--case", "ids-across-turns",
                   "--protocol", "1", "--no-color", cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in work.iterdir()] == ["acp-conformance-reports"]
    out = work / "acp-conformance-reports"
    assert {p.name for p in out.iterdir()} == {"acp-conformance.json", "acp-conformance.xml",
                                               "transcripts"}
    assert (out / "transcripts" / "ids-across-turns@v1.jsonl").is_file()
    assert "writing the reports and transcripts under acp-conformance-reports/" in proc.stderr
    elsewhere = tmp_path / "elsewhere"
    proc = run_cli("--agent", agent, "--agent-env", env, "--case", "ids-across-turns",
                   "--protocol", "1", "--out", str(elsewhere), cwd=work)
    assert proc.returncode == 0 and (elsewhere / "acp-conformance.json").is_file()
    assert [p.name for p in work.iterdir()] == ["acp-conformance-reports"]


def test_fuzz_keeps_its_library_and_hypothesis_data_in_the_output_folder(tmp_path: Path) -> None:
    agent = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"
    work = tmp_path / "work"
    work.mkdir()
    proc = run_cli("fuzz", "--agent", agent, "--effort", "ci", "--seed", "1",
                   "--max-failures", "1", "--protocol", "1", "--out", "found", cwd=work,
                   timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [p.name for p in work.iterdir()] == ["found"]  # no .hypothesis/, no fixtures/
    assert list((work / "found" / "regressions").glob("*.jsonl"))
    assert "saved: found/regressions/" in proc.stdout


def test_inside_this_repository_the_default_folder_is_reports(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from conformance.cli.options import default_out_dir

    monkeypatch.chdir(REPO_ROOT)
    assert default_out_dir() == Path("reports")
    monkeypatch.chdir(tmp_path)
    assert default_out_dir() == Path("acp-conformance-reports")


def test_list_groups_by_side_agent_first_within_100_columns() -> None:
    proc = run_cli("list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    heads = [line for line in lines if line.endswith(" cases:")]
    assert heads == ["Agent cases:", "Client cases:", "Proxy cases:"]
    rules = proc.stdout.split("\nRules ", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = [line.split() for line in rules if re.match(r"  \S", line)]  # a rule's first line
    sides = [row[1] for row in rows if row[1] in ("agent", "client", "proxy")]
    assert len(sides) >= len(rows) - 1  # SCHEMA/official grades both sides: listed last
    assert sides == sorted(sides, key=["agent", "client", "proxy"].index)
    near = next(row for row in rows if row[0] == "MID-S-01/near-miss-key")
    assert " ".join(near[2:]) == "v1 warn, v2 fail"  # the grade per version, as reported


def test_list_takes_selectors() -> None:
    proc = run_cli("list", "load-*")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")
              and not line.startswith("   ") and line.split()[0].startswith("load-")]
    assert listed and all(c.startswith("load-") for c in listed)
    assert "Model scripts" not in proc.stdout and "MID-A-07/replay-duplicate" in proc.stdout
    proc = run_cli("list", "*/cross-turn-reuse")
    rules = proc.stdout.split("\nRules ", 1)[1].strip().splitlines()
    assert [r.split()[0] for r in rules if re.match(r"  \S", r)] == [
        "MID-A-02/cross-turn-reuse"]
    proc = run_cli("list", "lood-*")
    assert proc.returncode == 2 and "'acp-conformance list' shows every case" in proc.stderr


@pytest.mark.parametrize("command", [(), ("fuzz",), ("replay",)])
def test_one_default_timeout(command: tuple[str, ...]) -> None:
    from conformance.cli.options import DEFAULT_TIMEOUT

    proc = run_cli(*command, "--help")
    assert proc.returncode == 0
    said = re.search(r"--timeout SECONDS\s+longest silence.*?\(default (\d+)\)", proc.stdout,
                     re.DOTALL)
    assert said is not None and float(said.group(1)) == DEFAULT_TIMEOUT == 10


def test_reports_say_not_applicable_in_prose(tmp_path: Path) -> None:
    proc = run_cli("--agent", f"{sys.executable} fixtures/agents/per_turn_counter.py",
                   "--case", "ids-across-turns", "--protocol", "1", "--no-color",
                   "--markdown", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 1, proc.stderr
    markdown = (tmp_path / "r.md").read_text(encoding="utf-8")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    shown = re.sub(r"<[^>]+>", "", re.sub(r"<style.*?</style>", "", html, flags=re.DOTALL))
    for text in (markdown, shown, proc.stdout):
        assert "not_applicable" not in text
    assert "not applicable" in markdown and "not applicable" in proc.stdout


def test_the_project_files_a_user_looks_for() -> None:
    licence = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence  # the full text, not a pointer
    assert 'license = { text = "Apache-2.0" }' in (REPO_ROOT / "pyproject.toml").read_text()
    contributing = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    checklist = contributing.split("## Adding a requirement", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. \*\*(\w+)\*\*", checklist, re.MULTILINE)
    assert steps == ["Register", "Sources", "Rule", "Case", "Fixture", "Manifest", "Docs"]
    assert "lint-cases --requirement" in checklist
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## Unreleased" in changelog and "## 0.1.0" in changelog


@pytest.mark.parametrize("returncode,signum,words", [
    (3, None, "exit code 3"), (0, None, "exit code 0"), (-15, None, "killed by SIGTERM"),
    (None, 9, "killed by SIGKILL"), (None, None, "still running"), (-99, None, "killed by signal 99"),
])
def test_exit_statuses_in_words(returncode: int | None, signum: int | None, words: str) -> None:
    from conformance.fuzz.report import describe_entry
    from conformance.results import exit_status
    from conformance.transcript import Entry

    assert exit_status(returncode, signum) == words
    entry = Entry(seq=4, t=0.0, conn=0, src="harness", stream="harness", event="exit",
                  data={"returncode": returncode, "signal": signum, "killed_by_suite": False})
    assert describe_entry(entry) == f"[exit: {words}]"  # a fuzz counterexample's line
