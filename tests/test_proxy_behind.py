"""The agent behind a proxy is reported apart on every road: ``check`` of a proxy run's
transcripts reports it as the live run did, and a proxy run interrupted by a signal still
reports what the agent behind it was graded on (its section, ``NAME.agent.json``)."""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from conftest import REPO_ROOT, cli_report, load_json
from helpers import signalled_when_ready

sys.path.insert(0, str(REPO_ROOT / "fixtures" / "hostile"))

from harness import agent_command  # noqa: E402

PROXIES = REPO_ROOT / "fixtures" / "proxies"
NUMERIC = f"{shlex.quote(sys.executable)} {REPO_ROOT / 'fixtures' / 'agents' / 'numeric_id.py'}"


def proxy(name: str) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(PROXIES / name))}.py {{agent}}"


def rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    return sorted((r["case"], r["requirement"], r["outcome"], r["message"])
                  for r in report["results"])


def test_check_reports_the_agent_behind_a_proxy_as_the_run_did(tmp_path: Path) -> None:
    code, live, output = cli_report("--proxy", proxy("transparent"), "--agent", NUMERIC,
                                    "--protocol", "1", "-j", "2", "--transcripts",
                                    str(tmp_path / "t"), tmp_path=tmp_path, name="live")
    assert code == 0, output
    live_behind = load_json(tmp_path / "live.agent.json")
    assert "MID-S-01/type" in {r["requirement"] for r in live_behind["results"]
                               if r["outcome"] == "fail"}, output
    offline_code, offline, output = cli_report("check", str(tmp_path / "t"),
                                               tmp_path=tmp_path, name="offline")
    assert offline_code == code, output
    assert rows(offline) == rows(live)  # the proxy's verdict: the agent's fault is not its
    assert "The agent behind the proxy" in output
    offline_behind = load_json(tmp_path / "offline.agent.json")
    assert rows(offline_behind) == rows(live_behind)
    assert offline_behind["target"] == live_behind["target"]


def test_a_proxy_run_without_an_agent_behind_reports_none_in_check(tmp_path: Path) -> None:
    code, _, output = cli_report("--proxy", proxy("transparent"), "--protocol", "1", "-j", "2",
                                 "--transcripts", str(tmp_path / "t"), tmp_path=tmp_path,
                                 name="live")
    assert code == 0, output
    offline_code, _, output = cli_report("check", str(tmp_path / "t"), tmp_path=tmp_path,
                                         name="offline")
    assert offline_code == 0, output
    assert "behind the proxy" not in output
    assert not (tmp_path / "offline.agent.json").exists()
    assert not (tmp_path / "live.agent.json").exists()


def test_an_interrupted_proxy_run_reports_the_agent_behind_it(tmp_path: Path) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    args = ["--proxy", proxy("transparent"), "--agent", agent_command("silent_after_prompt"),
            "--protocol", "1", "--case", "prompt-lifecycle", "--timeout", "60",
            "--agent-env", f"HOSTILE_READY_FIFO={fifo}",
            "--json", str(tmp_path / "report.json"),
            "--transcripts", str(tmp_path / "transcripts"), "--no-color"]
    run = signalled_when_ready(args, tmp_path, fifo, signal.SIGINT)
    assert run.returncode == 128 + signal.SIGINT, run.stderr
    assert "Traceback" not in run.stderr and "interrupted by SIGINT" in run.stderr
    assert "The agent behind the proxy" in run.stdout, run.stdout
    behind = load_json(tmp_path / "report.agent.json")
    assert behind["interrupted"] == "SIGINT"  # never a pass
    [case] = behind["cases"]
    assert case["case"] == "prompt-lifecycle@v1" and "interrupted by SIGINT" in case["note"]
    graded = {r["requirement"]: r["outcome"] for r in behind["results"]}
    assert graded.get("MID-S-06/framing") == "pass"  # what the agent wrote was graded
