"""The in-process adapter API: test a library client without a process or a pty.

A vendor writes a factory (``--client-adapter mypkg.testing:make_client``, or
``--client-adapter path/to/file.py:make_client``)
that returns a fresh object with these five methods; the suite calls the
factory once per client start::

    class MyAdapter:
        def start(self, send):        # connect; the client sends initialize (and later
                                      #   session/new...) by calling send(message)
        def receive(self, message):   # one agent->client JSON-RPC message (a dict, or a
                                      #   list for a v2 batch); the client may call send()
        def prompt(self, text):       # the user submits text: the client sends session/prompt
        def messages(self):           # what the client shows now, in display order:
                                      #   [{"role": "user"|"agent"|"thought", "text": str,
                                      #     "meta": {...} (optional: the message's _meta)}]
        def close(self):              # the suite is done with this client
        def load(self, session_id):   # optional: reload that session (the client sends v1
                                      #   session/load or v2 session/resume with replayFrom);
                                      #   without it MID-C-07 is not testable
        def disconnected(self):       # optional: the agent ended the connection (in the
                                      #   middle of a replay); the client's next send() goes
                                      #   to a fresh agent, so a later load() starts with
                                      #   initialize; without it MID-V2-14 is not testable

``send`` may be called at any time from inside these methods. The suite plays
the agent with the same engine as the agent double process
(:class:`conformance.client.double_engine.DoubleEngine`); every message goes through
JSON text both ways, and is recorded in the case transcript exactly as on a
pipe. A request the client has not answered by the time it goes quiet gets the
probe's timeout. An exception from the adapter is a crash (MID-C-08/exit); a
call that does not return within ``--timeout`` is a hang (MID-C-08/hang).
The reference client implements it: ``conformance.client.reference:make_client``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from conformance.client.double_engine import DoubleEngine, DoubleTally, encode_line
from conformance.client.lanes import Abandoned, Hung, Worker
from conformance.client.pty import ClientAborted
from conformance.client.script import TurnScript
from conformance.timers import record as record_timer
from conformance.transcript import Transcript

JsonObject = dict[str, Any]
MAX_MESSAGES = 100_000  # per pump: more means the client and agent loop forever


@runtime_checkable
class ClientAdapter(Protocol):
    """What an in-process client offers the suite."""

    def start(self, send: Callable[[JsonObject], None]) -> None: ...

    def receive(self, message: Any) -> None: ...

    def prompt(self, text: str) -> None: ...

    def messages(self) -> Sequence[Mapping[str, Any]]: ...

    def close(self) -> None: ...


class AdapterError(Exception):
    """The adapter spec cannot be loaded (bad MODULE:FACTORY): a usage error."""


def load_factory(spec: str) -> Callable[[], ClientAdapter]:
    module, _, name = spec.rpartition(":")
    if not module or not name:
        raise AdapterError(f"--client-adapter {spec!r}: expected MODULE:FACTORY "
                           "(or path/to/file.py:FACTORY)")
    try:
        if module.endswith(".py"):
            if not os.path.isfile(module):
                raise AdapterError(f"--client-adapter {spec!r}: no such file {module}")
            loaded = importlib.util.spec_from_file_location(
                "acp_conformance_adapter_" + os.path.basename(module)[:-3], module)
            assert loaded is not None and loaded.loader is not None
            mod = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(mod)
        else:
            mod = importlib.import_module(module)
    except AdapterError:
        raise
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's input
        raise AdapterError(f"--client-adapter {spec!r}: cannot import {module}: "
                           f"{type(exc).__name__}: {exc}") from None
    factory = getattr(mod, name, None)
    if not callable(factory):
        raise AdapterError(f"--client-adapter {spec!r}: {module} has no callable {name!r}")
    return factory  # type: ignore[no-any-return]


class AdapterClient(DoubleTally):
    """Drives one in-process client through the double's engine (same interface as PtyClient)."""

    def __init__(self, factory: Callable[[], ClientAdapter], *, transcript: Transcript,
                 protocol: int, timeout: float, response_message_id: bool,
                 next_turn: Callable[[int], TurnScript | None]) -> None:
        super().__init__()
        self.factory = factory
        self.transcript = transcript
        self.protocol = protocol
        self.timeout = timeout
        self.response_message_id = response_message_id
        self.replay_marker = False  # the profile's (set by the runner, like load_session)
        self.next_turn = next_turn
        self.conn = -1
        self.adapter: ClientAdapter | None = None
        self.engine: DoubleEngine | None = None
        self.outbox: deque[Any] = deque()
        self.observed: str | None = None  # the turn whose observation is recorded
        self.load_session = False  # the double advertises loadSession (reload cases)
        self.worker = Worker(timeout)

    # -- running adapter code with a time limit -------------------------------------------
    def _run(self, step: Callable[[], Any]) -> Any:
        """Run one step (a start, a turn, a close) on the adapter's thread; a hang in one
        of its adapter calls is recorded here and ends the step."""
        try:
            return self.worker.run(step)
        except Hung as hung:
            self._event("timeout", {"timeout": self.timeout, "waiting_for": hung.what})
            record_timer(self.transcript.header, "silence timeout", self.timeout, "--timeout",
                         f"waiting for {hung.what} to return", len(self.transcript.entries) - 1)
            raise ClientAborted(f"the adapter did not return from {hung.what}",
                                f"did not return from {hung.what}") from None

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """One call into adapter code (on the adapter's thread): an exception is a crash."""
        try:
            return self.worker.guarded(what, fn)
        except Abandoned:
            raise
        except BaseException as exc:  # noqa: BLE001 - a crash of the client under test
            self._event("early-exit", {"waiting_for": what, "returncode": None,
                                       "exception": f"{type(exc).__name__}: {exc}",
                                       "output_tail": traceback.format_exc(limit=8)[-2000:]})
            raise ClientAborted(f"the adapter raised {type(exc).__name__} in {what}",
                                f"raised {type(exc).__name__} in {what}") from None

    def _event(self, event: str, data: JsonObject) -> None:
        data.setdefault("output_tail", "")
        self.transcript.add(max(self.conn, 0), "harness", "harness", event=event, data=data)

    # -- the connection -------------------------------------------------------------------
    def start(self) -> None:
        self._connect()
        self._run(self._start)

    def _connect(self) -> None:
        """A fresh agent: a new connection and a new engine (the adapter itself stays)."""
        self.conn += 1
        self.outbox.clear()
        self.engine = DoubleEngine(protocol=self.protocol,
                                   next_turn=lambda: self.next_turn(self.conn),
                                   response_message_id=self.response_message_id,
                                   load_session=self.load_session)
        self.engine.replay_marker = self.replay_marker
        self.transcript.add(self.conn, "harness", "harness", event="start",
                            data={"pid_role": "client", "adapter": True})

    def _start(self) -> None:
        adapter = self._call("the adapter factory", self.factory)
        if not all(callable(getattr(adapter, m, None))
                   for m in ("start", "receive", "prompt", "messages", "close")):
            raise AdapterError("the --client-adapter factory returned an object without "
                               "start, receive, prompt, messages and close methods")
        self.adapter = adapter
        self._call("start()", lambda: adapter.start(self.outbox.append))
        self._pump("the client to open a session")
        if self.sessions == 0:
            self._event("timeout", {"timeout": 0, "waiting_for":
                                    "the client to open a session (it went quiet without one)"})
            raise ClientAborted("the client opened no session", "opened no session")

    def _pump(self, what: str) -> None:
        assert self.engine is not None and self.adapter is not None
        engine, adapter = self.engine, self.adapter
        count = 0
        while True:
            while self.outbox:
                count += 1
                msg = self.outbox.popleft()
                try:
                    raw = encode_line(msg)[:-1]
                except (TypeError, ValueError) as exc:
                    raw = repr(msg).encode("utf-8", "replace")
                    self.transcript.add(self.conn, "harness", "harness", event="note",
                                        data={"note": f"the client sent a non-JSON value: {exc}"})
                self.transcript.add(self.conn, "client", "stdin", raw)
                try:
                    engine.feed(json.loads(raw))
                except ValueError:
                    pass
                self._deliver(engine, adapter, what)
                if count > MAX_MESSAGES:
                    self._event("flood", {"limit": MAX_MESSAGES, "waiting_for": what})
                    raise ClientAborted("the client and the agent double exchanged too much",
                                        "flooded the agent double")
            if engine.waiting_for is None:
                return
            engine.timed_out()  # the client went quiet without answering
            self._deliver(engine, adapter, what)

    def _deliver(self, engine: DoubleEngine, adapter: ClientAdapter, what: str) -> None:
        """Hand what the double's engine produced to the client, recording each line."""
        for kind, item in engine.take():
            if kind == "event":
                self._report(item)
                continue
            line = encode_line(item)[:-1]
            self.transcript.add(self.conn, "agent", "stdout", line)
            self._call(f"receive() while waiting for {what}",
                       functools.partial(adapter.receive, json.loads(line)))

    def _report(self, ev: JsonObject) -> None:
        name, data = ev["event"], ev.get("data") or {}
        if name == "wait-timeout":
            self.transcript.add(self.conn, "harness", "harness", event="timeout",
                                data={"timeout": 0, **data, "output_tail":
                                      "the client went quiet without answering"})
            self.count(name, data)
            return
        self.transcript.add(self.conn, "harness", "harness", event="note",
                            data={"note": name, **data})
        self.count(name, data)

    def play(self, turn: TurnScript) -> None:
        self.observed = None
        try:
            self._run(functools.partial(self._play, turn))
        except ClientAborted as exc:
            if self.observed != turn.name:  # what the client showed: nothing, it is gone
                self._observe(turn, exited=str(exc))
            raise

    def _play(self, turn: TurnScript) -> None:
        assert self.adapter is not None
        adapter = self.adapter
        target = self.turns_ended + 1
        self._call(f"prompt() for turn {turn.name}", lambda: adapter.prompt(turn.prompt))
        self._pump(f"turn {turn.name}")
        if self.turns_ended < target:
            self._observe(turn, exited="the client sent no session/prompt")
            self._event("timeout", {"timeout": 0, "waiting_for": f"a session/prompt for turn "
                                    f"{turn.name} (the client went quiet without one)"})
            raise ClientAborted("the client sent no prompt", "sent no prompt")
        self._observe(turn)

    def can_reload(self) -> bool:
        return callable(getattr(self.adapter, "load", None))

    def can_reconnect(self) -> bool:
        """Whether the client can be told that its agent hung up (MID-V2-14/truncated)."""
        return self.can_reload() and callable(getattr(self.adapter, "disconnected", None))

    def reload(self, turn: TurnScript) -> None:
        """MID-C-07: the adapter's optional load(session_id); then what it shows."""
        self.observed = None
        try:
            self._run(functools.partial(self._reload, turn))
        except ClientAborted as exc:
            if self.observed != turn.name:
                self._observe(turn, exited=str(exc))
            raise

    def _reload(self, turn: TurnScript) -> None:
        adapter = self.adapter
        session = self.session_id or "sess-1"
        if self.engine is not None and self.engine.hung_up:
            self._connect()  # the client resumes with a fresh agent
        self._call(f"load({session!r})", lambda: adapter.load(session))  # type: ignore[union-attr]
        self._pump(f"the reload of session {session}")
        if self.engine is not None and self.engine.hung_up:
            self.transcript.add(self.conn, "harness", "harness", event="exit",
                                data={"pid_role": "agent-double",
                                      "reason": "the double hung up in the middle of a replay"})
            self._call("disconnected()", adapter.disconnected)  # type: ignore[union-attr]
        self._observe(turn)

    def _observe(self, turn: TurnScript, *, exited: str | None = None) -> None:
        data: JsonObject = {**turn.observed_fields(), "protocol": self.protocol,
                            "source": "adapter",
                            "render": "cumulative", "kinds": ["user", "agent", "thought"]}
        if exited:
            data.update(exited=True, why=exited, shown=[])
        else:
            adapter = self.adapter
            assert adapter is not None
            shown = self._call("messages()", adapter.messages)
            data["shown"] = [_shown(m) for m in shown or []]
        self.transcript.add(self.conn, "harness", "harness", event="observed", data=data)
        self.observed = turn.name

    def alive(self) -> bool:
        return self.adapter is not None

    def stop(self) -> None:
        adapter, self.adapter = self.adapter, None
        if adapter is not None:
            try:
                self._run(lambda: self._call("close()", adapter.close))
            except ClientAborted:
                pass
            self.transcript.add(self.conn, "harness", "harness", event="exit",
                                data={"pid_role": "client", "adapter": True})
        self.worker.end()


def _shown(m: Any) -> JsonObject:
    get = m.get if isinstance(m, Mapping) else (lambda k, d=None: getattr(m, k, d))
    d: JsonObject = {"role": str(get("role", "")), "text": str(get("text", ""))}
    if isinstance(m, Mapping) and "meta" in m:
        d["meta"] = m["meta"]
    return d
