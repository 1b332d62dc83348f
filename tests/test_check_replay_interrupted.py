"""``check`` and ``replay`` interrupted: the README's exit-code table holds for them too.

Real signals to real processes at a point each is known to have reached: ``check`` while
it reads a big generated transcript (its file is open: /proc says so), ``replay`` while
the silent agent waits in the regression's prompt (the agent says so through a FIFO).
Either exits 128+N with one line naming the signal (no traceback, not killed with no
word), writes no report (it grades nothing until it ends), and ``replay``'s target
process group is ended, not left behind.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import REPO_ROOT, agent_command, finish_cli, group_alive, start_cli
from helpers import wait_ready

REGRESSION = REPO_ROOT / "fixtures" / "regressions" / "mid-a-09-after-cancel-3f04d29577.jsonl"
WAIT = 90.0


def big_transcript(path: Path, updates: int) -> None:
    """The regression's opening (initialize, session, prompt), then ``updates`` chunks."""
    head = [json.loads(line) for line in REGRESSION.read_text("utf-8").splitlines()[:7]]
    sid = head[5]["msg"]["result"]["sessionId"]
    seq = head[-1]["seq"]
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(json.dumps(h) + "\n" for h in head)
        for i in range(updates):
            seq += 1
            msg = {"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk",
                                             "messageId": f"m{i // 50}",
                                             "content": {"type": "text", "text": "word "}}}}
            out.write(json.dumps({"seq": seq, "t": 0.3 + i * 1e-5, "conn": 0, "src": "agent",
                                  "stream": "stdout",
                                  "raw": json.dumps(msg, separators=(",", ":")),
                                  "msg": msg}) + "\n")


def wait_open(pid: int, path: Path) -> None:
    """Until process ``pid`` has ``path`` open (it is reading it)."""
    fds, end = Path(f"/proc/{pid}/fd"), time.monotonic() + WAIT
    while time.monotonic() < end:
        for fd in list(fds.glob("*")) if fds.exists() else []:
            try:
                if Path(os.readlink(fd)) == path.resolve():
                    return
            except OSError:
                continue
        time.sleep(0.02)
    raise AssertionError(f"{pid} never opened {path}")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the "
                    "transcript being read")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_check_exits_128_plus_n_and_writes_no_report(
        tmp_path: Path, sig: signal.Signals) -> None:
    big = tmp_path / "big.jsonl"
    big_transcript(big, 200_000)
    report = tmp_path / "report.json"
    proc = start_cli(["check", str(big), "--json", str(report), "--no-color"], tmp_path)
    wait_open(proc.pid, big)  # grading it, seconds from done
    signalled = time.monotonic()
    proc.send_signal(sig)
    run = finish_cli(proc, tmp_path, signalled)
    assert run.returncode == 128 + sig, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == \
        f"acp-conformance: interrupted by {sig.name}; no report written"
    assert "Traceback" not in run.stderr
    assert "verdict" not in run.stdout  # no verdict at all, let alone a pass
    assert not report.exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_replay_exits_128_plus_n_and_ends_the_target(
        tmp_path: Path, sig: signal.Signals) -> None:
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    proc = start_cli(["replay", str(REGRESSION), "--agent",
                      agent_command("silent_after_prompt"),
                      "--agent-env", f"HOSTILE_READY_FIFO={fifo}", "--timeout", "60",
                      "--no-color"], tmp_path)
    agent_pid = int(wait_ready(fifo).split()[1])  # the agent is silent in the prompt
    signalled = time.monotonic()
    proc.send_signal(sig)
    run = finish_cli(proc, tmp_path, signalled)
    assert run.returncode == 128 + sig, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.elapsed < 20, f"took {run.elapsed:.1f} s to stop after the signal"
    assert run.stderr.strip().splitlines()[-1] == \
        f"acp-conformance: interrupted by {sig.name}; no report written"
    assert "Traceback" not in run.stderr
    assert "FIXED" not in run.stdout and "regression(s)" not in run.stdout
    deadline = time.monotonic() + 10
    while group_alive(agent_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(agent_pid), "the replayed agent's process group survived"


def test_check_of_an_interrupted_runs_transcripts_is_not_a_pass(tmp_path: Path) -> None:
    """One reading, one verdict: a v1 run SIGTERM stopped while the silent agent waited,
    then ``check`` on its transcript (``check`` itself runs to its end). The check says
    the run was interrupted, as the run did, and exits 1, never 0 (it was a PASS)."""
    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    live = tmp_path / "live"
    proc = start_cli(["--agent", agent_command("silent_after_prompt"), "--protocol", "1",
                      "--case", "prompt-lifecycle", "--timeout", "60", "-j", "1",
                      "--agent-env", f"HOSTILE_READY_FIFO={fifo}",
                      "--transcripts", str(tmp_path / "transcripts"),
                      "--json", str(tmp_path / "report.json"), "--no-color"], live)
    wait_ready(fifo)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    run = finish_cli(proc, live, signalled)
    assert run.returncode == 128 + signal.SIGTERM, run.stderr[-2000:]
    ran = json.loads((tmp_path / "report.json").read_text("utf-8"))
    assert ran["interrupted"] == "SIGTERM"

    checked = tmp_path / "check.json"
    proc = start_cli(["check", str(tmp_path / "transcripts"), "--json", str(checked),
                      "--no-color"], tmp_path / "check")
    done = finish_cli(proc, tmp_path / "check", time.monotonic())
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "verdict: INTERRUPTED by SIGTERM" in done.stdout
    assert "PASS" not in done.stdout
    report = json.loads(checked.read_text("utf-8"))
    assert report["interrupted"] == "SIGTERM"
    assert report["summary"]["verdict"] == "interrupted"

    def outcomes(data: dict[str, object]) -> set[tuple[str, str]]:
        return {(r["requirement"], r["outcome"]) for r in data["results"]}  # type: ignore[attr-defined, index]

    assert outcomes(report) == outcomes(ran)  # the same findings as the run it records
