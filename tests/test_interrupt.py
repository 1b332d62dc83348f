"""Nothing lost: Ctrl-C (SIGINT) or SIGTERM mid-run, and crashes of the suite itself.

A real CLI subprocess drives the silent agent; the agent tells the test through
a FIFO when it has gone silent (no sleeps), and the test then signals the CLI.
The run must end the target's process group, grade what was recorded, write
the reports and the transcript (atomically) and exit 128 + the signal number.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import wait_ready

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import REPO_ROOT, agent_command, finish_cli, group_alive, start_cli

from conformance import transcript as tmod


def start_silent_run(tmp_path: Path, env: dict[str, str] | None = None,
                     ) -> tuple[subprocess.Popen[bytes], int, float]:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    args = ["--agent", agent_command("silent_after_prompt"), "--protocol", "1",
            "--case", "prompt-lifecycle", "--timeout", "60",
            "--agent-env", f"HOSTILE_READY_FIFO={fifo}",
            "--json", str(tmp_path / "report.json"), "--junit", str(tmp_path / "report.xml"),
            "--transcripts", str(tmp_path / "transcripts"), "--no-color"]
    proc = start_cli(args, tmp_path, env=env)
    line = wait_ready(fifo)
    agent_pid = int(line.split()[1])
    return proc, agent_pid, time.monotonic()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_ends_target_and_writes_what_was_graded(tmp_path: Path,
                                                                  sig: signal.Signals) -> None:
    (tmp_path / "report.json").write_text('{"previous": "run"}\n', "utf-8")
    proc, agent_pid, signalled = start_silent_run(tmp_path)
    assert group_alive(agent_pid)  # the agent leads its own group: pgid == pid
    proc.send_signal(sig)
    run = finish_cli(proc, tmp_path, signalled)

    assert run.returncode == 128 + sig, run.stderr
    assert run.elapsed < 20, f"took {run.elapsed:.1f} s to stop after the signal"
    assert "Traceback" not in run.stderr
    assert f"interrupted by {sig.name}" in run.stderr
    assert not group_alive(agent_pid), "the target's process group survived the interrupt"
    # The reports are complete new files covering the interrupted case.
    assert run.report is not None and run.report["format"] == "acp-conformance-report"
    [case] = run.report["cases"]
    assert case["case"] == "prompt-lifecycle@v1"
    assert f"interrupted by {sig.name}" in case["note"]
    graded = {r["requirement"]: r["outcome"] for r in run.report["results"]}
    assert graded["MID-S-06/framing"] == "pass"  # what was recorded was graded
    assert graded["TARGET/hang"] != "fail"  # the user stopped it: no hang is blamed
    ET.parse(tmp_path / "report.xml")
    assert "summary:" in run.stdout and "verdict:" in run.stdout
    # The transcript holds the traffic up to the interrupt, then the target's end.
    [path] = run.transcripts
    _, entries = tmod.load(path)
    assert any(e.event == "note" and e.data.get("note") == "interrupted" for e in entries)
    assert entries[-1].event == "exit"
    assert any(e.msg and e.msg.get("method") == "session/prompt" for e in entries
               if isinstance(e.msg, dict))


def test_ctrl_c_in_the_client_suite_ends_the_client_and_writes_reports(tmp_path: Path) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    client = REPO_ROOT / "fixtures" / "hostile" / "clients" / "never_ready.py"
    args = ["--client", f"{sys.executable} {client} --agent-cmd {{agent}}",
            "--client-profile", str(REPO_ROOT / "fixtures" / "clients" / "reference.yaml"),
            "--protocol", "1", "--case", "client-grouping", "--timeout", "60",
            "--agent-env", f"HOSTILE_READY_FIFO={fifo}",
            "--json", str(tmp_path / "report.json"), "--junit", str(tmp_path / "report.xml"),
            "--transcripts", str(tmp_path / "transcripts"), "--no-color"]
    proc = start_cli(args, tmp_path)
    client_pid = int(wait_ready(fifo).split()[1])
    signalled = time.monotonic()
    proc.send_signal(signal.SIGINT)
    run = finish_cli(proc, tmp_path, signalled)
    assert run.returncode == 130, run.stderr
    assert run.elapsed < 25, f"took {run.elapsed:.1f} s to stop after Ctrl-C"
    assert "interrupted by SIGINT" in run.stderr and "Traceback" not in run.stderr
    assert not group_alive(client_pid), "the client's process group survived Ctrl-C"
    assert run.report is not None
    [case] = run.report["cases"]
    assert "interrupted by SIGINT" in case["note"]
    assert not [r for r in run.report["results"] if r["requirement"] == "MID-C-08/hang"
                and r["outcome"] == "fail"]  # the user stopped it: no hang is blamed
    ET.parse(tmp_path / "report.xml")
    [path] = run.transcripts
    tmod.load(path)


def test_killed_suite_leaves_previous_report_untouched(tmp_path: Path) -> None:
    """SIGKILL (no cleanup at all): the previous report stays whole, no torn transcript."""
    previous = '{"previous": "run"}\n'
    (tmp_path / "report.json").write_text(previous, "utf-8")
    # A killed suite cannot remove its scratch folders (the case's working folder and
    # home): they go under the test's own folder, not the machine's temporary folder.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc, agent_pid, signalled = start_silent_run(tmp_path, env={"TMPDIR": str(scratch)})
    try:
        proc.kill()
        finish_cli(proc, tmp_path, signalled)
        assert (tmp_path / "report.json").read_text("utf-8") == previous
        assert {p.name.split("-")[1] for p in scratch.iterdir()} == {"conformance", "home"}
        for path in (tmp_path / "transcripts").glob("*.jsonl") if (
                tmp_path / "transcripts").exists() else []:
            tmod.load(path)
    finally:  # a killed suite cannot end its target: the test does, by its process group
        try:
            os.killpg(agent_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


WRITER = """
import sys
from pathlib import Path
from conformance.transcript import write_atomic
path = Path(sys.argv[1])
texts = ["[" + ",".join(['"a"'] * 400_000) + "]\\n", "[" + ",".join(['"b"'] * 300_000) + "]\\n"]
print("ready", flush=True)
n = 0
while True:
    write_atomic(path, texts[n % 2])
    n += 1
"""


def test_atomic_writes_are_never_seen_torn(tmp_path: Path) -> None:
    """A reader racing a writer that is killed mid-stream only ever sees whole files."""
    target = tmp_path / "report.json"
    target.write_text('["old"]\n', "utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target)],
                              stdout=subprocess.PIPE, env=env)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"ready\n"
        seen: set[str] = set()
        reads = 0
        while not {'["a",', '["b",'} <= seen or reads < 200:  # both versions, many reads
            text = target.read_text("utf-8")
            json.loads(text)  # a torn file would not parse
            seen.add(text[:5])
            reads += 1
            assert reads < 100_000, f"only saw {seen}"
    finally:
        writer.kill()
        writer.wait()
    json.loads(target.read_text("utf-8"))  # killed mid-write: still a whole file
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "report.json"]
    assert all(name.startswith(".report.json.") for name in leftovers), leftovers
