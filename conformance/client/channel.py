"""The control channel between the suite and its agent doubles: JSON lines on a Unix socket.

The suite owns the socket; each double that a client spawns connects to it.

double -> suite::

    {"type": "hello", "pid": 123, "protocol": 2}        first line
    {"type": "line", "dir": "out"|"in", "b64": "..."}    a wire line the double wrote / read
    {"type": "event", "event": "turn-start", "data": {}} turn-start, turn-end, session,
                                                         probe-answered, probe-unawaited,
                                                         wait-timeout, version-mismatch,
                                                         load, load-end, extra-arguments
    {"type": "next-turn"}                                a session/prompt arrived: which turn?

suite -> double::

    {"type": "config", "conn": 0, "protocol": 2, "wait": 5.0, "response_message_id": true,
     "load_session": false, "replay_marker": false}
    {"type": "turn", "turn": {...TurnScript...} | null}

The suite records every reported line in the case's transcript as it arrives
(``src`` agent / stream stdout for what the double wrote, ``src`` client /
stream stdin for what the client wrote to it), so the transcript is the
double's wire transcript in the suite's usual format.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO

from conformance.client.script import TurnScript

if TYPE_CHECKING:  # the agent double imports this module for its side: it stays light
    from conformance.transcript import Transcript

#: The longest the double waits for the client's answer to a probe or a request of its
#: own: --timeout, but at most this (a client that never answers costs it once a turn).
ANSWER_WAIT_CAP = 5.0

JsonObject = dict[str, Any]
MAX_CONTROL_LINE = 64 * 1024 * 1024


def _send(sock: socket.socket, lock: threading.Lock, obj: JsonObject) -> None:
    data = (json.dumps(obj, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")
    with lock:
        sock.sendall(data)


class DoubleSide:
    """The double's end: report lines and events, ask for the next turn."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.reader: BinaryIO = sock.makefile("rb")
        self.config: JsonObject = {}

    @classmethod
    def connect(cls, path: str, *, protocol: int | None) -> DoubleSide:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        side = cls(sock)
        side._put({"type": "hello", "pid": os.getpid(), "protocol": protocol})
        side.config = side._get("config")
        return side

    def _put(self, obj: JsonObject) -> None:
        try:
            _send(self.sock, self.lock, obj)
        except OSError:
            raise ConnectionError("control channel closed") from None

    def _get(self, kind: str) -> JsonObject:
        line = self.reader.readline(MAX_CONTROL_LINE)
        if not line:
            raise ConnectionError("control channel closed")
        msg = json.loads(line)
        if not isinstance(msg, dict) or msg.get("type") != kind:
            raise ConnectionError(f"control channel: expected {kind}, got {line[:80]!r}")
        return msg

    def line(self, direction: str, raw: bytes) -> None:
        self._put({"type": "line", "dir": direction, "b64": base64.b64encode(raw).decode("ascii")})

    def event(self, name: str, data: JsonObject) -> None:
        self._put({"type": "event", "event": name, "data": data})

    def next_turn(self) -> TurnScript | None:
        self._put({"type": "next-turn"})
        turn = self._get("turn").get("turn")
        return TurnScript.from_json(turn) if isinstance(turn, dict) else None


class DoubleConn:
    """One double's connection, as the suite side knows it."""

    __slots__ = ("conn", "pid", "closed")

    def __init__(self, conn: int, pid: int | None, closed: bool = False) -> None:
        self.conn, self.pid, self.closed = conn, pid, closed


class Event:
    """What a double said: its connection, the event's name (a double event name, or
    "closed" when its connection ended) and the event's data."""

    __slots__ = ("conn", "name", "data")

    def __init__(self, conn: int, name: str, data: JsonObject | None = None) -> None:
        self.conn, self.name, self.data = conn, name, {} if data is None else data

    def __repr__(self) -> str:
        return f"Event(conn={self.conn!r}, name={self.name!r}, data={self.data!r})"


class SuiteSide:
    """The suite's end: a socket server that records what every double reports.

    Events reach the driver through :attr:`events`; a byte is written to
    :attr:`wake_fd` for each, so a ``select`` loop that also reads a pty wakes
    up as soon as one arrives (no polling).
    """

    def __init__(self, directory: str, transcript: Transcript, *, protocol: int, wait: float,
                 response_message_id: bool, next_turn: Callable[[int], TurnScript | None]) -> None:
        self.path = os.path.join(directory, "control.sock")
        self.transcript = transcript
        self.config = {"protocol": protocol, "wait": wait,
                       "response_message_id": response_message_id}
        self.next_turn = next_turn
        self.events: queue.Queue[Event] = queue.Queue()
        self.wake_fd, self._wake_w = os.pipe()
        os.set_blocking(self.wake_fd, False)
        self.doubles: dict[int, DoubleConn] = {}
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closing = False
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(8)
        accept = threading.Thread(target=self._accept, name="control-accept", daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            with self._lock:
                if self._closing:
                    sock.close()
                    return
                self._socks.append(sock)
            t = threading.Thread(target=self._serve, args=(sock,), name="control-conn",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _emit(self, ev: Event) -> None:
        self.events.put(ev)
        try:
            os.write(self._wake_w, b"!")
        except OSError:
            pass

    def _serve(self, sock: socket.socket) -> None:
        lock = threading.Lock()
        reader = sock.makefile("rb")
        dc: DoubleConn | None = None
        try:
            first = reader.readline(MAX_CONTROL_LINE)
            hello = json.loads(first) if first else None
            if not isinstance(hello, dict) or hello.get("type") != "hello":
                return
            with self._lock:
                dc = DoubleConn(len(self.doubles), hello.get("pid"))
                self.doubles[dc.conn] = dc
            self.transcript.add(dc.conn, "harness", "harness", event="start",
                                data={"pid_role": "agent-double", "pid": dc.pid})
            _send(sock, lock, {"type": "config", "conn": dc.conn, **self.config})
            self._emit(Event(dc.conn, "hello", {"pid": dc.pid}))
            while True:
                line = reader.readline(MAX_CONTROL_LINE)
                if not line:
                    break
                msg = json.loads(line)
                kind = msg.get("type")
                if kind == "line":
                    raw = base64.b64decode(msg["b64"])
                    if msg["dir"] == "out":
                        self.transcript.add(dc.conn, "agent", "stdout", raw)
                    else:
                        self.transcript.add(dc.conn, "client", "stdin", raw)
                elif kind == "event":
                    self._record_event(dc, str(msg.get("event")), msg.get("data") or {})
                elif kind == "next-turn":
                    turn = self.next_turn(dc.conn)
                    _send(sock, lock, {"type": "turn",
                                       "turn": turn.to_json() if turn else None})
        except (OSError, ValueError, KeyError):
            pass  # a broken control line ends this double's report; the exit is recorded below
        finally:
            reader.close()
            sock.close()
            if dc is not None:
                dc.closed = True
                self.transcript.add(dc.conn, "harness", "harness", event="exit",
                                    data={"pid_role": "agent-double",
                                          "reason": "the double's connection ended"})
                self._emit(Event(dc.conn, "closed"))

    def _record_event(self, dc: DoubleConn, name: str, data: JsonObject) -> None:
        if name == "wait-timeout":
            e = self.transcript.add(dc.conn, "harness", "harness", event="timeout",
                                    data={"timeout": self.config["wait"], **data})
            from conformance.timers import record as record_timer

            record_timer(self.transcript.header, "agent double's answer wait",
                         float(self.config["wait"]), "--timeout",
                         f"waiting for {data.get('waiting_for')}; the double waits "
                         f"--timeout, at most {ANSWER_WAIT_CAP:g} s", e.seq)
        else:
            self.transcript.add(dc.conn, "harness", "harness", event="note",
                                data={"note": name, **data})
        self._emit(Event(dc.conn, name, data))

    def drain_wake(self) -> None:
        try:
            while os.read(self.wake_fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def next_event(self, timeout: float) -> Event | None:
        try:
            return self.events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def pids(self) -> list[int]:
        return [d.pid for d in self.doubles.values() if isinstance(d.pid, int) and not d.closed]

    def close(self) -> None:
        with self._lock:
            self._closing = True
            socks = list(self._socks)
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept() thread on Linux
        except OSError:
            pass
        try:
            self.server.close()
        except OSError:
            pass
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=2.0)
        for fd in (self.wake_fd, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
