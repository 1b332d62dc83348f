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
from conformance.results import with_article

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
    assert [line.split()[0] for line in section.strip().splitlines()] == names


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
