"""The proxy checker (catalogue Appendix J, MID-P-01 to MID-P-05, and MID-V2-10): what
the agent sent on one side of a proxy, compared message by message with what came
out on the other.

A pure function of two transcripts: ``sent``, the agent side (recorded between the
proxy and the agent: ``src == "agent"`` is what the agent wrote, ``src == "client"``
what the proxy wrote to it), and ``received``, the client side (the suite's driver in
front of the proxy: ``src == "agent"`` is what the proxy wrote). Every finding
points at client-side entries (``entries``) and names the agent-side entry in its
``expected`` evidence, so both lines can be read next to each other.

Message updates are paired by what they carry apart from the ID (their kind, content
and ``_meta``); a pair is then graded on its ID (MID-P-01, MID-P-02), an unpaired
one as dropped or added (MID-P-03, MID-P-02 for a v1 ``null`` or malformed ID),
and the pairs' order as reordering (MID-P-03). A declared v2-to-v1 adapter
(``adapter=True``: the agent side speaks v2, the client side v1) has its
whole-message upserts graded by MID-V2-10 instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from conformance import model
from conformance.checks.base import Checker, Options, Rule, Sink, _rows, _selected, register
from conformance.results import Finding, Reason
from conformance.transcript import Entry

CHUNKS = ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk")
UPSERTS = ("user_message", "agent_message", "agent_thought")
SESSION_MESSAGES = ("session_message", "session_message_chunk")
MESSAGE_KINDS = CHUNKS + UPSERTS + SESSION_MESSAGES
ID_KEYS = ("messageId", "userMessageId")  # what a client might add to session/prompt

_MISSING = "(omitted)"  # the canonical form of an omitted messageId


RULES: tuple[Rule, ...] = (
    Rule("MID-P-01"),
    Rule("MID-P-02"),
    Rule("MID-P-02/null-form"),
    Rule("MID-P-03"),
    Rule("MID-P-03/across-messages"),
    Rule("MID-P-04"),
    Rule("MID-P-05"),
    Rule("MID-P-05/capabilities"),
    Rule("MID-V2-10"),
)
REQUIREMENTS = tuple(r.id for r in RULES)


@register
class ProxyRules(Checker):
    """Declares the proxy rules (for the register, ``list`` and the case lint). They are
    graded by :func:`grade_proxy` on two transcripts, never by the one-transcript
    grader: their role, ``proxy``, is no role ``grade`` is asked for."""

    rules: ClassVar[tuple[Rule, ...]] = RULES


@dataclass
class _Update:
    seq: int
    pos: int  # its place among the side's message updates
    kind: str
    mid: str  # the canonical JSON of the messageId, or _MISSING
    value: Any  # the messageId itself (None when omitted)
    key: str  # the canonical JSON of everything but the messageId
    update: dict[str, Any]
    window: int | None  # the k-th load/resume whose replay it belongs to (None: live)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _messages(msg: Any) -> list[Any]:
    return msg if isinstance(msg, list) else [msg]


def _updates(entries: Sequence[Entry]) -> tuple[list[_Update], list[int]]:
    """The message updates the agent side wrote, in order, and the seq of each
    load/resume response it wrote (a replay window ends there)."""
    out: list[_Update] = []
    pending: dict[str, int] = {}  # canonical request id -> its window number
    responses: list[int] = []
    windows = 0
    open_windows: set[int] = set()
    for e in entries:
        if e.msg is None or e.stream == "harness":
            continue
        for m in _messages(e.msg):
            if not isinstance(m, dict):
                continue
            method = m.get("method")
            if e.src == "client" and method in ("session/load", "session/resume") and "id" in m:
                pending[_canon(m["id"])] = windows
                open_windows.add(windows)
                windows += 1
                responses.append(-1)
                continue
            if e.src != "agent":
                continue
            if model.is_response(m) and _canon(m.get("id")) in pending:
                k = pending.pop(_canon(m.get("id")))
                open_windows.discard(k)
                responses[k] = e.seq
                continue
            if method != "session/update":
                continue
            update = model.as_object(model.as_object(m.get("params")).get("update"))
            kind = update.get("sessionUpdate")
            if kind not in MESSAGE_KINDS:
                continue
            has = "messageId" in update
            rest = {k: v for k, v in update.items() if k != "messageId"}
            out.append(_Update(e.seq, len(out), str(kind),
                               _canon(update["messageId"]) if has else _MISSING,
                               update.get("messageId"), _canon(rest), update,
                               min(open_windows) if open_windows else None))
    return out, responses


def _show(u: _Update) -> dict[str, Any]:
    return {"entry": u.seq, "sessionUpdate": u.kind,
            "messageId": u.value if u.mid != _MISSING else _MISSING}


def _malformed(u: _Update) -> bool:
    return u.mid != _MISSING and not isinstance(u.value, str)


def _text(u: _Update) -> str:
    content = u.update.get("content")
    text = model.blocks_text(content) if isinstance(content, list) else model.block_text(content)
    return text[:40]


class _Grader:
    def __init__(self, sink: Sink, protocol: int, adapter: bool) -> None:
        self.sink, self.protocol, self.adapter = sink, protocol, adapter

    def fail(self, rule: str, message: str, sent: _Update | None, got: _Update | None, *,
             key: Any = None) -> None:
        self.sink.add(rule, message, (got.seq,) if got else (),
                      {"agent_side": _show(sent)} if sent else None,
                      {"client_side": _show(got)} if got else None, 1, key)

    def seen(self, rule: str) -> None:
        self.sink.exercised(rule, self.protocol)

    # -- message updates -------------------------------------------------------
    def messages(self, sent: list[_Update], received: list[_Update],
                 sent_loads: list[int], received_loads: list[int]) -> None:
        used: set[int] = set()
        everything = sent
        if self.adapter:  # its upserts are graded apart, on what the chunks leave over
            sent = [s for s in sent if s.kind not in UPSERTS]
        by_key: dict[str, list[_Update]] = {}
        for r in received:
            if r.pos not in used:
                by_key.setdefault(r.key, []).append(r)
        pairs: list[tuple[_Update, _Update]] = []
        unpaired: list[_Update] = []
        for s in sent:
            self.seen("MID-P-03")
            self.seen("MID-P-03/across-messages")
            free = [r for r in by_key.get(s.key, ()) if r.pos not in used]
            same = [r for r in free if r.mid == s.mid]
            if not free:
                unpaired.append(s)
                continue
            r = (same or free)[0]
            used.add(r.pos)
            pairs.append((s, r))
        if self.adapter:
            self.upserts(everything, received, used)
        for s in unpaired:  # the same message with its content changed: one fault
            changed = next((r for r in received if r.pos not in used and r.kind == s.kind
                            and r.mid == s.mid and s.mid != _MISSING), None)
            if changed is not None:
                used.add(changed.pos)
                self.fail("MID-P-03", f"the proxy changed the content of {s.kind} "
                          f"{s.value!r}: {_text(s)!r} arrived as {_text(changed)!r}",
                          s, changed, key=("content", s.kind))
            elif s.mid == "null" or _malformed(s) or (self.protocol >= 2 and s.mid == _MISSING):
                self.seen("MID-P-02")
                self.seen("MID-P-02/null-form")
                meaning = ("a v1 null or malformed ID means 'no ID'" if self.protocol < 2 else
                           "a v2 update without a string ID is the agent's protocol error, "
                           "to be forwarded")
                self.fail("MID-P-02", f"the proxy dropped {s.kind} {_text(s)!r}, whose "
                          f"messageId was {s.mid}: {meaning}, not 'drop the update'", s, None,
                          key="dropped")
            else:
                self.fail("MID-P-03", f"the proxy dropped {s.kind} {_text(s)!r} "
                          f"(messageId {s.mid})", s, None, key=("dropped", s.kind))
        for r in received:
            if r.pos in used:
                continue
            twin = next((s for s in sent if s.key == r.key), None)
            what = "duplicated" if twin is not None else "added"
            self.fail("MID-P-03", f"the proxy {what} {r.kind} {_text(r)!r} (messageId "
                      f"{r.mid}): the agent sent it {'once' if twin else 'never'}", twin, r,
                      key=(what, r.kind))
        for s, r in pairs:
            self.identity(s, r)
        self.order(pairs)
        self.windows(pairs, sent_loads, received_loads)

    def identity(self, s: _Update, r: _Update) -> None:
        if s.mid == _MISSING or s.mid == "null" or _malformed(s):
            if self.protocol < 2 and (s.mid == "null" or _malformed(s)):
                self.seen("MID-P-02")
                self.seen("MID-P-02/null-form")
                if isinstance(r.value, str) and r.mid != _MISSING:
                    self.fail("MID-P-02", f"the proxy turned the v1 messageId {s.mid} into the "
                              f"string {r.value!r}", s, r, key=("string", s.mid))
                elif r.mid == s.mid:
                    self.fail("MID-P-02/null-form", f"the proxy forwarded the v1 messageId "
                              f"{s.mid} as is", s, r, key="as-is")
                else:
                    self.fail("MID-P-02/null-form", f"the proxy forwarded the v1 messageId "
                              f"{s.mid} as {'omitted' if r.mid == _MISSING else r.mid} "
                              "(the same meaning)", s, r, key="as-omitted")
                return
            if self.protocol >= 2 and s.mid in ("null", _MISSING):
                self.seen("MID-P-02")
                self.seen("MID-P-02/null-form")
                if r.mid in ("null", _MISSING) and r.mid != s.mid:
                    self.fail("MID-P-02/null-form", f"the proxy forwarded the v2 messageId "
                              f"{s.mid} as {r.mid}: both are the agent's protocol error with "
                              "the same meaning, but the raw payload is not kept", s, r,
                              key=("swapped", s.mid))
                    return
            self.seen("MID-P-01")
            if r.mid != s.mid:
                what = ("added the messageId " + r.mid + " to" if s.mid == _MISSING
                        else f"changed the messageId {s.mid} to {r.mid} on")
                self.fail("MID-P-01", f"the proxy {what} {s.kind} {_text(s)!r}", s, r,
                          key="added" if s.mid == _MISSING else "repaired")
            return
        self.seen("MID-P-01")
        if r.mid != s.mid:  # one fault per way of breaking IDs, counted over the case
            if r.mid == _MISSING:
                self.fail("MID-P-01", f"the proxy dropped the messageId {s.mid} of {s.kind} "
                          f"{_text(s)!r}", s, r, key="dropped")
            else:
                self.fail("MID-P-01", f"the proxy changed the messageId {s.mid} of {s.kind} "
                          f"{_text(s)!r} to {r.mid}", s, r, key="changed")

    def order(self, pairs: list[tuple[_Update, _Update]]) -> None:
        ordered = sorted(pairs, key=lambda p: p[0].pos)
        latest: _Update | None = None  # the received update furthest along so far
        latest_sent: _Update | None = None
        for s, r in ordered:
            if latest is not None and latest_sent is not None and r.pos < latest.pos:
                same = s.mid == latest_sent.mid and s.mid != _MISSING
                self.fail("MID-P-03" if same else "MID-P-03/across-messages", (
                    f"the proxy reordered the updates of message {s.mid}" if same else
                    f"the proxy moved {s.kind} {_text(s)!r} before {latest.kind} "
                    f"{_text(latest)!r}, sent after it (different messages)"),
                    s, r, key=("order", s.mid if same else (s.mid, latest_sent.mid)))
            elif latest is None or r.pos > latest.pos:
                latest, latest_sent = r, s

    def windows(self, pairs: list[tuple[_Update, _Update]], sent_loads: list[int],
                received_loads: list[int]) -> None:
        for s, r in pairs:
            if s.window is None or s.window >= len(received_loads):
                continue
            end = received_loads[s.window]
            if end >= 0 and r.seq > end:
                self.fail("MID-P-03", f"the proxy delivered the replayed {s.kind} "
                          f"{_text(s)!r} after the load/resume response (the agent sent it "
                          "before)", s, r, key=("window", s.window))

    # -- a declared v2-to-v1 adapter -------------------------------------------
    def upserts(self, sent: list[_Update], received: list[_Update], used: set[int]) -> None:
        """Grade the v2 whole-message upserts under MID-V2-10, on the received updates
        that the chunks did not account for."""
        had_content: set[str] = set()
        for s in sent:
            if s.kind not in UPSERTS:
                if s.kind in CHUNKS and s.mid != _MISSING:
                    had_content.add(s.mid)
                continue
            self.seen("MID-V2-10")
            free = [r for r in received if r.pos not in used and r.mid == s.mid]
            as_is = next((r for r in free if r.key == s.key), None)
            content = s.update.get("content")
            blocks = content if isinstance(content, list) else []
            fanned: list[_Update] = []
            for block in blocks:
                r = next((r for r in free if r.kind == f"{s.kind}_chunk" and r not in fanned
                          and _canon(r.update.get("content")) == _canon(block)), None)
                if r is None:
                    fanned = []
                    break
                fanned.append(r)
            if fanned and s.mid in had_content:
                used.update(r.pos for r in fanned)
                self.fail("MID-V2-10", f"the adapter fanned out {s.kind} {s.value!r} into v1 "
                          "chunks after earlier chunks of that message: v1 appends, so the "
                          "content is duplicated", s, fanned[0], key="fan-out")
            elif fanned:
                used.update(r.pos for r in fanned)
            elif as_is is not None:
                used.add(as_is.pos)
            elif free and not blocks:  # expressed some other way, not dropped
                used.add(free[0].pos)
            else:
                what = ("a patch-only update" if "content" not in s.update
                        else "content after earlier chunks" if blocks
                        else f"content {_canon(content)[:20]}")
                self.fail("MID-V2-10", f"the adapter silently dropped {s.kind} {s.value!r} "
                          f"({what}), which v1 cannot express", s, None, key=("drop", s.kind))
            if blocks:
                had_content.add(s.mid)

    # -- client to agent ---------------------------------------------------------
    def prompts(self, sent: Sequence[Entry], received: Sequence[Entry]) -> None:
        ours = _requests(received, "session/prompt")
        theirs = _requests(sent, "session/prompt")
        for i, (e, params) in enumerate(theirs):
            self.seen("MID-P-04")
            given = ours[i][1] if i < len(ours) else {}
            meta, given_meta = model.as_object(params.get("_meta")), model.as_object(
                given.get("_meta"))
            added = [k for k in ID_KEYS if k in params and params[k] != given.get(k)]
            added += [f"_meta.{k}" for k in ID_KEYS if k in meta and meta[k] != given_meta.get(k)]
            if added:
                self.sink.add("MID-P-04", f"the proxy added {', '.join(added)} to "
                              "session/prompt on the way to the agent", (ours[i][0].seq,)
                              if i < len(ours) else (), {"agent_side": {"entry": e.seq}},
                              {"added": {k: params.get(k) for k in added if k in params}
                               or {k: meta.get(k[6:]) for k in added}}, 1, tuple(added))

    def initialize(self, sent: Sequence[Entry], received: Sequence[Entry]) -> None:
        ours, theirs = _requests(received, "initialize"), _requests(sent, "initialize")
        if not ours or not theirs:
            return
        self.seen("MID-P-05")
        self.seen("MID-P-05/capabilities")
        (c_entry, c_params), (a_entry, a_params) = ours[0], theirs[0]
        self._version("request", c_params, a_params, c_entry, a_entry)
        for key in ("clientCapabilities", "capabilities"):
            if not self.adapter:
                self._caps(f"the client's {key}", c_params.get(key), a_params.get(key),
                           c_entry, a_entry)
        a_resp = _response(sent, a_entry)
        c_resp = _response(received, c_entry)
        if a_resp is None or c_resp is None:
            return
        (a_e, a_result), (c_e, c_result) = a_resp, c_resp
        self._version("response", a_result, c_result, c_e, a_e)
        for key in ("agentCapabilities", "capabilities"):
            if not self.adapter:
                self._caps(f"the agent's {key}", a_result.get(key), c_result.get(key), c_e, a_e)

    def _version(self, where: str, given: dict[str, Any], forwarded: dict[str, Any],
                 c_entry: Entry, a_entry: Entry) -> None:
        if self.adapter or given.get("protocolVersion") == forwarded.get("protocolVersion"):
            return
        self.sink.add("MID-P-05", f"the proxy changed protocolVersion in the initialize "
                      f"{where} from {given.get('protocolVersion')!r} to "
                      f"{forwarded.get('protocolVersion')!r}", (c_entry.seq,),
                      {"agent_side": {"entry": a_entry.seq}},
                      {"protocolVersion": forwarded.get("protocolVersion")}, 1, ("version", where))

    def _caps(self, what: str, given: Any, forwarded: Any, c_entry: Entry,
              a_entry: Entry) -> None:
        a, b = _leaves(given), _leaves(forwarded)
        changes = {path: ("dropped" if path not in b else "added" if path not in a
                          else f"changed from {a[path]} to {b[path]}")
                   for path in sorted(set(a) | set(b)) if a.get(path) != b.get(path)}
        if changes:  # one fault per direction: the capabilities one side saw changed
            listed = "; ".join(f"{path} {how}" for path, how in changes.items())
            self.sink.add("MID-P-05/capabilities", f"the proxy changed {what}: {listed[:300]}",
                          (c_entry.seq,), {"agent_side": {"entry": a_entry.seq}},
                          {"changed": changes}, 1, what)


def _requests(entries: Sequence[Entry], method: str) -> list[tuple[Entry, dict[str, Any]]]:
    out = []
    for e in entries:
        if e.src != "client" or e.msg is None or e.stream == "harness":
            continue
        for m in _messages(e.msg):
            if isinstance(m, dict) and m.get("method") == method and "id" in m:
                out.append((e, model.as_object(m.get("params"))))
    return out


def _response(entries: Sequence[Entry], request: Entry) -> tuple[Entry, dict[str, Any]] | None:
    rid = next((m.get("id") for m in _messages(request.msg) if isinstance(m, dict)
                and m.get("method") == "initialize"), None)
    for e in entries:
        if e.src != "agent" or e.msg is None or e.seq < request.seq:
            continue
        for m in _messages(e.msg):
            if isinstance(m, dict) and model.is_response(m) and m.get("id") == rid:
                return e, model.as_object(m.get("result"))
    return None


def _leaves(value: Any, prefix: str = "") -> dict[str, str]:
    if not isinstance(value, dict):
        return {prefix or "(top)": _canon(value)} if value is not None or prefix else {}
    out: dict[str, str] = {}
    for k, v in value.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        out.update(_leaves(v, path) if isinstance(v, dict) and v else {path: _canon(v)})
    return out


def grade_proxy(sent: Iterable[Entry], received: Iterable[Entry], *, protocol: int,
                adapter: bool = False, options: Options | None = None,
                select: Iterable[str] | None = None) -> list[Finding]:
    """Grade a proxy: ``sent`` is the agent-side transcript, ``received`` the client side.
    ``protocol`` is the agent side's version; ``adapter`` declares a v2-to-v1 adapter."""
    sent_entries, received_entries = list(sent), list(received)
    chosen = [r for r in RULES if _selected(r.id, select)]
    sink = Sink({r.id: r for r in RULES}, protocol=protocol, options=options)
    grader = _Grader(sink, protocol, adapter and protocol >= 2)
    sent_updates, sent_loads = _updates(sent_entries)
    received_updates, received_loads = _updates(received_entries)
    grader.messages(sent_updates, received_updates, sent_loads, received_loads)
    grader.prompts(sent_entries, received_entries)
    grader.initialize(sent_entries, received_entries)
    if not grader.adapter:
        why = "not applicable: the proxy is not a declared v2-to-v1 adapter (--proxy-adapts)"
        sink.reasons.setdefault("MID-V2-10", (why, Reason.NO_CAPABILITY))
    return _rows(chosen, sink, {protocol}, (options or Options()).profile.name)
