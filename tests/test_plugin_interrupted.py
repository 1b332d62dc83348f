"""An interrupted pytest session running the plugin is never a pass.

A real pytest in a subprocess runs the plugin's cases against an agent that goes silent
after a prompt; SIGINT or SIGTERM reaches the session while it waits. The session exits
128+N (as the command line does), and the JSON, Markdown and JUnit (``--junitxml``:
its test suite's properties) reports say
``interrupted`` (the signal's name) with the verdict ``interrupted``; every case of the
plan not graded is listed as not run, cut by that signal.
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

from harness import agent_command, cli_env
from test_interrupted_verdicts import wait_ready


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_plugin_session_says_so(tmp_path: Path, sig: signal.Signals) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    env = cli_env({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    env.pop("PYTEST_ADDOPTS", None)
    args = [sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin",
            "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
            "--acp-agent", agent_command("silent_after_prompt"), "--acp-protocol", "both",
            "--acp-case", "prompt-lifecycle", "--acp-timeout", "60",
            "--acp-agent-env", f"HOSTILE_READY_FIFO={fifo}",
            "--acp-json", "report.json", "--acp-markdown", "report.md",
            "--junitxml", "junit.xml"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_ready(fifo)  # the v1 case waits on the silent agent
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = out.decode(errors="replace")
    assert proc.returncode == 128 + sig, log[-3000:]
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
