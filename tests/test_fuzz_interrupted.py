"""A cancelled fuzz run is never a pass, whoever fuzzes what: the client fuzzer through the
command line (``fuzz --client``) and the pytest plugin's ``--acp-fuzz``.

Real signals to real runs, sent once the fuzzer is generating (its progress line, or the
plugin's fuzz item started) against the bundled reference targets, which break no rule:
the run exits 128+N; the command line's JSON and Markdown say interrupted and its console
neither passes nor blames the target for flakiness (nothing was repeated); the plugin's
terminal and ``--junitxml`` say interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import cli_env
from helpers import cancelled_fuzz_run, counting_starts, lines_in, wait_for_line

from conformance.cli.demo import reference_agent_command
from conformance.client.runner import reference_client


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cancelled_client_fuzz_run_is_not_a_pass(tmp_path: Path, sig: signal.Signals) -> None:
    command, _ = reference_client()
    starts = tmp_path / "client-starts"  # one line per client process: one per run
    run = cancelled_fuzz_run(tmp_path, ["--client", counting_starts(command, starts)],
                             lambda: lines_in(starts) >= 3, sig)

    assert run.returncode == 128 + sig, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert f"verdict: INTERRUPTED by {sig.name}" in run.stdout
    assert "PASS" not in run.stdout
    assert "did not repeat" not in run.stdout + run.stderr  # no false flakiness note
    assert "flaky" not in (run.stdout + run.stderr).lower()
    assert run.report is not None and run.report["role"] == "client"
    assert run.report["interrupted"] == sig.name
    assert run.report["summary"]["verdict"] == "interrupted"
    assert "INTERRUPTED" in (tmp_path / "report.md").read_text("utf-8")


#: A plugin (``-p``) that sends the session its own stop while the garbage collector runs,
#: two seconds into the first fuzz test: the handler's raise lands in the gc callback
#: Hypothesis and this module install, where Python drops it.
STOP_IN_GC = """
import gc, os, signal, time

state = {"at": None}

def in_gc(phase, info):
    if phase == "start" and state["at"] is not None and time.monotonic() >= state["at"]:
        state["at"] = None
        os.kill(os.getpid(), signal.{sig})
        for _ in range(1000):
            pass  # the handler runs here, inside the callback

def pytest_runtest_call(item):
    if in_gc not in gc.callbacks:
        state["at"] = time.monotonic() + 2.0
        gc.callbacks.append(in_gc)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("where", ["handler", "gc"])
def test_cancelled_plugin_fuzz_session_is_not_a_pass(tmp_path: Path, sig: signal.Signals,
                                                     where: str) -> None:
    """A stop during ``--acp-fuzz`` ends the session 128+N, INTERRUPTED, never a pass: sent
    from outside, or landing where Python drops the handler's raise (a gc callback), when
    the next run raises it again (once a deep fuzz went on for minutes)."""
    env = cli_env({"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    env.pop("PYTEST_ADDOPTS", None)
    log = tmp_path / "log.txt"
    args = [sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin",
            "-p", "hypothesis.extra.pytestplugin", "-p", "no:cacheprovider",
            "--rootdir", str(tmp_path), "--acp-fuzz", "--acp-fuzz-effort", "deep",
            "--acp-agent", subprocess.list2cmdline(reference_agent_command()),
            "--junitxml", "junit.xml", "-v"]
    if where == "gc":
        (tmp_path / "stop_in_gc.py").write_text(STOP_IN_GC.replace("{sig}", sig.name), "utf-8")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path),
                                                          env.get("PYTHONPATH")]))
        args[3:3] = ["-p", "stop_in_gc"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_line(log, "acp-fuzz-agent::agent_v1")  # the fuzz test is generating
        if where == "handler":
            time.sleep(2.0)
            proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text("utf-8", "replace")
    assert proc.returncode == 128 + sig, text[-3000:]  # not pytest's 2, not killed by it
    assert "INTERNALERROR" not in text
    assert "Exception ignored" not in text  # the dropped raise is not printed
    assert f"verdict: INTERRUPTED by {sig.name}" in text
    assert "PASSED" not in text and "did not repeat" not in text
    root = ET.parse(tmp_path / "junit.xml").getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == "interrupted" and props["interrupted"] == sig.name


def test_an_interrupt_in_a_frame_without_a_line_is_still_shown() -> None:
    """Seen with SIGTERM half a second into ``--acp-fuzz`` (while Hypothesis built its
    character map): the interrupt landed in a frame Python gives no line number, and
    pytest's terminal reporter, showing where, raised a TypeError (exit 1 and a traceback,
    not 128+N). The plugin leaves such frames out of the interrupt it raised, and the
    exception the signal cut short."""
    import types

    from _pytest._code.code import ExceptionInfo, Traceback, TracebackEntry

    from conformance.pytest_plugin.reports import showable

    try:
        try:
            raise FileNotFoundError("charmap")
        except FileNotFoundError:
            raise KeyboardInterrupt from None
    except KeyboardInterrupt:
        excinfo = ExceptionInfo.from_current()
    excinfo.value.__suppress_context__ = False  # as a signal handler's interrupt has it
    assert excinfo.value.__context__ is not None
    frame = excinfo.traceback[0]._rawentry.tb_frame
    lineless = types.SimpleNamespace(tb_frame=frame, tb_lineno=None, tb_next=None,
                                     tb_lasti=-1)
    good = excinfo.traceback[0]
    excinfo.traceback = Traceback([good, TracebackEntry(lineless)])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        excinfo.getrepr(funcargs=True)  # pytest itself, as it failed
    showable(excinfo)
    shown = str(excinfo.getrepr(funcargs=True))
    assert "KeyboardInterrupt" in shown and "During handling" not in shown


#: A run's SIGTERM handler raises to stop it; the probe sends the signal from inside a
#: spawn, just after the fork (where CI once had it land): through the pty client's
#: pexpect, an agent's Popen, and the fuzzer's start of its workers.
SPAWN_PROBE = r"""
import json, os, signal, subprocess, sys, types

class Stop(Exception):
    pass

def stop(signum, frame):
    raise Stop

signal.signal(signal.SIGTERM, stop)
from conformance.transcript import Transcript

forked, out = [], {"stopped": False}
sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
transcript = Transcript({"role": "agent", "protocol": 1})
execute = subprocess.Popen._execute_child

def spawn(self, *args, **kwargs):  # Popen's fork and exec, then the signal
    execute(self, *args, **kwargs)
    forked.append(self.pid)
    os.kill(os.getpid(), signal.SIGTERM)

try:
    if sys.argv[1] == "pty":
        import ptyprocess
        from conformance.client.pty import PtyClient, Template

        built = ptyprocess.PtyProcess.__init__
        def init(self, pid, fd):
            forked.append(pid)
            os.kill(os.getpid(), signal.SIGTERM)
            built(self, pid, fd)
        ptyprocess.PtyProcess.__init__ = init
        client = PtyClient(Template(sleeper), agent="none", profile=None,
                           control=types.SimpleNamespace(doubles=[]), transcript=transcript,
                           protocol=1, timeout=5.0)
        try:
            client._spawn(sleeper)
        except Stop:
            out["stopped"] = True
        out["kept"] = client.started
        client.stop()
    elif sys.argv[1] == "workers":  # the fuzzer's own workers, started one by one
        import tempfile
        from pathlib import Path
        from conformance.fuzz import workers
        from conformance.fuzz.keeper import Interrupted, interrupts
        from conformance.fuzz.settings import Effort

        subprocess.Popen._execute_child = spawn
        with interrupts(), tempfile.TemporaryDirectory() as work:
            try:  # a worker whose agent does not exist starts nothing of its own
                workers._generate(["--agent", "/nonexistent/agent"], Effort("t", "t", 4, 1, None),
                                  1, 2, Path(work), "none", None)
            except Interrupted:
                out["stopped"] = True
        subprocess.Popen._execute_child = execute
        out["kept"] = []  # here: ended and reaped by the run, gone, not even a zombie
        for pid in forked:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                out["kept"].append(pid)
    else:
        from conformance.transport import process

        subprocess.Popen._execute_child = spawn
        try:
            process.TargetProcess(sleeper, transcript, conn=0, src="agent")
        except Stop:
            out["stopped"] = True
        subprocess.Popen._execute_child = execute
        out["kept"] = [target.pid for target in process._LIVE]
        process.close_all(1.0)
finally:
    for pid in forked:  # ours, ended even when the run let go of them
        try:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                continue  # it had ended: reaped now
        except ChildProcessError:
            continue  # the run reaped it: the pid is no longer ours to signal
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        os.waitpid(pid, 0)
out["forked"] = forked
print(json.dumps(out))
"""


@pytest.mark.parametrize("site", ["pty", "pipes", "workers"])
def test_a_stop_that_lands_inside_a_spawn_waits_for_the_pid_to_be_kept(site: str) -> None:
    """The signal is held while a target starts and delivered once its pid is kept: the
    run still stops (the handler's raise comes right after), no started process is let
    go of, and no half-built object prints a traceback as it is collected."""
    import json

    run = subprocess.run([sys.executable, "-c", SPAWN_PROBE, site], capture_output=True,
                         text=True, env=cli_env(), timeout=60, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Exception ignored" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    out = json.loads(run.stdout)
    assert out["stopped"] is True, out
    assert len(out["forked"]) == 1 and out["kept"] == out["forked"], out


GC_PROBE = """
import gc, os, signal, sys
from conformance.engine import Signals
from conformance.fuzz.keeper import Interrupted, interrupts, raise_pending
from conformance.lifecycle import Cutoff

fired = []

def in_gc(phase, info):  # the signal arrives while the collector runs: the handler's raise
    if phase == "start" and not fired:  # lands here, and Python drops it
        fired.append(1)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass

gc.callbacks.append(in_gc)
if sys.argv[1] == "fuzz":
    try:
        with interrupts():
            gc.collect()
            assert fired
            raise_pending()  # what the fuzz engines call between runs
        print("not stopped")
    except Interrupted as e:
        print("stopped by", e.signum)
else:
    cutoff = Cutoff()
    with Signals(True, cutoff) as signals:
        signals.driving = True
        gc.collect()
        assert fired
    print("stopped by", signals.signum, cutoff.reason())
"""


@pytest.mark.parametrize("road", ["fuzz", "suite"])
def test_a_stop_whose_raise_python_drops_stops_the_run_without_a_traceback(road: str) -> None:
    """A run's SIGINT handler raises to stop it; where the handler runs inside a garbage-
    collector callback (Hypothesis installs one), Python drops the raise and would print
    "Exception ignored in ... Traceback" (a fuzz run cancelled in CI printed one). The
    signal is still noted, so the run stops (the fuzz engines raise it again, the suite
    cuts its cases), and nothing is printed."""
    done = subprocess.run([sys.executable, "-c", GC_PROBE, road], capture_output=True,
                          text=True, timeout=60, check=False, env=cli_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == (["stopped", "by", "2"] if road == "fuzz"
                                   else ["stopped", "by", "2", "SIGINT"]), done.stdout
    assert done.stderr == "", done.stderr


def test_a_noted_stop_is_raised_by_the_next_run_until_its_block_is_over() -> None:
    """Whichever handler took the signal (the fuzz command's, or the plugin's), the next run
    raises it; once the block that took it is over (the session's end), runs start clean:
    a pytest process that ran one interrupted fuzz session does not stop the next."""
    from conformance.fuzz.keeper import Interrupted, noted, pending, raise_pending, settled

    try:
        assert noted(signal.SIGTERM) is True  # the first: its handler raises
        assert noted(signal.SIGINT) is False  # later ones are only noted
        assert pending() == signal.SIGTERM
        with pytest.raises(Interrupted) as caught:
            raise_pending()
        assert caught.value.signum == signal.SIGTERM
    finally:
        settled()
    assert pending() is None
    raise_pending()  # nothing pending: returns
