"""Target faults turned into findings: a crash or a hang is a fail with evidence.

These are not catalogue requirements but the suite's own rules (family
``TARGET``): the harness records ``start``, ``timeout``, ``early-exit``,
``note`` and ``exit`` events in the transcript, and these checkers grade them
like any other traffic. Evidence carries the exit code, the signal and the
stderr tail; where the suite capped what it kept (a long line, a stderr flood,
a stream that never ends), the finding says so.
"""

from __future__ import annotations

import json
from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.events import ConnEnd, Frame
from conformance.results import Reason, exit_status

# Logging is allowed, but a process that writes this much to stderr in one
# short conformance session is flooding: every client must drain it.
STDERR_FLOOD = 16 * 2**20


def _data(e: Any) -> dict[str, Any]:
    return e.data if isinstance(e.data, dict) else {}


@register
class Liveness(Checker):
    quiet_repeats = True  # reads harness events only
    rules = (
        Rule("TARGET/exit"),
        Rule("TARGET/hang"),
        Rule("TARGET/shutdown"),
        Rule("TARGET/shutdown-slow"),
        Rule("TARGET/output-cap"),
        Rule("TARGET/stderr-flood"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.aborted: set[int] = set()  # connections where a hang or exit was already reported
        self.interrupted: set[int] = set()
        self.capped: dict[int, int] = {}  # conn -> seq of the "recording capped" note
        self.spoke: set[int] = set()  # connections on which the target wrote a line

    def on_update_frame(self, ev: Frame) -> None:
        self.spoke.add(ev.entry.conn)

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.stream != "harness":
            if e.src == "agent" and e.stream == "stdout":
                self.spoke.add(e.conn)
            return
        data = _data(e)
        tail = data.get("stderr_tail", "")
        if e.event == "timeout":
            self.aborted.add(e.conn)
            if data.get("flood"):
                message = (f"the wait for {data.get('waiting_for')} was cut when the target's "
                           f"output passed the recording cap of {data.get('flood')} lines "
                           f"although lines kept coming ({data.get('lines')} read during the "
                           "wait): a flood")
            elif data.get("deadline"):
                message = (f"the wait for {data.get('waiting_for')} did not end within "
                           f"--turn-timeout {data.get('deadline')} s although lines kept coming "
                           f"({data.get('lines')} read during the wait)")
            else:
                message = (f"no answer within {data.get('timeout')} s while waiting "
                           f"for {data.get('waiting_for')}")
            self.found("TARGET/hang", message, entries=[e.seq], expected=data.get("waiting_for"),
                       actual={"silence": not (data.get("deadline") or data.get("flood")),
                               "stderr_tail": tail})
        elif e.event == "early-exit":
            self.aborted.add(e.conn)
            rc, sig = data.get("returncode"), data.get("signal")
            if data.get("output_held"):
                what = (f"the target exited ({exit_status(rc, sig)}) but a process it "
                        "started still holds its output open")
            elif rc is None:
                what = "the target closed its stdout but kept running"
            else:
                what = f"the target exited ({exit_status(rc, sig)})"
            self.found("TARGET/exit", f"{what} while the suite waited for "
                       f"{data.get('waiting_for')}", entries=[e.seq],
                       expected="the process running with its output open",
                       actual={"returncode": rc, "signal": sig, "still_running": rc is None,
                               "output_held": bool(data.get("output_held")),
                               "stderr_tail": tail})
        elif e.event == "note" and data.get("note") == "recording capped":
            self.capped.setdefault(e.conn, e.seq)
        elif e.event == "note" and data.get("note") == "interrupted":
            self.interrupted.add(e.conn)  # the user stopped the run: shutdown is not graded
        elif e.event == "exit":
            self._exit(e, data)

    def _exit(self, e: Any, data: dict[str, Any]) -> None:
        ended_by, grace = data.get("ended_by"), data.get("grace")
        if e.conn in self.interrupted:
            pass  # the suite cut the grace short
        elif ended_by == "sigterm" and e.conn not in self.aborted:  # a hung target may not notice
            took = data.get("exit_seconds")
            after = f"{took} s after its stdin closed" if took is not None else "after a SIGTERM"
            self.found("TARGET/shutdown-slow", f"the target exited {after}: it was still "
                       f"running {grace} s after its stdin closed and ended on the suite's "
                       "SIGTERM (ACP sets no shutdown time; information)", entries=[e.seq],
                       expected="exit when stdin closes",
                       actual={"ended_by": ended_by, "exit_seconds": took})
        elif ended_by in ("sigkill", "unknown"):
            self.found("TARGET/shutdown", f"the target ignored SIGTERM for {grace} s; the suite "
                       "killed its process group with SIGKILL", entries=[e.seq],
                       expected="exit on stdin close or SIGTERM",
                       actual={"ended_by": ended_by, "returncode": data.get("returncode"),
                               "signal": data.get("signal")})
        stderr_bytes, kept = data.get("stderr_bytes") or 0, data.get("stderr_kept")
        if isinstance(stderr_bytes, int) and stderr_bytes > STDERR_FLOOD:
            self.found("TARGET/stderr-flood",
                       f"the target wrote {stderr_bytes} bytes to stderr in one process "
                       f"(more than {STDERR_FLOOD} bytes)", entries=[e.seq],
                       expected=f"at most {STDERR_FLOOD} bytes of logs",
                       actual={"stderr_bytes": stderr_bytes, "stderr_kept": kept,
                               "stderr_tail": data.get("stderr_tail", "")[-500:]})
        if isinstance(kept, int) and isinstance(stderr_bytes, int) and stderr_bytes > kept:
            self.found("TARGET/output-cap",
                       f"the target wrote {stderr_bytes} bytes to stderr; the transcript keeps "
                       f"the first {kept} bytes and findings the last 4096", entries=[e.seq],
                       actual={"stderr_bytes": stderr_bytes, "stderr_kept": kept})
        lines = data.get("unrecorded_lines") or 0
        if lines:
            where = [self.capped[e.conn]] if e.conn in self.capped else [e.seq]
            self.found("TARGET/output-cap",
                       f"the target wrote more than the suite records per connection; "
                       f"{lines} later line(s) ({data.get('unrecorded_bytes')} bytes) were read "
                       "but not kept, so grading sees the transcript up to the cap",
                       entries=where, actual={"unrecorded_lines": lines,
                                              "unrecorded_bytes": data.get("unrecorded_bytes")})

    def on_conn_end(self, ev: ConnEnd) -> None:
        # No credit without traffic: a process that never wrote a line has shown neither
        # liveness nor a clean shutdown (its faults, if any, are still reported).
        for rule in ("TARGET/exit", "TARGET/hang", "TARGET/shutdown", "TARGET/shutdown-slow",
                     "TARGET/output-cap", "TARGET/stderr-flood"):
            if ev.conn in self.spoke:
                self.exercised(rule)
            else:
                self.not_applicable(rule, "not testable: the target never spoke",
                                    Reason.NOT_TESTABLE)


@register
class ResponseIds(Checker):
    """Every response the target sends answers a request of the suite still open."""

    quiet_repeats = True  # a notification is neither request nor response

    rules = (
        Rule("TARGET/unmatched-response"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.pending: dict[int, set[tuple[str, Any]]] = {}

    on_update_frame = None  # a notification is neither request nor response

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.stream not in ("stdin", "stdout") or e.error is not None or e.msg is None:
            return
        msgs = e.msg if isinstance(e.msg, list) else [e.msg]
        pending = self.pending.setdefault(e.conn, set())
        for m in msgs:
            if e.src == "client" and model.is_request(m):
                key = _key(m["id"])
                if key is not None:
                    pending.add(key)
            elif e.src == "agent" and e.stream == "stdout" and model.is_response(m):
                self.exercised("TARGET/unmatched-response")
                if m["id"] is None and "error" in m:
                    continue  # an error about a request whose id could not be read
                key = _key(m["id"])
                if key in pending:
                    pending.discard(key)
                    continue
                self.found("TARGET/unmatched-response",
                           f"line {e.seq} answers id {_show(m['id'])}, which matches no open "
                           "request of the suite", entries=[e.seq],
                           expected="the id of an open request",
                           actual={"id": _show(m["id"]), "open": sorted(_show(k[1])
                                                                        for k in pending)[:10]})


def _key(rid: Any) -> tuple[str, Any] | None:
    """JSON-RPC ids compare by type and value: 1, "1", true and 1.0 are all different."""
    if isinstance(rid, bool) or not isinstance(rid, (int, str, float)):
        return None if rid is None else ("other", repr(rid))
    return (type(rid).__name__, rid)


def _show(rid: Any) -> str:
    text = json.dumps(rid, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"


#: The rules that grade how a protocol version was agreed: graded even in a case the target
#: could not take, since the negotiation itself is what its traffic shows.
NEGOTIATION = "TARGET/negotiation"  # Negotiation's rule (client side)
AGENT_NEGOTIATION = "TARGET/negotiation/agent"  # AgentNegotiation's rule


@register
class Negotiation(Checker):
    """Client side: a client that asked for an older protocol version than the agent
    answered, and carried on as if its own version had been agreed (the spec answers a
    version the agent does not support with the agent's latest; a client that cannot speak
    it should close the connection). Info: the case is then not graded on that version."""

    quiet_repeats = True  # reads the handshake note and the client's requests only
    rules = (
        Rule("TARGET/negotiation"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.mismatch: dict[int, tuple[int, dict[str, Any]]] = {}  # conn -> (seq, data)
        self.reported = False

    on_update_frame = None  # reads the handshake note and the client's requests only

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        data = _data(e)
        if e.stream == "harness" and e.event == "note" and data.get("note") == "version-mismatch":
            asked, answered = data.get("asked"), data.get("answered")
            if isinstance(asked, int) and isinstance(answered, int) and asked < answered:
                self.mismatch[e.conn] = (e.seq, data)
            self.exercised("TARGET/negotiation")
            return
        if (self.reported or e.conn not in self.mismatch or e.src != "client"
                or e.stream != "stdin" or not isinstance(e.msg, dict)):
            return
        method = e.msg.get("method")
        if method in ("session/new", "session/load", "session/prompt"):
            seq, data = self.mismatch[e.conn]
            self.reported = True
            self.found("TARGET/negotiation", f"the client asked for protocolVersion "
                       f"{data.get('asked')}, was answered {data.get('answered')}, and carried "
                       f"on with {method} instead of closing the connection",
                       entries=[seq, e.seq], expected="the client closes the connection "
                       "(or speaks the answered version)", actual=method)


@register
class AgentNegotiation(Checker):
    """Agent side: the version an agent answers ``initialize`` with is the one it speaks.

    The spec's negotiation rule is a MUST: the agent answers with the requested version
    if it supports it, else with its own latest, never with an error; and it then speaks
    what it answered. One finding per transcript names the entry: an error to
    ``initialize``; a turn ended the v1 way (``stopReason`` in the ``session/prompt``
    response, no ``state_update`` before it) after answering 2; a v2-only update after
    answering 1. Every case of that version is then not run (the driver's
    ``NegotiationFailed``), so this is the version's one finding, never a hang."""

    quiet_repeats = True  # reads the handshake, prompt responses and update kinds only
    rules = (
        Rule("TARGET/negotiation/agent"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.asked: dict[int, tuple[Any, int, Any]] = {}  # conn -> (request id, seq, version)
        self.answered: dict[int, tuple[int, int, Any]] = {}  # conn -> (seq, version, asked)
        self.prompts: dict[int, dict[Any, int]] = {}  # conn -> open prompt ids -> seq
        self.state_seen: set[int] = set()  # conns with a state_update since the last prompt
        self.reported = False

    def on_update_frame(self, ev: Frame) -> None:
        e = ev.entry
        if self.reported or e.conn not in self.answered:
            return
        kind = e.msg["params"]["update"].get("sessionUpdate")
        if isinstance(kind, str):
            self._update(e, kind)

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if self.reported or e.stream not in ("stdin", "stdout") or e.error is not None:
            return
        for m in e.msg if isinstance(e.msg, list) else [e.msg]:
            if isinstance(m, dict):
                if e.src == "client":
                    self._client(e, m)
                elif e.src == "agent":
                    self._agent(e, m)

    def _client(self, e: Any, m: dict[str, Any]) -> None:
        raw = m.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if m.get("method") == "initialize" and "id" in m:
            self.asked[e.conn] = (_key(m["id"]), e.seq, params.get("protocolVersion"))
        elif m.get("method") == "session/prompt" and "id" in m:
            self.prompts.setdefault(e.conn, {})[_key(m["id"])] = e.seq
            self.state_seen.discard(e.conn)

    def _agent(self, e: Any, m: dict[str, Any]) -> None:
        asked = self.asked.get(e.conn)
        if model.is_response(m) and asked is not None and _key(m["id"]) == asked[0]:
            self.asked.pop(e.conn)
            self.exercised("TARGET/negotiation/agent")
            result = m.get("result")
            pv = result.get("protocolVersion") if isinstance(result, dict) else None
            if "error" in m:
                err = m["error"] if isinstance(m["error"], dict) else {}
                self._found(f"the agent answered initialize (protocolVersion {asked[2]!r}) "
                            f"with error {err.get('code')}: {str(err.get('message'))[:200]}, "
                            "instead of the version it supports", [asked[1], e.seq],
                            "a result naming the requested version or the agent's latest",
                            {"error": err.get("code")})
            elif isinstance(pv, int) and not isinstance(pv, bool):
                self.answered[e.conn] = (e.seq, pv, asked[2])
            return
        answered = self.answered.get(e.conn)
        if answered is None:
            return
        if model.is_response(m):
            seq, pv, requested = answered
            echo = " (the version asked for)" if pv == requested else ""
            opened = self.prompts.get(e.conn, {}).pop(_key(m["id"]), None)
            result = m.get("result")
            if opened is None or not isinstance(result, dict):
                return
            if pv >= 2 and "stopReason" in result and e.conn not in self.state_seen:
                self._found(f"the agent answered protocolVersion {pv}{echo}, then ended a turn "
                            "the v1 way (stopReason in the session/prompt response, no "
                            "state_update)", [seq, e.seq], "v2 turns: acceptance, then idle",
                            {"stopReason": result.get("stopReason")})
            return
        params = m.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        if m.get("method") != "session/update" or not isinstance(kind, str):
            return
        self._update(e, kind)

    def _update(self, e: Any, kind: str) -> None:
        """A session/update of ``kind`` after the agent answered initialize."""
        seq, pv, requested = self.answered[e.conn]
        echo = " (the version asked for)" if pv == requested else ""
        if kind == "state_update":
            self.state_seen.add(e.conn)
        if pv < 2 and kind in model.V2_ONLY_UPDATES:
            self._found(f"the agent answered protocolVersion {pv}{echo}, then sent a v2 "
                        f"{kind}", [seq, e.seq], "v1 updates only", kind)

    def _found(self, message: str, entries: list[int], expected: str, actual: Any) -> None:
        self.reported = True
        self.found("TARGET/negotiation/agent", message, entries=entries, expected=expected,
                   actual=actual)
