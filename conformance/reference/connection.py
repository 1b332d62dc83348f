"""The reference agent's JSON-RPC connection: reading stdin, routing messages, answering.

This is the transport half of :class:`conformance.reference.agent.ReferenceAgent`:
one compact JSON object per line on stdout, strict JSON in, batches taken entry by
entry and answered with one array of their responses (JSON-RPC 2.0 section 6:
notifications get none, an empty array one Invalid Request error), requests queued while a turn runs (turns never nest; an agent may take some at
once, ``answers_mid_turn``), notifications handled at once, and the agent's own requests
to the client with their answers. Which methods exist and what they do is the agent's
business (``request_handlers``).
"""

from __future__ import annotations

import os
import select
import sys
import time
from collections import Counter, deque
from collections.abc import Callable

from conformance.reference.sessions import Session, Turn
from conformance.reference.wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    JsonObject,
    RequestId,
    RpcError,
    WireMessage,
    decode_line,
    encode_line,
    log,
)

TYPE_CHECKING = False  # no typing at run time (wire.py says why)
if TYPE_CHECKING:
    from typing import Any, BinaryIO

Handler = Callable[[RequestId, JsonObject], "JsonObject | None"]

#: What :meth:`Inbox.get` returns when no line came within its timeout (a line it returns
#: is never empty: it ends with its newline, or is the input's last, unended bytes).
NOTHING = b""


class Inbox:
    """The client's lines, one at a time, each read when the agent asks for it: a wait is a
    ``select`` on stdin's descriptor, with no reader thread and no queue (their modules
    were about a tenth of the agent's start-up, paid by every case the suite plays). A
    stream without a descriptor ``select`` can watch (an in-memory one, a pipe on
    Windows) gets a reader thread that feeds a queue, as before."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lines: deque[bytes | None] = deque()  # None: the end of the input
        self._partial = b""
        self._fd: int | None = None
        self._queue: Any = None
        try:
            fd = stream.fileno()
            select.select([fd], [], [], 0)
            self._fd = fd
        except (AttributeError, OSError, ValueError):  # no descriptor select can watch
            import queue
            import threading

            self._queue = queue.Queue()
            threading.Thread(target=self._read_all, name="stdin-reader", daemon=True).start()

    def get(self, timeout: float | None = None) -> bytes | None:
        """The next line (with its newline, if it had one), None at the end of the input,
        or :data:`NOTHING` when none came within ``timeout`` seconds (None: wait for one)."""
        if self._lines:
            return self._lines.popleft()
        if self._queue is not None:
            import queue

            try:
                line: bytes | None = self._queue.get(timeout=timeout) if timeout != 0 \
                    else self._queue.get_nowait()
            except queue.Empty:
                return NOTHING
            return line
        assert self._fd is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._lines:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._fd], [], [], left)[0]:
                return NOTHING
            data = os.read(self._fd, 1 << 16)
            if not data:  # the end: a last line without its newline still counts
                if self._partial:
                    self._lines.append(self._partial)
                    self._partial = b""
                self._lines.append(None)
                break
            *whole, self._partial = (self._partial + data).split(b"\n")
            self._lines.extend(line + b"\n" for line in whole)
        return self._lines.popleft()

    def _read_all(self) -> None:
        """Reader thread, for a stream :meth:`get` cannot watch: every line, then None."""
        try:
            for line in self._stream:
                self._queue.put(line)
        finally:
            self._queue.put(None)


class _Batch:
    """A batch line whose responses are held until each of its requests is answered,
    then written as one array (JSON-RPC 2.0 section 6). ``expected`` counts the IDs its
    responses will carry (None: an entry too malformed to name one); ``open`` while its
    entries are still being taken."""

    __slots__ = ("expected", "replies", "open")

    def __init__(self, expected: Counter[Any]) -> None:
        self.expected = expected
        self.replies: list[JsonObject] = []
        self.open = True

    def takes(self, response_id: Any) -> bool:
        key = _id_key(response_id)
        if self.expected[key] > 0:
            self.expected[key] -= 1
            return True
        return False

    @property
    def done(self) -> bool:
        return not self.open and not +self.expected


def _id_key(request_id: Any) -> Any:
    """A hashable key for a JSON-RPC ID (1 and True, 1 and 1.0 kept apart)."""
    return (type(request_id).__name__, request_id if isinstance(request_id, (int, str)) else None)


def _batch_reply_id(entry: Any) -> tuple[bool, Any]:
    """Whether a batch entry gets a response, and the ID that response carries (as
    :meth:`Connection.receive` and :meth:`Connection.dispatch_request` answer it)."""
    if not isinstance(entry, dict) or entry.get("jsonrpc") != "2.0":
        request_id = entry.get("id") if isinstance(entry, dict) else None
        ok = isinstance(request_id, (int, str)) and not isinstance(request_id, bool)
        return True, request_id if ok else None
    method = entry.get("method")
    if method is None:  # an answer to one of our requests gets none, a malformed one an error
        return not ("id" in entry and ("result" in entry or "error" in entry)), None
    if "id" not in entry:
        return False, None  # a notification
    request_id = entry.get("id")
    if isinstance(method, str) and (not isinstance(request_id, (int, str))
                                    or isinstance(request_id, bool)):
        return True, None  # dispatch_request answers a bad id with null
    return True, request_id


class Connection:
    """Serves one client over stdin/stdout. Subclasses say which requests they answer."""

    def __init__(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        self._stdin = stdin if stdin is not None else sys.stdin.buffer
        self._stdout = stdout if stdout is not None else sys.stdout.buffer
        self.turn: Turn | None = None  # the prompt being worked on, if any
        self.eof = False
        self._inbox: Inbox | None = None  # run() opens it
        self._backlog: deque[JsonObject] = deque()  # requests that arrived mid-turn
        self._next_request_id = 0
        self._awaiting: set[int] = set()  # our requests without an answer yet
        self._answers: dict[int, JsonObject] = {}
        self._abandoned: set[int] = set()
        self._batches: list[_Batch] = []  # batch lines not yet answered, oldest first

    def request_handlers(self) -> dict[str, Handler]:
        """Methods this agent answers. A handler returns the result to send,
        or None when it has answered the request itself."""
        return {}

    # ---- main loop -------------------------------------------------------

    def run(self) -> int:
        """Serve until stdin closes. Returns the process exit status."""
        inbox = self._inbox = Inbox(self._stdin)
        try:
            while True:
                if self._backlog:
                    self.dispatch_request(self._backlog.popleft())
                    continue
                if self.eof:
                    return 0
                line = inbox.get(None)
                if line is None:
                    self.eof = True
                    continue
                self.receive_line(line)
        except BrokenPipeError:
            log.info("client closed our stdout")
            return 0

    def receive_line(self, raw: bytes) -> None:
        text = raw.rstrip(b"\r\n")
        if not text.strip():
            return
        try:
            message = decode_line(text)
        except (UnicodeDecodeError, ValueError) as exc:
            self.respond_error(None, PARSE_ERROR, "Parse error", str(exc))
            return
        if isinstance(message, list):  # a JSON-RPC batch: entries in order, one array back
            if not message:  # a single error, not an array (JSON-RPC 2.0 section 6)
                self.respond_error(None, INVALID_REQUEST, "Invalid request: empty batch")
                return
            replies = [_batch_reply_id(entry) for entry in message]
            batch = _Batch(Counter(_id_key(i) for answered, i in replies if answered))
            self._batches.append(batch)
            try:
                for entry in message:
                    self.receive(entry)
            finally:
                batch.open = False
                self._flush_batches()
        else:
            self.receive(message)

    def receive(self, message: Any) -> None:
        """Route one incoming message: answers to our requests, notifications
        (handled at once, even mid-turn) and requests (queued while a turn
        runs, so turns never nest)."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            request_id = message.get("id") if isinstance(message, dict) else None
            if not isinstance(request_id, (int, str)) or isinstance(request_id, bool):
                request_id = None
            self.respond_error(request_id, INVALID_REQUEST, "Invalid request")
            return
        method = message.get("method")
        if method is None:
            if "id" in message and ("result" in message or "error" in message):
                self.on_answer(message)
            else:
                self.respond_error(None, INVALID_REQUEST, "Invalid request")
        elif not isinstance(method, str):
            self.respond_error(message.get("id"), INVALID_REQUEST, "Invalid request")
        elif "id" not in message:
            self.on_notification(method, message.get("params"))
        elif self.turn is not None and self.answers_mid_turn(method, message.get("params")):
            self.dispatch_request(message)
        elif self.turn is not None:
            if method == "session/close" and self._names_turn_session(message.get("params")):
                self.turn.cancelled = True  # close cancels the work, as session/cancel
            self._backlog.append(message)
        else:
            self.dispatch_request(message)

    def answers_mid_turn(self, method: str, params: Any) -> bool:
        """Whether a request that arrives while a turn runs is handled at once, between two
        of the turn's updates, rather than after the turn. None is, here."""
        return False

    def on_answer(self, message: JsonObject) -> None:
        request_id = message["id"]
        if not isinstance(request_id, int):
            log.warning("answer with an id we never use: %r", request_id)
        elif request_id in self._awaiting:
            self._awaiting.discard(request_id)
            self._answers[request_id] = message
        elif request_id in self._abandoned:
            self._abandoned.discard(request_id)  # a late answer to an abandoned request
        else:
            log.warning("answer to a request we never sent: %r", request_id)

    def on_notification(self, method: str, params: Any) -> None:
        if method == "session/cancel":
            if self._names_turn_session(params):
                assert self.turn is not None
                self.turn.cancelled = True
        elif method == "$/cancel_request":
            # The client gave up on its session/prompt: end the turn as cancelled.
            if (
                self.turn is not None
                and isinstance(params, dict)
                and params.get("requestId") == self.turn.request_id
            ):
                self.turn.cancelled = True
        else:
            log.info("ignoring notification %s", method)

    def _names_turn_session(self, params: Any) -> bool:
        return (
            self.turn is not None
            and isinstance(params, dict)
            and params.get("sessionId") == self.turn.session.session_id
        )

    def pump(self, timeout: float | None = 0.0) -> None:
        """While a turn runs: handle the input that is already there, waiting
        up to ``timeout`` seconds (None: until something arrives) for the
        first line. Returns early once the turn is cancelled."""
        wait: float | None = timeout
        while not self.eof and not (self.turn is not None and self.turn.cancelled):
            assert self._inbox is not None, "pump() runs inside run()"
            line = self._inbox.get(wait)
            if line == NOTHING:
                return
            wait = 0.0  # after the first line, only drain what is already there
            if line is None:
                self.eof = True
                if self.turn is not None:
                    self.turn.cancelled = True  # the client is gone
                return
            self.receive_line(line)

    # ---- the wire --------------------------------------------------------

    def send(self, message: WireMessage) -> None:
        """The single place that serialises a message: one compact JSON line. A response
        to a request of a batch line waits for the rest of that batch's responses."""
        if self._batches and isinstance(message, dict) and "method" not in message:
            batch = next((b for b in self._batches if b.takes(message.get("id"))), None)
            if batch is not None:
                batch.replies.append(message)
                self._flush_batches()
                return
        self.write_line(encode_line(message))

    def _flush_batches(self) -> None:
        """Write each batch whose requests are all answered as one array (a batch of
        notifications alone writes nothing)."""
        for batch in [b for b in self._batches if b.done]:
            self._batches.remove(batch)
            if batch.replies:
                self.write_line(encode_line(batch.replies))

    def write_line(self, data: bytes) -> None:
        """Write raw bytes to stdout and flush (nothing else writes there)."""
        self._stdout.write(data)
        self._stdout.flush()

    def respond(self, request_id: RequestId, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def respond_error(
        self, request_id: RequestId, code: int, message: str, data: Any = None
    ) -> None:
        error: JsonObject = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self.send({"jsonrpc": "2.0", "id": request_id, "error": error})

    def notify(self, method: str, params: JsonObject) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def send_update(self, session: Session, update: JsonObject) -> None:
        self.notify("session/update", {"sessionId": session.session_id, "update": update})

    def request(self, method: str, params: JsonObject) -> int:
        """Send a request to the client; wait for it with :meth:`wait_for_answer`."""
        self._next_request_id += 1
        request_id = self._next_request_id
        self._awaiting.add(request_id)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def wait_for_answer(self, request_id: int) -> JsonObject | None:
        """Block until the client answers, or return None if the turn is
        cancelled first (the request is then abandoned with
        ``$/cancel_request`` and a late answer is dropped)."""
        while request_id not in self._answers:
            if self.eof or (self.turn is not None and self.turn.cancelled):
                self._awaiting.discard(request_id)
                self._abandoned.add(request_id)
                if not self.eof:
                    self.notify("$/cancel_request", {"requestId": request_id})
                return None
            self.pump(timeout=None)
        return self._answers.pop(request_id)

    # ---- request dispatch ------------------------------------------------

    def dispatch_request(self, message: JsonObject) -> None:
        request_id = message.get("id")
        if not isinstance(request_id, (int, str)) or isinstance(request_id, bool):
            self.respond_error(None, INVALID_REQUEST, "Invalid request: bad id")
            return
        handler = self.request_handlers().get(message["method"])
        if handler is None:
            self.respond_error(request_id, METHOD_NOT_FOUND, "Method not found")
            return
        params = message.get("params", {})
        try:
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "Invalid params: expected an object")
            result = handler(request_id, params)
        except RpcError as exc:
            self.respond_error(request_id, exc.code, exc.message, exc.data)
        except BrokenPipeError:
            raise
        except Exception as exc:  # noqa: BLE001 - our own bug: say so (log.exception), keep serving
            log.exception("internal error in %s", message["method"])
            self.respond_error(request_id, INTERNAL_ERROR, "Internal error", str(exc))
        else:
            if result is not None:
                self.respond(request_id, result)
