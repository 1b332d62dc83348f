"""An interrupted pytest session running the plugin is never a pass.

A real pytest in a subprocess runs the plugin's cases against an agent that goes silent
after a prompt; SIGINT or SIGTERM reaches the session while it waits. The session exits
128+N (as the command line does), and the JSON, Markdown and JUnit (``--junitxml``:
its test suite's properties) reports say
``interrupted`` (the signal's name) with the verdict ``interrupted``; every case of the
plan not graded is listed as not run, cut by that signal, and the cases graded before
it are kept.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import AGENTS, agent_command, cli_env
from helpers import wait_ready


def interrupted_session(tmp_path: Path, agent: str, sig: signal.Signals,
                        ) -> tuple[int, str]:
    """Run the plugin's prompt-lifecycle cases (v1, v2) against ``agent``, send ``sig`` once
    the agent has gone silent, and return the exit status and the session's output."""
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    env = cli_env({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    env.pop("PYTEST_ADDOPTS", None)
    args = [sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin",
            "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
            "--acp-agent", agent, "--acp-protocol", "both",
            "--acp-case", "prompt-lifecycle", "--acp-timeout", "60",
            "--acp-agent-env", f"HOSTILE_READY_FIFO={fifo}",
            "--acp-json", "report.json", "--acp-markdown", "report.md",
            "--junitxml", "junit.xml"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_ready(fifo)  # a case waits on the silent agent
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out.decode(errors="replace")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_plugin_session_says_so(tmp_path: Path, sig: signal.Signals) -> None:
    status, log = interrupted_session(tmp_path, agent_command("silent_after_prompt"), sig)
    assert status == 128 + sig, log[-3000:]
    assert "INTERNALERROR" not in log
    report = json.loads((tmp_path / "report.json").read_text("utf-8"))
    assert report["interrupted"] == sig.name
    assert report["summary"]["verdict"] == "interrupted"
    assert report["summary"]["headline"].startswith(f"INTERRUPTED by {sig.name}")
    cases = {c["case"]: c for c in report["cases"]}
    assert set(cases) == {"prompt-lifecycle@v1", "prompt-lifecycle@v2"}  # none dropped
    for case in cases.values():
        assert case["reason"] == "not_run" and case["cut"] == sig.name
        assert f"interrupted by {sig.name}" in case["note"]
    assert not any(r["outcome"] == "pass" for r in report["results"])
    assert f"INTERRUPTED by {sig.name}" in (tmp_path / "report.md").read_text("utf-8")
    root = ET.parse(tmp_path / "junit.xml").getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == "interrupted" and props["interrupted"] == sig.name
    assert f"verdict: INTERRUPTED by {sig.name}" in log
    assert "PASS" not in log.split("acp-conformance", 1)[-1]


SILENT_IN_V2 = """
import sys
sys.path.insert(0, {agents!r})
from _hostile import ReferenceAgent, main
from silent_after_prompt import SilentAfterPrompt


class SilentInV2(SilentAfterPrompt):
    def handle_session_prompt(self, request_id, params):
        if not self.v2:  # v1: the reference agent's whole turn
            return ReferenceAgent.handle_session_prompt(self, request_id, params)
        return super().handle_session_prompt(request_id, params)


sys.exit(main(agent_class=SilentInV2))
"""


def test_interrupted_plugin_session_keeps_what_was_graded(tmp_path: Path) -> None:
    """v1 graded (its items passed), SIGTERM while v2 waits: the report keeps the v1 case's
    findings and still says interrupted, never pass."""
    agent = tmp_path / "silent_in_v2.py"
    agent.write_text(SILENT_IN_V2.format(agents=str(AGENTS)))
    status, log = interrupted_session(tmp_path, f"{sys.executable} {agent}", signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, log[-3000:]
    report = json.loads((tmp_path / "report.json").read_text("utf-8"))
    assert report["interrupted"] == "SIGTERM"
    assert report["summary"]["verdict"] == "interrupted"
    cases = {c["case"]: c for c in report["cases"]}
    assert cases["prompt-lifecycle@v1"].get("reason") is None  # graded, kept
    assert any(r["case"] == "prompt-lifecycle@v1" and r["outcome"] == "pass"
               for r in report["results"])
    v2 = cases["prompt-lifecycle@v2"]
    assert v2["reason"] == "not_run" and v2["cut"] == "SIGTERM"
    assert "verdict: INTERRUPTED by SIGTERM" in log
