"""A finding is on disk before it is shrunk: a SIGKILL at any moment of shrinking loses
nothing already found.

The slow numeric-ID agent breaks MID-S-01/type in v1 and in v2; ``--max-failures 2``
ends generation once both are found, then each is shrunk in turn (a replay takes a
second at least). The run is killed with SIGKILL (no cleanup at all) while it shrinks
the first, and while it shrinks the second: both findings are in the regression folder
each time, whole, each a transcript ``replay`` can read.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import REPO_ROOT, cli_env

from conformance import transcript as tmod

AGENT = REPO_ROOT / "fixtures" / "agents" / "_slow_numeric_id.py"


def headers(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*.jsonl")):
        header, _ = tmod.load(path)  # whole: it loads
        out.append(header)
    return out


@pytest.mark.parametrize("moment", ["MID-S-01/type (v1)", "MID-S-01/type (v2)"])
def test_sigkill_while_shrinking_loses_no_finding(tmp_path: Path, moment: str) -> None:
    regs, log = tmp_path / "regs", tmp_path / "stderr.txt"
    env = cli_env({"ACP_SLOW_SECONDS": "1"})
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conformance", "fuzz", "--agent",
             f"{sys.executable} {AGENT}", "--max-examples", "200", "--max-failures", "2",
             "--seed", "7", "--regressions", str(regs), "--out", str(tmp_path / "out"),
             "--no-color"],
            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=REPO_ROOT,
            start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while f"shrinking {moment}: " not in log.read_text() and proc.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            assert f"shrinking {moment}: " in log.read_text(), log.read_text()[-3000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            try:  # the killed run's agents: by the process group the test gave it
                import os

                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    found = headers(regs)
    assert {(h["finding"]["requirement"], h["protocol"]) for h in found} == {
        ("MID-S-01/type", 1), ("MID-S-01/type", 2)}, json.dumps(found)[:2000]
    for h in found:
        assert h["steps"], h  # a replayable counterexample, shrunk or not
