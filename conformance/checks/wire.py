# long: reports name each checker by its module (wire.ClientIds), so the client half stays here until reports may change
"""Schema and wire rules: MID-S-01, -02, -04, -05, -06, MID-V2-01, -02, -09; client side MID-C-01, MID-C-08.

Over 400 lines, kept whole on purpose: its seam is the agent's lines (``Framing``
to ``PromptResponseShape``) against the client's own lines (``ClientIds``,
``Batches``, ``ClientLiveness``), but the reports' traceability section names
each checker by its module (``wire.ClientIds``), so moving the client half out
would change every Markdown and HTML report. Split there when reports may change.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.events import (
    ConnEnd,
    Frame,
    MessageEvent,
    OtherUpdate,
    RepeatRun,
    TurnEnd,
)
from conformance.controlstream import PROBE_METHOD
from conformance.model import with_article
from conformance.results import exit_status


def short(value: Any, limit: int = 120) -> Any:
    """Evidence stays readable: long strings are cut, with their length said."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}... ({len(value)} characters)"
    return value


@register
class Framing(Checker):
    quiet_repeats = True  # a repeat line is a well-formed JSON-RPC notification
    rules = (
        Rule("MID-S-06/framing"),
        Rule("MID-S-06/jsonrpc"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.framed = self.parsed = False  # rules exercised already

    def on_update_frame(self, ev: Frame) -> None:
        if not self.parsed:  # a JSON-RPC 2.0 notification: only the exercised marks
            self.on_frame(ev)

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.src not in ("agent",) or e.stream != "stdout":
            return
        if not self.framed:  # exercised once is enough (a hot path: every line)
            self.framed = True
            self.exercised("MID-S-06/framing")
        if e.error is not None:
            shown = e.raw if e.raw is not None else f"base64:{e.raw_b64}"
            self.found("MID-S-06/framing", f"line {e.seq} is not one JSON message: {e.error}",
                       key=e.conn, entries=[e.seq], expected="one UTF-8 JSON object per line",
                       actual=short(shown, 200))
            return
        if not self.parsed:
            self.parsed = True
            self.exercised("MID-S-06/jsonrpc")
        msgs = e.msg
        if isinstance(msgs, list):
            if ev.protocol < 2:
                self.found("MID-S-06/jsonrpc", "a JSON-RPC batch array in protocol v1",
                           key=(e.conn, "batch"), entries=[e.seq], expected="single messages",
                           actual=short(e.raw, 200))
                return
            if not msgs:
                self.found("MID-S-06/jsonrpc", "an empty batch array", key=(e.conn, "[]"),
                           entries=[e.seq],
                           expected="a batch with at least one message", actual="[]")
                return
        else:
            msgs = [msgs]
        for m in msgs:
            problem = model.jsonrpc_problem(m)
            if problem:
                self.found("MID-S-06/jsonrpc", f"line {e.seq} is {problem}",
                           key=(e.conn, problem), entries=[e.seq],
                           expected="a JSON-RPC 2.0 message", actual=short(e.raw, 200))
                return


@register
class IdShape(Checker):
    quiet_repeats = True  # same ID, same kind: same verdict as the chunk before
    rules = (
        Rule("MID-S-01/type"),
        Rule("MID-S-01/near-miss-key"),
        Rule("MID-S-01/empty-id"),
        Rule("MID-S-01/long-id"),
        Rule("MID-S-02/null-form"),
        Rule("MID-V2-01"),
        Rule("MID-V2-02/missing-id"),
        Rule("MID-V2-02/content-shape"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.forms: Counter[str] = Counter()
        self.form_entries: dict[str, int] = {}
        self.shaped = self.with_id = False  # rules exercised already

    def quiet_on(self, ev: Any) -> bool:
        # A v1 run without IDs is counted chunk by chunk (MID-S-02/null-form).
        return ev.mid is not None or ev.protocol >= 2

    def on_repeats(self, run: RepeatRun) -> None:
        first = run.first
        if first.mid is None and first.protocol < 2:  # an ID-less v1 run: only counted
            self.forms["omitted" if first.id_state == model.ABSENT else "null"] += len(run.seqs)
            return
        for ev in run.events():
            self.on_message(ev)

    def on_message(self, ev: MessageEvent) -> None:
        u = ev.update
        if not self.shaped:  # exercised once is enough (a hot path: every message update)
            self.shaped = True
            self.exercised("MID-S-01/type")
            self.exercised("MID-S-01/near-miss-key")
        v2 = ev.protocol >= 2
        if ev.id_state == model.WRONG_TYPE:
            self.found("MID-S-01/type",
                       f"{ev.update_type} carries "
                       f"{with_article(model.json_type(ev.raw_id))} messageId",
                       key=(ev.session, ev.kind, short(repr(ev.raw_id))), entries=[ev.seq],
                       expected="a JSON string", actual=short(ev.raw_id))
        if ev.id_state in (model.ABSENT, model.NULL):
            near = [k for k in model.NEAR_MISS_KEYS if k in u]
            if near:
                self.found("MID-S-01/near-miss-key",
                           f"{ev.update_type} has {near[0]!r} instead of 'messageId'",
                           key=(ev.session, ev.kind, near[0], short(repr(u[near[0]]))),
                           entries=[ev.seq], expected="messageId", actual=near[0],
                           protocol=ev.protocol)
        if ev.mid is not None:
            if not self.with_id:
                self.with_id = True
                self.exercised("MID-S-01/empty-id")
                self.exercised("MID-S-01/long-id")
            if ev.mid == "":
                self.found("MID-S-01/empty-id", f"{ev.update_type} uses the empty string as ID "
                           "(legal in the schema; the official TCK fails it: ACP-PATCH-201)",
                           key=(ev.session, ev.kind), entries=[ev.seq],
                           expected="a non-empty opaque string", actual="")
            elif len(ev.mid) > model.LONG_ID:
                self.found("MID-S-01/long-id",
                           f"{ev.update_type} has {with_article(len(ev.mid))}-character messageId",
                           key=(ev.session, ev.mid), entries=[ev.seq],
                           expected=f"at most {model.LONG_ID} characters",
                           actual=short(ev.mid))
        if not v2:
            if ev.form == "chunk":
                if "MID-S-02/null-form" not in self.marked:
                    self.mark("MID-S-02/null-form")
                if ev.id_state in (model.ABSENT, model.NULL):
                    form = "omitted" if ev.id_state == model.ABSENT else "null"
                    self.forms[form] += 1
                    self.form_entries.setdefault(form, ev.seq)
            return
        if ev.form == "chunk":
            self.exercised("MID-V2-01")
            if ev.id_state != model.STRING:
                self.found("MID-V2-01",
                           f"v2 {ev.update_type} with {with_article(ev.id_state)} messageId",
                           key=(ev.session, ev.epoch.index, ev.turn, ev.kind, ev.id_state),
                           entries=[ev.seq], expected="a non-null string messageId",
                           actual=short(ev.raw_id) if ev.id_state != model.ABSENT else "absent")
            return
        self.exercised("MID-V2-02/missing-id")
        if ev.id_state != model.STRING:
            self.found("MID-V2-02/missing-id",
                       f"v2 {ev.update_type} upsert with {with_article(ev.id_state)} messageId",
                       entries=[ev.seq], expected="a string messageId",
                       actual=short(ev.raw_id) if ev.id_state != model.ABSENT else "absent")
        if "content" in u:
            self.exercised("MID-V2-02/content-shape")
            if u["content"] is not None and not isinstance(u["content"], list):
                self.found("MID-V2-02/content-shape",
                           f"v2 {ev.update_type} content is "
                           f"{with_article(model.json_type(u['content']))}",
                           entries=[ev.seq], expected="an array of content blocks or null",
                           actual=short(repr(u["content"])))

    def finish(self) -> None:
        for form, count in sorted(self.forms.items()):
            self.found("MID-S-02/null-form", f"{count} v1 chunk(s) without an ID, form: {form}",
                       entries=[self.form_entries[form]], actual=form)


@register
class Scope(Checker):
    quiet_repeats = True
    rules = (
        Rule("MID-S-04/non-message-kind"),
        Rule("MID-S-04/meta-only"),
    )

    def on_other(self, ev: OtherUpdate) -> None:
        if "MID-S-04/non-message-kind" not in self.marked:
            self.mark("MID-S-04/non-message-kind")
        if "messageId" in ev.update:
            self.found("MID-S-04/non-message-kind",
                       f"{ev.update_type} carries a root messageId",
                       key=(ev.session, ev.update_type, short(repr(ev.update.get("messageId")))),
                       entries=[ev.seq], expected="no messageId on this kind",
                       actual=short(ev.update.get("messageId")))

    def on_message(self, ev: MessageEvent) -> None:
        if "MID-S-04/meta-only" not in self.marked:
            self.mark("MID-S-04/meta-only")
        meta = ev.update.get("_meta")
        if ev.id_state != model.STRING and isinstance(meta, dict):
            keys = [k for k in meta if k.lower().replace("_", "") in ("messageid", "id")]
            if keys:
                self.found("MID-S-04/meta-only",
                           f"{ev.update_type} carries its ID only in _meta.{keys[0]}",
                           key=(ev.session, ev.kind, keys[0], short(repr(meta[keys[0]]))),
                           entries=[ev.seq], actual=short(meta[keys[0]]))


@register
class PromptResponseShape(Checker):
    rules = (
        Rule("MID-S-05/legacy-response-id"),
    )

    def on_turn_end(self, ev: TurnEnd) -> None:
        if ev.protocol >= 2 or ev.response is None:
            return
        self.exercised("MID-S-05/legacy-response-id")
        keys = [k for k in model.LEGACY_PROMPT_KEYS if k in ev.response]
        if keys:
            self.found("MID-S-05/legacy-response-id",
                       f"the v1 session/prompt response carries {keys[0]!r} (legacy unstable shape)",
                       entries=[ev.seq], expected="only stopReason and _meta",
                       actual={k: short(ev.response[k]) for k in keys})


@register
class ClientIds(Checker):
    quiet_repeats = True  # reads client lines only
    rules = (
        Rule("MID-C-01"),
        Rule("MID-C-01/meta"),
        Rule("MID-V2-09/client-batch"),
    )

    on_update_frame = None  # the client's lines only

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.src != "client" or e.stream != "stdin" or e.fuzz or e.error is not None:
            return
        msgs = e.msg if isinstance(e.msg, list) else [e.msg]
        if ev.protocol >= 2:
            self.exercised("MID-V2-09/client-batch")
            lifecycle = [m["method"] for m in msgs if isinstance(m, dict) and isinstance(
                m.get("method"), str) and m["method"].startswith("session/")]
            if isinstance(e.msg, list) and lifecycle:
                self.found("MID-V2-09/client-batch",
                           f"the client batches {lifecycle[0]} (entries may run in any order)",
                           entries=[e.seq], expected="session calls as single messages",
                           actual=lifecycle)
        for m in msgs:
            if not isinstance(m, dict) or "method" not in m:
                continue
            self.exercised("MID-C-01")
            self.exercised("MID-C-01/meta")
            params = m.get("params")
            if not isinstance(params, dict):
                continue
            keys = [k for k in model.LEGACY_PROMPT_KEYS if k in params]
            if keys:
                self.found("MID-C-01", f"the client's {m['method']} carries its own {keys[0]!r}",
                           entries=[e.seq], expected="no protocol message ID from the client",
                           actual={k: short(params[k]) for k in keys})
            meta = params.get("_meta")
            if isinstance(meta, dict):
                mkeys = [k for k in meta if isinstance(k, str) and model.names_message_id(k)]
                if mkeys:
                    self.found("MID-C-01/meta", f"{m['method']} carries {mkeys[0]!r} in _meta",
                               entries=[e.seq], actual=short(meta[mkeys[0]]))


@register
class Batches(Checker):
    quiet_repeats = True  # a repeat is never part of a batch
    rules = (
        Rule("MID-V2-09/same-id-batch"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.batch: int | None = None
        self.ids: dict[tuple[str, str, str], int] = {}
        self.reported: set[int] = set()

    def on_message(self, ev: MessageEvent) -> None:
        if ev.batch is None or ev.mid is None:
            return
        self.exercised("MID-V2-09/same-id-batch")
        if ev.batch != self.batch:
            self.batch, self.ids = ev.batch, {}
        key = (ev.session, ev.kind, ev.mid)
        if key in self.ids and ev.batch not in self.reported:
            self.reported.add(ev.batch)
            self.found("MID-V2-09/same-id-batch",
                       f"batch line {ev.batch} carries two {ev.kind} updates for messageId "
                       f"{short(ev.mid)!r}; batch entries may be applied in any order",
                       entries=[ev.batch], expected="one update per messageId per batch",
                       actual=short(ev.mid))
        self.ids[key] = ev.seq


@register
class ClientLiveness(Checker):
    """Client side (the suite plays the agent): framing, answers, liveness (MID-C-08, B.6)."""

    quiet_repeats = True  # a notification from the agent is neither request nor answer

    rules = (
        Rule("MID-S-06/client-framing"),
        Rule("MID-C-08/answers"),
        Rule("MID-C-08/probe"),
        Rule("MID-C-08/exit"),
        Rule("MID-C-08/hang"),
        Rule("MID-C-08/flood"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        # (conn, JSON-RPC id) -> (method, entry, params) of agent requests not yet answered
        self.pending: dict[tuple[int, str], tuple[str, int, Any]] = {}
        self.reported: set[tuple[int, str]] = set()
        self.cut = False  # the case was cut from outside: what it left pending is not graded

    on_update_frame = None  # a notification is no request of the agent's

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.stream == "harness":
            self._harness(e)
            return
        if e.src == "agent" and e.stream == "stdout" and e.error is None:
            for m in e.msg if isinstance(e.msg, list) else [e.msg]:
                if model.is_request(m):
                    self.pending[(e.conn, repr(m["id"]))] = (str(m["method"]), e.seq,
                                                             m.get("params"))
            return
        if e.src != "client" or e.stream != "stdin":
            return
        self.exercised("MID-S-06/client-framing")
        if e.error is not None:
            self.found("MID-S-06/client-framing", f"the client wrote a line that is not JSON: "
                       f"{e.error}", key=e.conn, entries=[e.seq],
                       expected="one JSON-RPC message per line",
                       actual=short(e.raw if e.raw is not None else e.raw_b64, 200))
            return
        for m in e.msg if isinstance(e.msg, list) else [e.msg]:
            problem = model.jsonrpc_problem(m)
            if problem:
                self.found("MID-S-06/client-framing", f"the client wrote {problem}",
                           key=(e.conn, problem), entries=[e.seq],
                           expected="a JSON-RPC 2.0 message",
                           actual=short(e.raw, 200))
            elif model.is_response(m):
                self._answer(e.conn, e.seq, m)

    def _answer(self, conn: int, seq: int, m: dict[str, Any]) -> None:
        key = (conn, repr(m["id"]))
        req = self.pending.pop(key, None)
        self.exercised("MID-C-08/answers")
        if req is None and m["id"] is None and "error" in m:
            return  # JSON-RPC's refusal of a request it could not read (a batch, say): the
            # refused request's own rule grades it, not a second fault here
        if req is None:
            self.found("MID-C-08/answers", f"the client answered request id {short(m['id'])!r}, "
                       "which is unknown or already answered", entries=[seq],
                       expected="one answer per agent request", actual=short(m["id"]))
            return
        method, rseq, params = req
        if method == PROBE_METHOD:
            self.exercised("MID-C-08/probe")
            return
        if "result" in m and "error" in m:
            self.found("MID-C-08/answers", f"the answer to {method} has both result and error",
                       entries=[rseq, seq], expected="result or error", actual=short(repr(m), 200))
        elif method == "session/request_permission" and "result" in m:
            outcome = m["result"].get("outcome") if isinstance(m["result"], dict) else None
            offered = [o.get("optionId") for o in model.as_array(params.get("options"))
                       if isinstance(o, dict)] if isinstance(params, dict) else []
            ok = isinstance(outcome, dict) and (
                outcome.get("outcome") == "cancelled"
                or outcome.get("outcome") == "selected" and outcome.get("optionId") in offered)
            if not ok:
                self.found("MID-C-08/answers", "the permission answer is neither a selected "
                           "offered option nor cancelled", entries=[rseq, seq],
                           expected={"outcome": {"outcome": "selected", "optionId": offered}},
                           actual=short(repr(m["result"]), 200))

    def _harness(self, e: Any) -> None:
        data = e.data if isinstance(e.data, dict) else {}
        tail = data.get("output_tail", data.get("stderr_tail", ""))
        if e.event == "timeout":
            rid = data.get("id")
            key = (e.conn, repr(rid))
            if rid is not None and key in self.pending:
                self.reported.add(key)
                method = self.pending[key][0]
                rule = "MID-C-08/probe" if method == PROBE_METHOD else "MID-C-08/answers"
                self.found(rule, f"no answer to {method} {short(rid)!r} within "
                           f"{data.get('timeout')} s", entries=[self.pending[key][1], e.seq],
                           expected="an answer (an error such as -32601 will do)",
                           actual="no answer")
            else:
                message = (f"nothing within {data.get('timeout')} s while waiting for "
                           f"{data.get('waiting_for')}")
                if data.get("deadline"):
                    message = (f"the wait for {data.get('waiting_for')} did not end within "
                               f"--turn-timeout {data.get('deadline')} s although output kept "
                               "coming")
                self.found("MID-C-08/hang", message, entries=[e.seq],
                           expected=data.get("waiting_for"), actual={"output_tail": tail})
        elif e.event == "early-exit":
            self.found("MID-C-08/exit", f"the client exited "
                       f"({exit_status(data.get('returncode'), data.get('signal'))}) while the "
                       "suite waited for "
                       f"{data.get('waiting_for')}", entries=[e.seq],
                       expected="the client running",
                       actual={"returncode": data.get("returncode"), "output_tail": tail})
        elif e.event == "flood":
            self.found("MID-C-08/flood", f"the client wrote more than {data.get('limit')} bytes "
                       f"while the suite waited for {data.get('waiting_for')}", entries=[e.seq],
                       expected=f"at most {data.get('limit')} bytes", actual={"output_tail": tail})
        elif e.event == "note" and data.get("note") == "interrupted":
            self.cut = True  # --deadline or a signal ended the case, not the client
        elif e.event == "note" and data.get("note") == "probe-unawaited":
            # Sent but not waited for: the client left an earlier probe of this case
            # unanswered (reported there), or the case is not graded on this version.
            self.reported.add((e.conn, repr(data.get("id"))))
        elif e.event == "start" and data.get("pid_role") in ("client", "agent-double"):
            for rule in ("MID-C-08/exit", "MID-C-08/hang", "MID-C-08/flood"):
                self.exercised(rule)

    def on_conn_end(self, ev: ConnEnd) -> None:
        for key in [k for k in self.pending if k[0] == ev.conn]:
            method, rseq, _ = self.pending.pop(key)
            if key in self.reported or self.cut:
                continue
            rule = "MID-C-08/probe" if method == PROBE_METHOD else "MID-C-08/answers"
            self.found(rule, f"the connection ended before the client answered {method}",
                       entries=[rseq, ev.seq], expected="an answer", actual="connection closed")
