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
import shlex
import shutil
import signal
import subprocess
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from conformance.transcript import Entry, Transcript

DEFAULT_MAX_LINE = 16 * 1024 * 1024
DEFAULT_MAX_STDERR = 256 * 1024
STDERR_TAIL = 4096
_READ_SIZE = 65536


class TargetCommandError(Exception):
    """The target command cannot be started (not found, not executable, empty)."""


class TargetExited(Exception):
    """The target closed stdout (or exited) while the suite waited for a message."""


class TargetTimeout(Exception):
    """No message arrived within the wait's timeout."""


def split_command(command: str | Sequence[str]) -> list[str]:
    argv = shlex.split(command) if isinstance(command, str) else list(command)
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


class TargetProcess:
    """One spawned target and the two reader threads that record its output."""

    def __init__(self, argv: Sequence[str], transcript: Transcript, *, conn: int,
                 src: str, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 max_line: int = DEFAULT_MAX_LINE, max_stderr: int = DEFAULT_MAX_STDERR) -> None:
        self.transcript = transcript
        self.conn = conn
        self.src = src  # who the target is: "agent" or "client"
        self.peer = "client" if src == "agent" else "agent"
        self.max_line = max_line
        self.max_stderr = max_stderr
        self.inbox: "queue.Queue[Entry | None]" = queue.Queue()
        self.stderr_tail: deque[bytes] = deque()
        self._stderr_tail_len = 0
        self.stderr_bytes = 0
        self.stdout_closed = threading.Event()
        self.exit_info: ExitInfo | None = None
        self._killed = False
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
        self.pid = self.proc.pid
        self.pgid = self.pid
        transcript.add(conn, "harness", "harness", event="start",
                       data={"argv": list(argv), "pid_role": src})
        self._threads = [
            threading.Thread(target=self._read_stdout, name=f"stdout-{conn}", daemon=True),
            threading.Thread(target=self._read_stderr, name=f"stderr-{conn}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # -- reading -----------------------------------------------------------
    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        dropped = 0  # bytes of the current line beyond max_line
        while True:
            try:
                chunk = os.read(fd, _READ_SIZE)
            except OSError:
                chunk = b""
            if not chunk:
                break
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
        self.stdout_closed.set()
        self.inbox.put(None)

    def _emit(self, line: bytes, dropped: int, unterminated: bool = False) -> None:
        truncated = len(line) + dropped if dropped else None
        entry = self.transcript.add(self.conn, self.src, "stdout", line, truncated=truncated)
        if dropped and entry.error is None:
            entry.error = f"line cut at {self.max_line} bytes (it was {len(line) + dropped})"
        elif dropped:
            entry.error = f"{entry.error}; line cut at {self.max_line} bytes (it was {len(line) + dropped})"
        if unterminated:
            suffix = "no newline before end of output"
            entry.error = suffix if entry.error is None else f"{entry.error}; {suffix}"
        self.inbox.put(entry)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        pending = bytearray()
        while True:
            try:
                chunk = os.read(fd, _READ_SIZE)
            except OSError:
                chunk = b""
            if not chunk:
                break
            self.stderr_bytes += len(chunk)
            self._keep_tail(chunk)
            recorded = self.stderr_bytes - len(chunk)
            if recorded < self.max_stderr:
                pending += chunk[: self.max_stderr - recorded]
                *lines, rest = bytes(pending).split(b"\n")
                for line in lines:
                    self.transcript.add(self.conn, self.src, "stderr", line)
                pending = bytearray(rest)
                if self.stderr_bytes >= self.max_stderr:
                    if pending:
                        self.transcript.add(self.conn, self.src, "stderr", bytes(pending))
                        pending.clear()
                    self.transcript.add(self.conn, "harness", "harness", event="note",
                                        data={"stderr_capped_at": self.max_stderr})
        if pending:
            self.transcript.add(self.conn, self.src, "stderr", bytes(pending))

    def _keep_tail(self, chunk: bytes) -> None:
        self.stderr_tail.append(chunk[-STDERR_TAIL:])
        self._stderr_tail_len += len(self.stderr_tail[-1])
        while self._stderr_tail_len - len(self.stderr_tail[0]) >= STDERR_TAIL:
            self._stderr_tail_len -= len(self.stderr_tail.popleft())

    def stderr_text(self) -> str:
        tail = b"".join(self.stderr_tail)[-STDERR_TAIL:]
        return tail.decode("utf-8", errors="replace")

    def receive(self, timeout: float) -> Entry:
        """The next line from the target's stdout; raises on timeout or end of output."""
        try:
            item = self.inbox.get(timeout=max(0.0, timeout))
        except queue.Empty:
            raise TargetTimeout() from None
        if item is None:
            self.inbox.put(None)  # keep reporting the end to later callers
            raise TargetExited()
        return item

    # -- writing -----------------------------------------------------------
    def send(self, obj: Any, *, fuzz: bool = False, raw: bytes | None = None) -> Entry:
        line = raw if raw is not None else json.dumps(
            obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
        with self._write_lock:
            entry = self.transcript.add(self.conn, self.peer, "stdin", line, fuzz=fuzz)
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.transcript.add(self.conn, "harness", "harness", event="note",
                                    data={"write_failed": entry.seq})
        return entry

    # -- ending ------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, grace: float = 2.0) -> ExitInfo:
        """Close stdin, wait ``grace`` seconds, then end the whole process group."""
        if self.exit_info is not None:
            return self.exit_info
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._killed = True
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait()
        # Anything the target left in its group (grandchildren holding pipes) goes too.
        self._signal_group(signal.SIGKILL)
        for t in self._threads:
            t.join(timeout=grace)
        rc = self.proc.returncode
        sig = signal.Signals(-rc).name if rc is not None and rc < 0 else None
        self.exit_info = ExitInfo(rc, sig, self._killed)
        self.transcript.add(self.conn, "harness", "harness", event="exit",
                            data={"returncode": rc, "signal": sig,
                                  "killed_by_suite": self._killed,
                                  "stderr_bytes": self.stderr_bytes})
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
