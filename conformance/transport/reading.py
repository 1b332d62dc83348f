"""The reading side of a target: the threads that record its stdout and stderr.

stdout is read by a thread that splits raw bytes on ``\\n`` and records each
line in the transcript *before* anything parses it, then hands it to the suite
through a byte-bounded inbox; stderr is drained by another thread, recorded up
to a cap, and its tail kept for findings; a watcher notices the end of the
process even when a process it started holds its output open.
"""

from __future__ import annotations

import os
import queue
import select
import subprocess
import threading
from collections import deque
from collections.abc import Iterator

from conformance.transcript import Entry, Transcript

AFTER_CLOSE_LINES = 200  # stdout lines still recorded once the suite has stopped waiting
ENTRY_COST = 512  # what a queued line costs beyond its text, for that budget
STDERR_TAIL = 4096
EXIT_SETTLE = 0.5  # seconds the output may stay open after the target process exits
_READ_SIZE = 65536
_POLL = 0.5  # how often a blocked reader checks whether the suite has let go


class TargetExited(Exception):
    """The target closed stdout (or exited) while the suite waited for a message."""


class TargetTimeout(Exception):
    """No message arrived within the wait's timeout."""


def _cost(entry: Entry) -> int:
    return ENTRY_COST + len(entry.raw or entry.raw_b64 or "")



class Reading:
    """The reader threads of a :class:`~conformance.transport.process.TargetProcess`
    and the inbox they fill; the process side sets these attributes up."""

    proc: subprocess.Popen[bytes]
    pid: int
    transcript: Transcript
    conn: int
    src: str
    max_line: int
    max_stderr: int
    max_entries: int
    max_recorded: int
    max_queued: int
    inbox: queue.Queue[Entry | None]
    queued: int
    queued_peak: int
    held_back: threading.Event
    stderr_tail: deque[bytes]
    stderr_bytes: int
    stderr_kept: int
    recorded_entries: int
    recorded_bytes: int
    unrecorded_lines: int
    unrecorded_bytes: int
    output_held: bool
    stdout_closed: threading.Event
    exited: threading.Event
    _room: threading.Condition
    _stderr_tail_len: int
    _closing: threading.Event
    _released: bool
    _after_close: int
    _record_lock: threading.Lock
    _readers: list[threading.Thread]

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
        """The tail of the target's stderr, masked as the transcript masks (before the cut,
        so a cut never leaves part of a value)."""
        tail = self.transcript.masker.bytes(b"".join(self.stderr_tail))[-STDERR_TAIL:]
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
        self.exited.set()
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


def _whole_characters(line: bytes) -> bytes:
    """Drop a UTF-8 sequence that a cut split in two (so the cut alone is not a UTF-8 fault)."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            return line[:exc.start]
    return line
