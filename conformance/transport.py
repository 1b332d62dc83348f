"""Transport over pipes: one target process, newline-delimited JSON on stdin/stdout.

The target runs in its own process group, so ending it ends everything it
started. stdout is read by a thread that splits raw bytes on ``\\n`` and records
each line in the transcript *before* anything parses it; stderr is drained by
another thread, kept apart, recorded up to a cap, and its tail is kept for
findings. Memory is bounded: a line longer than ``max_line`` bytes is cut (the
entry says how long it was), and stderr beyond ``max_stderr`` bytes is only
counted.
"""

from __future__ import annotations

import json
import os
import queue
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.transcript import Entry, Transcript

DEFAULT_MAX_LINE = 16 * 1024 * 1024  # bytes kept of one stdout line
DEFAULT_MAX_STDERR = 256 * 1024  # bytes of stderr kept in the transcript per connection
DEFAULT_MAX_ENTRIES = 20_000  # lines (stdout and stderr) recorded per connection
AFTER_CLOSE_LINES = 200  # stdout lines still recorded once the suite has stopped waiting
DEFAULT_MAX_RECORDED = 64 * 1024 * 1024  # bytes of stdout lines recorded per connection
DEFAULT_MAX_QUEUED = 8 * 1024 * 1024  # bytes of read lines waiting for the suite (see _queue)
ENTRY_COST = 512  # what a queued line costs beyond its text, for that budget
DEFAULT_GRACE = 2.0  # seconds to exit after stdin closes, and again after SIGTERM
STDERR_TAIL = 4096
EXIT_SETTLE = 0.5  # seconds the output may stay open after the target process exits
_READ_SIZE = 65536
_POLL = 0.5  # how often a blocked reader checks whether the suite has let go


_LIVE: set[TargetProcess] = set()  # started and not yet closed (see close_all)


def _cost(entry: Entry) -> int:
    return ENTRY_COST + len(entry.raw or entry.raw_b64 or "")


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


class TargetCommandError(Exception):
    """The target command cannot be started (not found, not executable, empty)."""


class TargetExited(Exception):
    """The target closed stdout (or exited) while the suite waited for a message."""


class TargetTimeout(Exception):
    """No message arrived within the wait's timeout."""


def split_command(command: str | Sequence[str]) -> list[str]:
    try:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError as exc:  # an unclosed quote
        raise TargetCommandError(f"cannot parse the target command {command!r}: {exc}") from None
    if not argv:
        raise TargetCommandError("the target command is empty")
    exe = argv[0]
    if os.sep in exe:
        if not os.path.exists(exe):
            raise TargetCommandError(f"target command not found: {exe}")
        if not os.access(exe, os.X_OK):
            raise TargetCommandError(f"target command is not executable: {exe}")
    elif shutil.which(exe) is None:
        raise TargetCommandError(f"target command not found on PATH: {exe}")
    return argv


@dataclass
class ExitInfo:
    returncode: int | None
    signal: str | None
    killed_by_suite: bool
    ended_by: str = "exit"  # exit | stdin-eof | sigterm | sigkill | unknown


class TargetProcess:
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
        try:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=full_env, cwd=cwd, start_new_session=True,
                bufsize=0)
        except FileNotFoundError:
            raise TargetCommandError(f"target command not found: {argv[0]}") from None
        except PermissionError:
            raise TargetCommandError(f"target command is not executable: {argv[0]}") from None
        except OSError as exc:
            raise TargetCommandError(f"cannot start target {argv[0]}: {exc.strerror}") from None
        _LIVE.add(self)
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

    # -- reading -----------------------------------------------------------
    def _chunks(self, fd: int) -> Iterator[bytes]:
        """Raw chunks from a pipe until end of output or until the suite lets go."""
        while not self._released:
            try:
                ready, _, _ = select.select([fd], [], [], _POLL)
                if not ready:
                    continue
                chunk = os.read(fd, _READ_SIZE)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            yield chunk

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        pipe = self.proc.stdout
        buf = bytearray()
        dropped = 0  # bytes of the current line beyond max_line
        try:
            for chunk in self._chunks(pipe.fileno()):
                start = 0
                while True:
                    nl = chunk.find(b"\n", start)
                    piece = chunk[start:] if nl < 0 else chunk[start:nl]
                    room = self.max_line - len(buf)
                    if room > 0:
                        buf += piece[:room]
                        dropped += max(0, len(piece) - room)
                    else:
                        dropped += len(piece)
                    if nl < 0:
                        break
                    self._emit(bytes(buf), dropped)
                    buf.clear()
                    dropped = 0
                    start = nl + 1
            if buf or dropped:
                self._emit(bytes(buf), dropped, unterminated=True)
        finally:
            self.stdout_closed.set()
            self.inbox.put(None)
            pipe.close()

    def _emit(self, line: bytes, dropped: int, unterminated: bool = False) -> None:
        size = len(line) + dropped
        if dropped:
            line = _whole_characters(line)
        with self._record_lock:
            if self._released:
                return
            record = (self.recorded_entries < self.max_entries
                      and self.recorded_bytes + len(line) <= self.max_recorded
                      and self._after_close < AFTER_CLOSE_LINES)
            if self._closing.is_set():
                self._after_close += 1  # a flood that goes on while the target is ended
            if record:
                self.recorded_entries += 1
                self.recorded_bytes += len(line)
            else:
                if not self.unrecorded_lines:
                    self.transcript.add(self.conn, "harness", "harness", event="note", data={
                        "note": "recording capped", "recorded_lines": self.recorded_entries,
                        "recorded_bytes": self.recorded_bytes,
                        "max_entries": self.max_entries, "max_recorded": self.max_recorded})
                self.unrecorded_lines += 1
                self.unrecorded_bytes += size
            entry = self.transcript.add(self.conn, self.src, "stdout", line,
                                        truncated=size if dropped else None, record=record)
        problems = []
        if dropped:
            if entry.raw_b64 is not None and entry.error is not None:
                problems.append(entry.error)  # invalid UTF-8 before the cut is a fault
            problems.append(f"line cut at the suite's line cap of {self.max_line} bytes "
                            f"(the line was {size} bytes; a cut line is not parsed)")
            entry.msg = None
        elif entry.error is not None:
            problems.append(entry.error)
        if unterminated:
            problems.append("no newline before end of output")
        if problems:
            entry.error = "; ".join(problems)
        self._queue(entry)

    def _queue(self, entry: Entry) -> None:
        """Hand a line to the suite. Lines the suite has not taken yet are bounded by
        ``max_queued`` bytes: past it the reader waits, so the target's writes block on a
        full pipe instead of a flood filling this process's memory."""
        cost = _cost(entry)
        with self._room:
            while self.queued > self.max_queued and not self._closing.is_set():
                self.held_back.set()
                self._room.wait(_POLL)
            if self._closing.is_set():
                return
            self.queued += cost
            self.queued_peak = max(self.queued_peak, self.queued)
        self.inbox.put(entry)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        pipe = self.proc.stderr
        pending = bytearray()
        try:
            for chunk in self._chunks(pipe.fileno()):
                self.stderr_bytes += len(chunk)
                self._keep_tail(chunk)
                if self.stderr_kept >= self.max_stderr:
                    continue
                take = chunk[: self.max_stderr - self.stderr_kept]
                self.stderr_kept += len(take)
                pending += take
                *lines, rest = pending.split(b"\n")
                for line in lines:
                    self._record_stderr(bytes(line))
                pending = bytearray(rest)
                if self.stderr_kept >= self.max_stderr:
                    if pending:
                        self._record_stderr(bytes(pending))
                        pending.clear()
                    with self._record_lock:
                        if not self._released:
                            self.transcript.add(
                                self.conn, "harness", "harness", event="note",
                                data={"note": "stderr capped", "stderr_capped_at": self.max_stderr})
            if pending:
                self._record_stderr(bytes(pending))
        finally:
            pipe.close()

    def _record_stderr(self, line: bytes) -> None:
        with self._record_lock:
            if self._released or self.recorded_entries >= self.max_entries:
                return
            self.recorded_entries += 1
            self.transcript.add(self.conn, self.src, "stderr", line)

    def _keep_tail(self, chunk: bytes) -> None:
        self.stderr_tail.append(chunk[-STDERR_TAIL:])
        self._stderr_tail_len += len(self.stderr_tail[-1])
        while self._stderr_tail_len - len(self.stderr_tail[0]) >= STDERR_TAIL:
            self._stderr_tail_len -= len(self.stderr_tail.popleft())

    def drain_stderr(self, timeout: float) -> None:
        """Give the stderr reader up to ``timeout`` s to reach the end of a dead target's
        stderr, so its last words are in the tail (a grandchild may hold the pipe)."""
        self._readers[1].join(timeout)

    def stderr_text(self) -> str:
        tail = b"".join(self.stderr_tail)[-STDERR_TAIL:]
        return tail.decode("utf-8", errors="replace")

    def _watch_exit(self) -> None:
        """Notice the end of the process even when its stdout stays open.

        A process the target started may inherit its pipes and hold them open
        after the target exits; end-of-output then never comes. The suite's
        target is the process it started, so its exit ends the connection.
        """
        try:
            if hasattr(os, "waitid"):  # wait without reaping: Popen still owns the child
                os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
            else:  # pragma: no cover - platforms without waitid
                self.proc.wait()
        except (ChildProcessError, OSError):
            pass  # already reaped by close()
        if self.stdout_closed.wait(EXIT_SETTLE) or self._closing.is_set():
            return
        self.output_held = True
        with self._record_lock:
            if not self._released:
                self.transcript.add(self.conn, "harness", "harness", event="note", data={
                    "note": "the target exited but its output is still open "
                            "(held by a process it started)"})
        self.inbox.put(None)

    def receive(self, timeout: float) -> Entry:
        """The next line from the target's stdout; raises on timeout or end of output."""
        try:
            item = self.inbox.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise TargetTimeout() from None
        if item is None:
            self.inbox.put(None)  # keep reporting the end to later callers
            raise TargetExited()
        with self._room:
            self.queued -= _cost(item)
            self._room.notify()
        return item

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
                    "unrecorded_bytes": self.unrecorded_bytes})
        self.exit_info = ExitInfo(rc, sig, self._killed, ended_by)  # last: close is complete
        _LIVE.discard(self)
        return self.exit_info

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


def _whole_characters(line: bytes) -> bytes:
    """Drop a UTF-8 sequence that a cut split in two (so the cut alone is not a UTF-8 fault)."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            return line[:exc.start]
    return line
