"""The model server's HTTP side: one handler per connection reads a request, finds its
API shape and case route, and writes the scripted answer (JSON, or SSE with chunked
encoding). What to answer is the :class:`~conformance.modelserver.server.ModelServer`'s
business; a client that resets or drops its connection is recorded, never printed."""

from __future__ import annotations

import gzip
import json
import sys
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from conformance.modelserver.apis import shape_for
from conformance.modelserver.apis.base import Plan, Request, Shape

MAX_BODY = 64 * 1024 * 1024
TEXT_CAP = 300  # characters of a prompt kept in the request log


class Model(Protocol):
    """What the handler asks of the :class:`~conformance.modelserver.server.ModelServer`
    (a route is the server's own per-case record, passed back as it came)."""

    def _route(self, path: str, client_port: int, known: Any = None) -> tuple[Any, str]: ...

    def next_request_number(self, route: Any = None) -> int: ...

    def plan(self, shape: Shape, req: Request, number: int,
             route: Any = None) -> tuple[Plan, dict[str, Any]]: ...

    def record(self, entry: dict[str, Any], route: Any = None) -> None: ...

    def fault(self, what: str) -> None: ...

    def _stream_started(self) -> None: ...

    def _stream_ended(self) -> None: ...


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    model: Model

    def handle_error(self, request: Any, client_address: Any) -> None:
        """An exception out of a request's handling: never a traceback on the user's console.

        A client that resets or drops its connection is the client's business: it is
        recorded in the request log (the transcript header's ``model_requests``). Any
        other exception is a fault of the server: one line on stderr, and recorded.
        """
        exc = sys.exc_info()[1]
        what = f"{type(exc).__name__}: {exc}"[:300]
        port = client_address[1] if isinstance(client_address, tuple) else None
        self.model.record({"connection_error": what, "client_port": port})
        if not isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            self.model.fault(f"internal error while handling a request ({what})")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server
    route: Any = None  # of the last request on this connection
    timeout = 60  # an idle keep-alive connection is closed after this

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log replaces the access log

    def handle(self) -> None:
        """Serve the connection; a client that resets or drops it is recorded in the log of
        the route it last used (so in its case's ``model_requests``), never printed."""
        try:
            super().handle()
        except (ConnectionError, TimeoutError) as exc:
            self.close_connection = True
            route = getattr(self, "route", None)
            self.server.model.record({"connection_error": f"{type(exc).__name__}: {exc}"[:300],
                                      "client_port": self.client_address[1]}, route)

    # -- plumbing ------------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
                if len(data) > MAX_BODY:
                    raise ValueError("request body too large")
            raw = bytes(data)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise ValueError("request body too large")
            raw = self.rfile.read(length) if length else b""
        encoding = self.headers.get("Content-Encoding", "").lower()
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        elif encoding not in ("", "identity"):
            raise ValueError(f"unsupported Content-Encoding {encoding}")
        return raw

    def _send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, events: Iterator[bytes], pace: float) -> bool:
        """Stream SSE events with chunked encoding; False if the agent hung up."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for n, event in enumerate(events):
                if pace and n:
                    time.sleep(pace)  # pacing what the model says, not waiting on a test
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
            return False
        return True

    # -- verbs -----------------------------------------------------------------
    def do_GET(self) -> None:
        model = self.server.model
        route, path = model._route(self.path.split("?", 1)[0], self.client_address[1],
                                   self.route)
        self.route = route
        number = model.next_request_number(route)
        body: dict[str, Any]
        if path.endswith("/models"):
            body = {"object": "list", "data": [{"id": "scripted", "object": "model",
                                                 "owned_by": "acp-conformance"}],
                    "models": [{"name": "models/scripted",
                                "supportedGenerationMethods": ["generateContent"]}]}
            status = 200
        else:
            body = {"error": {"message": f"no such endpoint: GET {path}"}}
            status = 404
        model.record({"n": number, "method": "GET", "path": path, "status": status}, route)
        self._send_json(status, body)

    def do_POST(self) -> None:
        model = self.server.model
        route, path = model._route(self.path.split("?", 1)[0], self.client_address[1],
                                   self.route)
        self.route = route
        number = model.next_request_number(route)
        entry: dict[str, Any] = {"n": number, "method": "POST", "path": path}
        try:
            raw = self._body()
            body = json.loads(raw.decode("utf-8")) if raw else {}
            if not isinstance(body, dict):
                raise ValueError("request body is not a JSON object")  # noqa: TRY004 - a 400
        except (ValueError, OSError, zlib.error, UnicodeDecodeError) as exc:
            model.record({**entry, "status": 400, "error": str(exc)[:200]}, route)
            self._send_json(400, {"error": {"message": f"bad request: {exc}"}})
            return
        if path.endswith((":countTokens", "/count_tokens")):
            model.record({**entry, "status": 200, "api": "count-tokens"}, route)
            self._send_json(200, {"totalTokens": 10, "input_tokens": 10})
            return
        shape = shape_for(path)
        if shape is None:
            model.record({**entry, "status": 404}, route)
            self._send_json(404, {"error": {"message": f"no such endpoint: POST {path}"}})
            return
        req = shape.parse(path, body)
        plan, notes = model.plan(shape, req, number, route)
        entry.update({"api": shape.name, "model": req.model, "stream": req.stream,
                      "turn": req.turn, "round": req.round,
                      "last_user": req.last_user[:TEXT_CAP],
                      "tools": sorted(req.tools)[:50], **notes,
                      "response_id": plan.response_id,
                      "said": [i.summary() for i in plan.items]})
        if req.wants_json:
            entry["side_request"] = "structured output"
        entry["status"] = 200
        model.record(entry, route)  # now, so the log keeps request order; completion is filled in
        if req.stream:
            model._stream_started()
            try:
                entry["completed"] = self._send_stream(shape.events(plan, req), plan.pace)
            finally:
                model._stream_ended()
        else:
            entry["completed"] = True
            self._send_json(200, shape.complete(plan, req))
