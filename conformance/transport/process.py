"""One target process: started in its own process group, written to, and ended.

Its output is read by the threads of :class:`~conformance.transport.reading.Reading`;
this module starts the process, writes lines to its stdin with a deadline, and
ends the whole group, escalating from closing stdin to SIGTERM to SIGKILL. It
also keeps the targets not yet closed, for the interrupted run's safety net and
for telling concurrent targets' connections apart.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.transcript import Entry, Transcript
from conformance.transport.command import TargetCommandError
from conformance.transport.reading import Reading, TargetTimeout

DEFAULT_MAX_LINE = 16 * 1024 * 1024  # bytes kept of one stdout line
DEFAULT_MAX_STDERR = 256 * 1024  # bytes of stderr kept in the transcript per connection
DEFAULT_MAX_ENTRIES = 20_000  # lines (stdout and stderr) recorded per connection
DEFAULT_MAX_RECORDED = 64 * 1024 * 1024  # bytes of stdout lines recorded per connection
DEFAULT_MAX_QUEUED = 8 * 1024 * 1024  # bytes of read lines waiting for the suite (see _queue)
DEFAULT_GRACE = 2.0  # seconds to exit after stdin closes, and again after SIGTERM


_LIVE: set[TargetProcess] = set()  # started and not yet closed (see close_all)


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait while the block starts a target, then reach the handlers
    they were sent to, in order. A run's handlers raise to stop it; a raise that lands
    inside a spawn leaves a started process nobody will end (it ran before its owner
    kept its pid) or a half-built object whose finalizer prints a traceback (pexpect's
    pty). Off the main thread, where no handler runs, the block runs as it is."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or \
            any(signal.getsignal(sig) is None for sig in sigs):  # a handler set outside Python
        yield
        return
    held: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        for signum in held:
            signal.raise_signal(signum)


def signal_group(pgid: int, sig: int) -> None:
    """Signal a process group that may already have gone (then there is nothing to do)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """End the group of a process started with ``start_new_session``: SIGTERM, then
    SIGKILL after ``grace`` seconds. A command that ended by itself may have taken its
    whole group with it, and its leader may already be reaped: that is not an error."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        signal_group(proc.pid, sig)
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def close_all(grace: float) -> None:
    """End every target not yet closed: the safety net of an interrupted run."""
    for target in list(_LIVE):
        target.close(grace)


def owner_of_connection(local_port: int, remote_port: int) -> TargetProcess | None:
    """The live target whose process group holds the loopback TCP connection from
    ``local_port`` to ``remote_port`` (Linux ``/proc``; None elsewhere or when no target
    does). Lets one server tell apart the targets of cases that run at the same time."""
    inode = _socket_inode(local_port, remote_port)
    if inode is None:
        return None
    wanted = f"socket:[{inode}]"
    groups = {t.pgid: t for t in list(_LIVE)}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pgid = int(stat.read_text().rsplit(")", 1)[1].split()[2])
            if pgid in groups and any(os.readlink(fd) == wanted
                                      for fd in (stat.parent / "fd").iterdir()):
                return groups[pgid]
        except (OSError, IndexError, ValueError):
            continue  # gone, or not ours to read
    return None


def _socket_inode(local_port: int, remote_port: int) -> int | None:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if (len(f) > 9 and int(f[1].rsplit(":", 1)[1], 16) == local_port
                    and int(f[2].rsplit(":", 1)[1], 16) == remote_port):
                return int(f[9])
    return None


@dataclass
class ExitInfo:
    returncode: int | None
    signal: str | None
    killed_by_suite: bool
    ended_by: str = "exit"  # exit | stdin-eof | sigterm | sigkill | unknown


class TargetProcess(Reading):
    """One spawned target and the reader threads that record its output.

    The suite never blocks on the target without a deadline: reads happen in
    threads, writes give up after ``write_timeout`` seconds, the end of the
    process (even when a process it started keeps its pipes open) is noticed
    by a watcher thread, and :meth:`close` ends the whole process group,
    escalating from closing stdin to SIGTERM to SIGKILL.
    """

    def __init__(self, argv: Sequence[str], transcript: Transcript, *, conn: int,
                 src: str, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 max_line: int = DEFAULT_MAX_LINE, max_stderr: int = DEFAULT_MAX_STDERR,
                 max_entries: int = DEFAULT_MAX_ENTRIES,
                 max_recorded: int = DEFAULT_MAX_RECORDED, grace: float = DEFAULT_GRACE,
                 write_timeout: float | None = None,
                 max_queued: int = DEFAULT_MAX_QUEUED) -> None:
        self.transcript = transcript
        self.conn = conn
        self.src = src  # who the target is: "agent" or "client"
        self.peer = "client" if src == "agent" else "agent"
        self.max_line = max_line
        self.max_stderr = max_stderr
        self.max_entries = max_entries
        self.max_recorded = max_recorded
        self.grace = grace
        self.write_timeout = write_timeout
        self.inbox: queue.Queue[Entry | None] = queue.Queue()
        self.max_queued = max_queued
        self.queued = 0  # bytes of the lines in the inbox (ENTRY_COST each plus their text)
        self.queued_peak = 0
        self.held_back = threading.Event()  # the reader has waited for the suite to catch up
        self._room = threading.Condition()
        self.stderr_tail: deque[bytes] = deque()
        self._stderr_tail_len = 0
        self.stderr_bytes = 0  # everything the target wrote to stderr
        self.stderr_kept = 0  # the part recorded in the transcript
        self.recorded_entries = 0
        self.recorded_bytes = 0
        self.unrecorded_lines = 0  # stdout lines read after the recording budget was spent
        self.unrecorded_bytes = 0
        self.output_held = False  # the process exited but its stdout stayed open
        self.stdout_closed = threading.Event()
        self.exited = threading.Event()  # set by the exit watcher once the process has ended
        self.exit_info: ExitInfo | None = None
        self._killed = False
        self._closing = threading.Event()  # the suite no longer waits for lines
        self._released = False  # the suite let go: nothing more is recorded
        self._after_close = 0
        self._record_lock = threading.Lock()
        self._write_lock = threading.Lock()
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        with signals_held():  # whole and in _LIVE before a stopping signal can land
            try:
                self.proc = subprocess.Popen(
                    list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, env=full_env, cwd=cwd, start_new_session=True,
                    bufsize=0)
            except FileNotFoundError:
                raise TargetCommandError(f"target command not found: {argv[0]}") from None
            except PermissionError:
                raise TargetCommandError(
                    f"target command is not executable: {argv[0]}") from None
            except OSError as exc:
                raise TargetCommandError(
                    f"cannot start target {argv[0]}: {exc.strerror}") from None
            self.pid = self.proc.pid
            self.pgid = self.pid  # start_new_session: the target leads its own group
            transcript.add(conn, "harness", "harness", event="start",
                           data={"argv": list(argv), "pid_role": src, "pid": self.pid,
                                 "pgid": self.pgid})
            self._readers = [
                threading.Thread(target=self._read_stdout, name=f"stdout-{conn}", daemon=True),
                threading.Thread(target=self._read_stderr, name=f"stderr-{conn}", daemon=True),
            ]
            for t in self._readers:
                t.start()
            threading.Thread(target=self._watch_exit, name=f"exit-{conn}", daemon=True).start()
            _LIVE.add(self)

    # -- writing -----------------------------------------------------------
    def send(self, obj: Any, *, fuzz: bool = False, raw: bytes | None = None) -> Entry:
        """Write one line to the target's stdin.

        Raises :class:`TargetTimeout` (after recording a ``timeout`` event) when
        the target has not read it within ``write_timeout`` seconds: a target
        that stops reading its input must not hang the suite on a full pipe.
        """
        line = raw if raw is not None else json.dumps(
            obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        with self._write_lock:
            entry = self.transcript.add(self.conn, self.peer, "stdin", line, fuzz=fuzz)
            try:
                done = self._write_all(line + b"\n")
            except (OSError, ValueError):
                self.transcript.add(self.conn, "harness", "harness", event="note",
                                    data={"write_failed": entry.seq})
                return entry
        if not done:
            self.transcript.add(self.conn, "harness", "harness", event="timeout", data={
                "timeout": self.write_timeout, "waiting_for": "the target to read its input",
                "stderr_tail": self.stderr_text()[-1000:]})
            raise TargetTimeout()
        return entry

    def _write_all(self, data: bytes) -> bool:
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        if self.write_timeout is None:
            while data:
                data = data[os.write(fd, data):]
            return True
        os.set_blocking(fd, False)
        deadline = time.monotonic() + self.write_timeout
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            _, ready, _ = select.select([], [fd], [], remaining)
            if ready:
                try:
                    view = view[os.write(fd, view):]
                except BlockingIOError:
                    pass
        return True

    # -- ending ------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, grace: float | None = None) -> ExitInfo:
        """End the target: close stdin, wait ``grace`` seconds, SIGTERM the process
        group, wait again, SIGKILL it; then record the ``exit`` event.

        Bounded: about three times ``grace`` at worst, even when a process outside
        the group holds the target's pipes (the readers are then let go).
        """
        if self.exit_info is not None:
            return self.exit_info
        grace = self.grace if grace is None else grace
        self._closing.set()
        with self._room:  # a reader waiting for room goes back to reading (and dropping)
            self._room.notify_all()
        ended_by = "exit" if self.proc.poll() is not None else "stdin-eof"
        closed_at = time.monotonic()
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        if self.wait_exit(grace) is None:
            self._killed = True
            ended_by = "sigterm"
            self._signal_group(signal.SIGTERM)
            if self.wait_exit(grace) is None:
                ended_by = "sigkill"
                self._signal_group(signal.SIGKILL)
                if self.wait_exit(grace) is None:
                    ended_by = "unknown"  # not even SIGKILL ended it in time
        exit_seconds = round(time.monotonic() - closed_at, 1)  # how long the exit took
        # Anything the target left in its group (grandchildren holding pipes) goes too.
        self._signal_group(signal.SIGKILL)
        deadline = time.monotonic() + grace
        for t in self._readers:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        held = [t.name for t in self._readers if t.is_alive()]
        rc = self.proc.returncode
        sig = signal.Signals(-rc).name if rc is not None and rc < 0 else None
        with self._record_lock:
            recorded = self._released  # an interrupted close already wrote the exit event
            self._released = True  # readers stop; nothing is added after the exit event
            if held and not recorded:
                self.transcript.add(self.conn, "harness", "harness", event="note", data={
                    "note": "output still open after the process group ended (held by a "
                            "process that left the group); the suite stopped reading it"})
            if not recorded:
                self.transcript.add(self.conn, "harness", "harness", event="exit", data={
                    "returncode": rc, "signal": sig, "killed_by_suite": self._killed,
                    "ended_by": ended_by, "grace": grace, "output_held": self.output_held,
                    "stderr_bytes": self.stderr_bytes, "stderr_kept": self.stderr_kept,
                    "unrecorded_lines": self.unrecorded_lines,
                    "unrecorded_bytes": self.unrecorded_bytes,
                    # how long a slow exit took (a clean one is not timed: transcripts of
                    # two runs of the same target stay equal)
                    **({"exit_seconds": exit_seconds} if self._killed else {})})
        self.exit_info = ExitInfo(rc, sig, self._killed, ended_by)  # last: close is complete
        _LIVE.discard(self)
        return self.exit_info

    def _signal_group(self, sig: int) -> None:
        signal_group(self.pgid, sig)

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status once the process has ended, or None after ``timeout`` seconds.

        Woken by the exit watcher the moment the process ends (``Popen.wait`` with a
        timeout polls, sleeping up to 50 ms between looks).
        """
        if self.exited.wait(timeout):
            try:
                return self.proc.wait(timeout=timeout)  # reaps at once: it has exited
            except subprocess.TimeoutExpired:
                return None
        return self.proc.poll()
