"""An interrupted run is never a pass, in any report, any shell, suite or fuzz.

Real signals to real runs: the suite (SIGTERM while the silent agent waits in its
first v1 case, the v2 case not reached), ``fuzz`` cancelled before it found anything
(what a CI job timeout does), and the GitHub Action's run step (the signal it gets is
passed on to the suite). Each run exits 128+N; its JSON says ``interrupted`` with
verdict ``interrupted``, JUnit, HTML and Markdown say INTERRUPTED, ``report --merge``
and ``report --from`` keep it, and what was graded is kept.
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

from harness import REPO_ROOT, agent_command, cli_env
from helpers import cancelled_fuzz_run, signalled_when_ready, wait_ready


def silent_args(tmp_path: Path, fifo: Path) -> list[str]:
    return ["--agent", agent_command("silent_after_prompt"), "--protocol", "both",
            "--case", "prompt-lifecycle", "--timeout", "60", "-j", "1",
            "--agent-env", f"HOSTILE_READY_FIFO={fifo}"]


def test_interrupted_suite_says_so_in_every_report(tmp_path: Path) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    reports = {"json": tmp_path / "report.json", "junit": tmp_path / "report.xml",
               "html": tmp_path / "report.html", "markdown": tmp_path / "report.md"}
    args = silent_args(tmp_path, fifo) + [a for k, p in reports.items()
                                          for a in (f"--{k}", str(p))] + ["--no-color"]
    run = signalled_when_ready(args, tmp_path, fifo, signal.SIGTERM)

    assert run.returncode == 128 + signal.SIGTERM, run.stderr
    assert "Traceback" not in run.stderr
    report = run.report
    assert report is not None
    assert report["interrupted"] == "SIGTERM"
    assert report["summary"]["verdict"] == "interrupted"
    assert report["summary"]["headline"].startswith("INTERRUPTED by SIGTERM")
    cases = {c["case"]: c for c in report["cases"]}
    assert "interrupted by SIGTERM" in cases["prompt-lifecycle@v1"]["note"]  # graded, kept
    assert any(r["case"] == "prompt-lifecycle@v1" and r["outcome"] == "pass"
               for r in report["results"])
    v2 = cases["prompt-lifecycle@v2"]  # not reached: named, never silently dropped
    assert v2["reason"] == "not_run" and v2["cut"] == "SIGTERM"
    assert "interrupted by SIGTERM" in v2["note"]
    assert "verdict: INTERRUPTED by SIGTERM" in run.stdout
    assert "PASS" not in run.stdout
    props = {p.get("name"): p.get("value")
             for p in ET.parse(reports["junit"]).getroot().iter("property")}
    assert props["verdict"] == "interrupted" and props["interrupted"] == "SIGTERM"
    for name in ("html", "markdown"):
        text = reports[name].read_text("utf-8")
        assert "INTERRUPTED by SIGTERM" in text, name
        assert "run interrupted by SIGTERM: 1 case(s) graded, 1 not run" in text, name

    # The artifact alone tells the truth: merged, or rebuilt from the JSON.
    merged = subprocess.run([sys.executable, "-m", "conformance", "report", "--merge",
                             str(reports["json"]), "--markdown", str(tmp_path / "m.md")],
                            cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True,
                            timeout=120, check=False)
    assert merged.returncode == 1, merged.stderr
    assert "INTERRUPTED" in (tmp_path / "m.md").read_text("utf-8")
    again = subprocess.run([sys.executable, "-m", "conformance", "report", "--from",
                            str(reports["json"]), "--junit", str(tmp_path / "again.xml")],
                           cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True,
                           timeout=120, check=False)
    assert again.returncode == 1, again.stderr
    rebuilt = {p.get("name"): p.get("value")
               for p in ET.parse(tmp_path / "again.xml").getroot().iter("property")}
    assert rebuilt["verdict"] == "interrupted" and rebuilt["interrupted"] == "SIGTERM"


def reference_agent() -> str:
    from conformance.cli.demo import reference_agent_command

    return subprocess.list2cmdline(reference_agent_command())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cancelled_fuzz_run_is_not_a_pass(tmp_path: Path, sig: signal.Signals) -> None:
    """A fuzz run cancelled before it found anything: 128+N, verdict interrupted, no
    PASS, and no note that the agent behaved flakily (nothing was repeated)."""
    sessions = tmp_path / "agent-state"  # the reference agent keeps one file per session
    run = cancelled_fuzz_run(tmp_path, ["--agent", reference_agent()],
                             lambda: len(list(sessions.glob("*.json"))) >= 10, sig,
                             env={"ACP_REFERENCE_STATE_DIR": str(sessions)})

    assert run.returncode == 128 + sig, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert "verdict: INTERRUPTED" in run.stdout
    assert "PASS" not in run.stdout
    assert "did not repeat a run" not in run.stdout
    assert run.report is not None
    assert run.report["interrupted"] == sig.name
    assert run.report["summary"]["verdict"] == "interrupted"
    assert "INTERRUPTED" in (tmp_path / "report.md").read_text("utf-8")


def test_action_passes_the_signal_on_and_says_interrupted(tmp_path: Path) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    out, outputs = tmp_path / "reports", tmp_path / "github-output"
    outputs.write_text("")
    env = {k: v for k, v in cli_env().items() if not k.startswith(("INPUT_", "GITHUB_"))}
    env.update(INPUT_AGENT=agent_command("silent_after_prompt"), INPUT_PROTOCOL="both",
               INPUT_ARGS=f"--case prompt-lifecycle --timeout 60 -j 1 "
                          f"--agent-env HOSTILE_READY_FIFO={fifo}",
               INPUT_OUTPUT_DIR=str(out), GITHUB_OUTPUT=str(outputs),
               GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"))
    # The step runs `python -I -m conformance`; the package is not installed here, so the
    # interpreter it names is a wrapper that drops -I (PYTHONPATH then finds the checkout)
    # and execs Python in its place: the signal still reaches the suite itself.
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = -I ] && shift\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    launch = (f"import runpy, sys; sys.executable = {str(wrapper)!r}; "
              f"sys.argv = ['github_action.py', 'run']; "
              f"runpy.run_path({str(REPO_ROOT / 'conformance' / 'github_action.py')!r}, "
              "run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", launch], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_ready(fifo)
        proc.send_signal(signal.SIGTERM)  # the step's own process: a cancelled job
        log, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, log.decode(errors="replace")[-3000:]
    assert "verdict=interrupted" in outputs.read_text("utf-8")
    report = json.loads((out / "acp-conformance.json").read_text("utf-8"))
    assert report["interrupted"] == "SIGTERM"
    assert report["summary"]["verdict"] == "interrupted"
    assert "INTERRUPTED by SIGTERM" in (tmp_path / "summary.md").read_text("utf-8")
