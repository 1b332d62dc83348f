"""The scripted model server: a loopback HTTP server that real agents call instead of
their model provider.

It listens on 127.0.0.1 only, on a free port, and answers OpenAI Chat
Completions, OpenAI Responses, Anthropic Messages and Gemini
``streamGenerateContent`` requests with what the active :class:`ModelScript`
says, streamed as each API streams. It records every request it served (what
the agent asked, what the model said, with the upstream IDs), so a finding can
be read next to the model output that produced it.

Streaming responses use HTTP/1.1 chunked encoding; an agent that hangs up in
the middle (a cancelled turn) ends that response quietly and is logged.
This module decides what to answer and keeps the log; ``handler`` speaks HTTP.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing.Self is 3.11+; only the type checker reads it here
    from typing_extensions import Self

from conformance.masking import NO_MASK, Masker
from conformance.modelserver.apis.base import (
    HARMLESS_TOOLS,
    Item,
    Plan,
    Request,
    Shape,
    fit_arguments,
    split_deltas,
)
from conformance.modelserver.handler import Handler, Server
from conformance.modelserver.script import ModelScript, default_script

DUMMY_KEY = "acp-conformance-dummy-key"
MAX_LOG = 2000  # requests kept per case; a looping agent cannot grow memory without bound


class _Route:
    """What one case sees of the server: its script, its request log and its own counters
    (so the IDs the model says do not depend on what other cases asked meanwhile)."""

    def __init__(self, script: ModelScript, label: str) -> None:
        self.script = script
        self.label = label
        self.log: list[dict[str, Any]] = []
        self.dropped = 0
        self.counter = itertools.count(1)
        self.requests = itertools.count(1)


ROUTE_PREFIX = "/case/"  # http://127.0.0.1:PORT/case/NAME/...: requests of one case


class ModelServer:
    """Run with ``with ModelServer() as server:``; ``server.url`` is ``http://127.0.0.1:PORT``.

    Requests under ``route_url(name)`` have a script and a log of their own, so
    cases that run at the same time each see their own model; everything else
    goes to the default route (``use``, ``take_log``).
    """

    def __init__(self, script: ModelScript | None = None, *, masker: Masker | None = None) -> None:
        self.masker = masker or NO_MASK  # the request log leaves the server masked (take_log)
        self._default = _Route(script or default_script(), "")
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._streaming = 0  # responses being streamed right now
        self.faults: list[str] = []  # errors of the server's own (one line each, also printed)
        # Whether a scripted tool call was played, and what the agent declared when one was
        # left out for want of a harmless tool (see tool_notice).
        self.tool_played = False
        self.no_tool: list[str] | None = None
        # client port -> route name, for requests that name no route in their path
        self.resolver: Callable[[int], str | None] | None = None
        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.model = self
        self._thread: threading.Thread | None = None

    # -- life ------------------------------------------------------------
    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="model-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- per case --------------------------------------------------------
    def use(self, script: ModelScript | None, label: str = "") -> None:
        """Answer later requests with ``script`` (None: the default); tag the log with ``label``."""
        with self._lock:
            self._default.script = script or default_script()
            self._default.label = label

    @property
    def script(self) -> ModelScript:
        return self._default.script

    def take_log(self, route: str = "") -> list[dict[str, Any]]:
        """The requests served since the last call (on ``route``, which then ends: later
        requests to it are answered from the default route), oldest first."""
        with self._lock:
            r = self._routes.pop(route, None) if route else self._default
            if r is None:
                return []
            log, r.log = r.log, []
            if r.dropped:
                log.append({"dropped": r.dropped})
                r.dropped = 0
        return self.masker.data(log)  # type: ignore[no-any-return]  # a list stays a list

    def route_url(self, route: str, script: ModelScript | None, label: str = "") -> str:
        """A base URL whose requests ``script`` answers and whose log ``take_log(route)``
        returns; ``route`` is a name without ``/`` (the case's)."""
        with self._lock:
            self._routes[route] = _Route(script or default_script(), label)
        return f"{self.url}{ROUTE_PREFIX}{route}"

    def _route(self, path: str, client_port: int,
               known: _Route | None = None) -> tuple[_Route, str]:
        """The route of a request, and its path without the route's prefix: by the path's
        prefix, else by who holds the connection (``resolver``, for an agent that reads the
        server's plain URL from a config file), else the default route."""
        if path.startswith(ROUTE_PREFIX):
            name, _, rest = path[len(ROUTE_PREFIX):].partition("/")
            with self._lock:
                found = self._routes.get(name)
            if found is not None:
                return found, "/" + rest
        if known is not None:  # the connection's earlier request settled it
            return known, path
        owner = self.resolver(client_port) if self.resolver is not None else None
        with self._lock:
            found = self._routes.get(owner) if owner else None
        return found or self._default, path

    def fault(self, what: str) -> None:
        """An error of the server itself (not of a client's connection): one line."""
        line = self.masker.text(f"acp-conformance: model server: {what}")
        with self._lock:
            self.faults.append(line)
        print(line, file=sys.stderr, flush=True)

    def tool_notice(self) -> str | None:
        """The one line a run says when the agent never got a scripted tool call because it
        declared no tool the server calls harmlessly (None: a tool call was played, or
        none was left out)."""
        if self.tool_played or self.no_tool is None:
            return None
        names = ", ".join(self.no_tool[:12]) or "none"
        return self.masker.text(
            "acp-conformance: model server: the agent declared no tool the model can call "
            f"harmlessly (declared: {names}; known: "
            f"{', '.join(n for n, _ in HARMLESS_TOOLS)}), so its turns had no tool call and "
            "the text-tool-text turn of MID-A-02 and MID-A-03 was not played")

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no response is being streamed; False if one still is after ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: self._streaming == 0, timeout)

    def _stream_started(self) -> None:
        with self._idle:
            self._streaming += 1

    def _stream_ended(self) -> None:
        with self._idle:
            self._streaming -= 1
            self._idle.notify_all()

    def env(self) -> dict[str, str]:
        """The variables that point the usual SDKs at this server, with dummy keys."""
        return target_env(self.url)

    # -- serving -----------------------------------------------------------
    def _next_id(self, kind: str, shape: Shape, route: _Route) -> str:
        prefix = shape.id_prefix[kind]
        if route.script.ids == "repeat" and kind not in ("tool", "call"):
            return f"{prefix}_repeat"
        return f"{prefix}_{next(route.counter):04d}"

    def plan(self, shape: Shape, req: Request, number: int,
             route: _Route | None = None) -> tuple[Plan, dict[str, Any]]:
        """Decide what the model says to ``req``; returns the plan and its log notes."""
        route = route or self._default
        with self._lock:
            script = route.script
            response_id = self._next_id("response", shape, route)
        notes: dict[str, Any] = {}
        reply = script.reply_for(req.round, req.last_user, req.turn)
        if reply.id is not None:  # the script names its IDs (fuzzed model scripts do)
            response_id = reply.id
        if req.wants_json:  # a structured side request (titles, routing): answer it plainly
            reply = reply.without_tools()
        items: list[Item] = []
        values = {"turn": req.turn, "request": number}
        for part in reply.parts:
            item_id = response_id
            if part.id is not None and (shape.per_item_ids or part.kind == "tool"):
                item_id = part.id
            elif shape.per_item_ids or part.kind == "tool":
                with self._lock:
                    item_id = self._next_id(part.kind, shape, route)
            if part.kind == "tool":
                chosen = choose_tool(req.tools, part.choose, part.arguments)
                if chosen is None:
                    notes["tool_skipped"] = "the agent declared no harmless tool"
                    with self._lock:
                        if self.no_tool is None:
                            self.no_tool = sorted(req.tools)
                    continue
                self.tool_played = True
                name, args = chosen
                call_id = item_id
                if shape.per_item_ids:
                    with self._lock:
                        call_id = self._next_id("call", shape, route)
                items.append(Item("tool", item_id, name=name, call_id=call_id, arguments=args))
                continue
            text = _fill(part.text, values)
            if req.wants_json:
                text = json.dumps({"title": text[:40], "next_speaker": "user",
                                   "reasoning": text})
                part_deltas = [text]
            else:
                part_deltas = split_deltas(text, part.chunks)
            items.append(Item(part.kind, item_id, text=text, deltas=part_deltas))
        if req.wants_json:
            items = [i for i in items if i.kind == "text"][:1] or [
                Item("text", response_id, text="{}", deltas=["{}"])]
        notes["script"] = script.name
        return Plan(response_id, items, reply.pace), notes

    def record(self, entry: dict[str, Any], route: _Route | None = None) -> None:
        route = route or self._default
        with self._lock:
            if len(route.log) >= MAX_LOG:
                route.dropped += 1
                return
            if route.label:
                entry["case"] = route.label
            route.log.append(entry)

    def next_request_number(self, route: _Route | None = None) -> int:
        with self._lock:
            return next((route or self._default).requests)


def target_env(url: str) -> dict[str, str]:
    """Environment that points the OpenAI, Anthropic and Gemini SDKs at ``url``."""
    return {
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_API_BASE": f"{url}/v1",
        "OPENAI_API_KEY": DUMMY_KEY,
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_API_KEY": DUMMY_KEY,
        "GOOGLE_API_KEY": DUMMY_KEY,
        "ACP_CONFORMANCE_MODEL_URL": url,
    }


def choose_tool(declared: dict[str, Any], prefer: tuple[str, ...],
                arguments: Any) -> tuple[str, dict[str, Any]] | None:
    """One harmless tool the agent declared, with arguments that fit its schema."""
    table = dict(HARMLESS_TOOLS)
    names = list(prefer) if prefer else [n for n, _ in HARMLESS_TOOLS]
    for name in names:
        if name in declared:
            args = dict(arguments) if arguments is not None else table.get(name, {})
            return name, fit_arguments(args, declared[name])
    return None


def _fill(text: str, values: dict[str, Any]) -> str:
    out = text
    for k, v in values.items():
        out = out.replace("{" + k + "}", str(v))
    return out
