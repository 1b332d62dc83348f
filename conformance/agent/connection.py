"""The JSON-RPC pump of the driver that plays the client: one connection to a live agent.

:class:`Connection` sends requests and notifications, answers every agent->client
request, and waits only on messages: each wait ends when the awaited message arrives,
or after ``timeout`` seconds with a ``timeout`` event in the transcript; the grace
window after a cancelled turn or a replay is a wait too. It honours the case's
:class:`~conformance.lifecycle.Cutoff` while it waits. It never grades anything.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from conformance import model
from conformance.agent.faults import DriveAborted, DriveCut, DriveTimeout, _RpcError
from conformance.lifecycle import Cutoff
from conformance.timers import record as record_timer
from conformance.transcript import Entry, Transcript
from conformance.transport import TargetExited, TargetProcess, TargetTimeout

TURN_TIMEOUT_FACTOR = 6  # default --turn-timeout: this many times --timeout


# Seconds of silence that close a cancelled turn or a replay (catalogue MID-A-09's
# grace window), so late updates are attributed to what they trail.
GRACE = 0.25


CUT_POLL = 0.25  # seconds between looks at the case's Cutoff while a wait lasts


class Connection:
    """One connection at a time to the agent over a TargetProcess: the JSON-RPC pump."""

    def __init__(self, argv: Sequence[str], transcript: Transcript, *, protocol: int,
                 timeout: float, cwd: str, env: Mapping[str, str] | None = None,
                 turn_timeout: float | None = None, cutoff: Cutoff | None = None,
                 grace: float | None = None) -> None:
        self.argv = list(argv)
        self.grace = grace if grace else GRACE  # MID-A-09's grace window (--grace)
        self.transcript = transcript
        self.protocol = protocol
        self.timeout = timeout  # longest silence in a wait
        # Longest wait overall, even while lines keep coming (a stream that never ends).
        self.turn_timeout = turn_timeout if turn_timeout else TURN_TIMEOUT_FACTOR * timeout
        self.cwd = cwd
        self.env = dict(env or {})
        self.proc: TargetProcess | None = None
        self.exit_seen = False  # this connection's early exit is recorded (see _exited)
        self.conn = -1
        self.ids = itertools.count(0)
        self.session: str | None = None
        self.cancelled: set[str] = set()
        self.responses: dict[Any, Entry] = {}
        self.cutoff = cutoff or Cutoff()
        self.unmatched = 0  # responses under an id the driver never sent
        self.last_rid = -1
        self.v2_update: str | None = None  # the first v2-only update of a v1 connection

    # -- process ---------------------------------------------------------
    def stop(self, grace: float | None = None) -> None:
        if self.proc is not None:
            if self.proc.exit_info is None and not self.exit_seen and (
                    self.proc.stdout_closed.is_set() or self.proc.exited.is_set()):
                self._exited("the next step (the suite had not closed its stdin)")  # on its own
            self.proc.close(grace)
            self.proc = None

    # -- the current session ----------------------------------------------
    def _sid(self) -> str:
        if self.session is None:
            raise DriveAborted("no session (the case lacks a new_session step)")
        return self.session

    # -- JSON-RPC ----------------------------------------------------------
    def _send_request(self, method: str, params: Any, *, fuzz: bool = False) -> int:
        assert self.proc is not None
        rid = self.last_rid = next(self.ids)
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, fuzz=fuzz)
        return rid

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _send(self, msg: dict[str, Any], *, fuzz: bool = False) -> None:
        assert self.proc is not None
        try:
            self.proc.send(msg, fuzz=fuzz)
        except TargetTimeout:  # recorded by the transport as a timeout event
            raise DriveTimeout("timeout: the target stopped reading its input") from None

    def request(self, method: str, params: Any, *, waiting_for: str) -> Any:
        rid = self._send_request(method, params)
        self.pump(lambda: rid in self.responses, waiting_for=waiting_for)
        entry = self.responses.pop(rid)
        msg = entry.msg
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            raise _RpcError(err.get("code"), str(err.get("message")), method)
        return msg.get("result")

    def note(self, what: str, data: dict[str, Any]) -> None:
        self.transcript.add(self.conn, "harness", "harness", event="note",
                            data={"note": what, **data})

    def pump(self, done: Callable[[], bool], *, waiting_for: str,
             on_update: Callable[[Entry, dict[str, Any]], None] | None = None) -> None:
        """Handle incoming lines until ``done()``.

        Each silence may last ``timeout`` seconds and the whole wait
        ``turn_timeout`` seconds, so a target that streams forever ends the wait too.
        """
        assert self.proc is not None
        proc = self.proc
        deadline = time.monotonic() + self.turn_timeout
        silent_until = time.monotonic() + self.timeout
        lines = cut_lines = 0
        unmatched = self.unmatched
        while not done():
            self._check_cut()
            now = time.monotonic()
            flood = proc.unrecorded_lines > 0
            try:
                if flood or now >= min(deadline, silent_until):
                    raise TargetTimeout()
                entry = proc.receive(min(min(silent_until, deadline) - now, CUT_POLL))
            except TargetTimeout:
                if not flood and time.monotonic() < min(deadline, silent_until):
                    continue  # a look at the Cutoff, not the end of the wait
                overall = not flood and time.monotonic() >= deadline
                self.transcript.add(self.conn, "harness", "harness", event="timeout",
                                    data={"timeout": self.timeout, "waiting_for": waiting_for,
                                          "deadline": self.turn_timeout if overall else None,
                                          "flood": proc.max_entries if flood else None,
                                          "lines": lines,
                                          "stderr_tail": proc.stderr_text()[-1000:]})
                what = ("flooded past the recording cap" if flood
                        else "kept writing past --turn-timeout" if overall
                        else "went silent")
                if self.unmatched > unmatched:
                    what = f"answered under response ids that match no request, then {what}"
                elif cut_lines:
                    what = f"wrote a line past the line cap, then {what}"
                raise DriveTimeout(f"timeout waiting for {waiting_for}" + (
                    f" (--turn-timeout {self.turn_timeout:g} s)" if overall else "") + (
                    f" (cut at the recording cap of {proc.max_entries} lines)" if flood else ""),
                    f"{what} at {waiting_for}") from None
            except TargetExited:
                raise self._exited(waiting_for) from None
            lines += 1
            cut_lines += entry.truncated is not None
            silent_until = time.monotonic() + self.timeout
            self._handle(entry, on_update)

    def _exited(self, waiting_for: str) -> DriveAborted:
        """The target closed its output or exited on its own, mid-case (a wait, a grace
        window, or before the suite closed its stdin): recorded as an ``early-exit`` event
        with its evidence (TARGET/exit), once; the abort that ends the case."""
        assert self.proc is not None
        proc, self.exit_seen = self.proc, True
        rc = proc.wait_exit(min(1.0, self.timeout))
        proc.drain_stderr(min(0.5, self.timeout))
        self.transcript.add(self.conn, "harness", "harness", event="early-exit",
                            data={"waiting_for": waiting_for, "returncode": rc,
                                  "signal": None if rc is None or rc >= 0 else -rc,
                                  "output_held": proc.output_held,
                                  "stderr_tail": proc.stderr_text()[-1000:]})
        what = "closed its output" if rc is None else "exited"
        return DriveAborted(f"target exited while waiting for {waiting_for}",
                            f"{what} at {waiting_for}")

    def _handle(self, entry: Entry,
                on_update: Callable[[Entry, dict[str, Any]], None] | None) -> None:
        """Act on every message of one line (a v2 batch holds several)."""
        if entry.error is not None or entry.msg is None:
            return  # recorded; the framing checker grades it
        for msg in entry.msg if isinstance(entry.msg, list) else [entry.msg]:
            self._dispatch(entry, msg, on_update)

    def _dispatch(self, entry: Entry, msg: Any,
                  on_update: Callable[[Entry, dict[str, Any]], None] | None) -> None:
        if not isinstance(msg, dict):
            return
        if model.is_response(msg):
            rid = msg["id"]
            if type(rid) is int and 0 <= rid <= self.last_rid:  # 1.0, true and "1" match none
                self.responses[rid] = Entry(entry.seq, entry.t, entry.conn, entry.src,
                                            entry.stream, msg=msg)
            else:
                self.unmatched += 1
            return
        method = msg.get("method")
        if not isinstance(method, str):
            return
        if "id" in msg:
            self._answer(msg)
        elif method == "session/update":
            params = msg.get("params")
            update = params.get("update") if isinstance(params, dict) else None
            if not isinstance(update, dict):
                return
            kind = model.update_kind(update)
            if (self.protocol < 2 and self.v2_update is None
                    and kind in model.V2_ONLY_UPDATES):
                self.v2_update = kind
            if on_update is not None:
                on_update(entry, update)

    def _answer(self, msg: dict[str, Any]) -> None:
        """Answer an agent->client request exactly once, with the same id."""
        assert self.proc is not None
        method, rid = msg["method"], msg["id"]
        raw_params = msg.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        result: Any
        if method == "session/request_permission":
            sid = params.get("sessionId")
            # only the options that are objects can be chosen: a malformed one is skipped
            options = [o for o in model.as_array(params.get("options")) if isinstance(o, dict)]
            allow = [o for o in options if str(o.get("kind", "")).startswith("allow")]
            if (isinstance(sid, str) and sid in self.cancelled) or not (allow or options):
                result = {"outcome": {"outcome": "cancelled"}}
            else:
                choice = (allow or options)[0]
                result = {"outcome": {"outcome": "selected", "optionId": choice.get("optionId")}}
        elif method == "elicitation/create":
            result = {"action": "cancel"}
        else:
            self._send({"jsonrpc": "2.0", "id": rid,
                        "error": {"code": -32601, "message": "Method not found"}})
            return
        self._send({"jsonrpc": "2.0", "id": rid, "result": result})

    # -- waits that end on their clock -------------------------------------
    def settle(self, quiet: float | None = None,
               on_update: Callable[[Entry, dict[str, Any]], None] | None = None,
               why: str = "") -> None:
        """Catalogue MID-A-09: keep a short grace window after a cancelled turn.

        Lines keep being handled until ``quiet`` seconds (``--grace``) pass with none, so
        an update the agent sends after its ``cancelled`` answer lands in that turn's
        tail, not in the next turn. The window ends on its clock: the transcript header
        records it (conformance.timers), ``why`` saying what it closed.
        """
        assert self.proc is not None
        quiet = self.grace if quiet is None else quiet
        deadline = time.monotonic() + self.turn_timeout  # an agent that never stops writing
        quiet_until = time.monotonic() + quiet
        while (now := time.monotonic()) < deadline:
            self._check_cut()
            if now >= quiet_until:
                self._clock("grace window", quiet, "--grace", why, live=on_update is not None)
                return
            try:
                entry = self.proc.receive(min(quiet_until - now, CUT_POLL))
            except TargetTimeout:
                continue
            except TargetExited:  # on its own, mid-case: no quiet end of the window
                raise self._exited(f"the grace window to close ({why or 'quiet'})") from None
            self._handle(entry, on_update)
            if self.proc.unrecorded_lines:
                self.note("grace window cut at the recording cap: the agent kept writing",
                          {"max_entries": self.proc.max_entries})
                return
            quiet_until = time.monotonic() + quiet
        self.note("grace window cut at --turn-timeout: the agent kept writing",
                  {"turn_timeout": self.turn_timeout})

    def _clock(self, timer: str, seconds: float, option: str, why: str,
               live: bool = False) -> None:
        """A wait ended on its clock: the header says which, how long, and where."""
        record_timer(self.transcript.header, timer, seconds, option, why,
                     len(self.transcript.entries) - 1, live)

    def _check_cut(self) -> None:
        """Stop the case when its Cutoff says so (recorded, so grading knows why it ended)."""
        reason = self.cutoff.reason()
        if reason:
            self.transcript.add(max(self.conn, 0), "harness", "harness", event="note",
                                data={"note": "interrupted", "cut": reason})
            raise DriveCut(reason)
