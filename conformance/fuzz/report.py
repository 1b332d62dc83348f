"""Console output of the fuzzer: a failure as a short replayable transcript.

One line per protocol line, the ones the finding points at marked ``>>``::

    #14 >> agent  session/update agent_message_chunk messageId=42 "Here is the "

Long transcripts show the lines around the evidence and say how many were left
out. No wall-clock times are printed, so the output of a seeded run is stable.
:func:`to_run_result` turns a fuzz run into a suite run's result, so every
report format works.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from conformance.controlstream import PING
from conformance.report.text import safe
from conformance.results import exit_status
from conformance.transcript import Entry

MAX_LINES = 40  # transcripts longer than this are cut around the evidence
CONTEXT = 3


def _text_of(content: Any) -> str:
    if isinstance(content, dict):
        if isinstance(content.get("text"), str):
            return str(content["text"])
        return f"<{content.get('type', '?')}>"
    if isinstance(content, list):
        return "".join(_text_of(c) for c in content)
    return "" if content is None else json.dumps(content)[:20]


def _quote(text: str, limit: int = 40) -> str:
    shown = text if len(text) <= limit else text[:limit] + "..."
    return json.dumps(shown, ensure_ascii=True)


def _id(value: Any) -> str:
    return _quote(value, 24) if isinstance(value, str) else json.dumps(value)[:24]


def describe_message(msg: Any) -> str:
    if not isinstance(msg, dict):
        return f"(a JSON {type(msg).__name__}, not an object)"
    method = msg.get("method")
    raw = msg.get("params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if method is None:
        rid = json.dumps(msg.get("id"))
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            return f"error answer to #{rid}: {err.get('code')} {safe(str(err.get('message')))}"
        return f"answer to #{rid}: {safe(json.dumps(msg.get('result'), ensure_ascii=True))[:80]}"
    if method == "session/update" and isinstance(params.get("update"), dict):
        u = params["update"]
        kind = str(u.get("sessionUpdate"))
        out = f"session/update {kind}"
        if "messageId" in u:
            out += f" messageId={_id(u['messageId'])}"
        if "content" in u:
            out += f" {_quote(_text_of(u['content']))}"
        elif kind == "state_update":
            out += f" {u.get('state')}" + (f" ({u['stopReason']})" if u.get("stopReason") else "")
        return out
    rid = f" #{json.dumps(msg['id'])}" if "id" in msg else ""
    out = f"{method}{rid}"
    if method == "session/prompt":
        out += f" {_quote(_text_of(params.get('prompt')))}"
        if "messageId" in params:
            out += f" messageId={_id(params['messageId'])}"
        meta = params.get("_meta")
        if isinstance(meta, dict) and "messageId" in meta:
            out += f" _meta.messageId={_id(meta['messageId'])}"
    elif method in ("session/load", "session/resume") and "replayFrom" in params:
        out += " replayFrom " + json.dumps(params["replayFrom"])
    return out


def describe_entry(e: Entry) -> str:
    if e.stream == "harness":
        data = e.data if isinstance(e.data, dict) else {}
        detail = ", ".join(f"{k}={v}" for k, v in data.items()
                           if k in ("waiting_for", "note", "step"))
        if "returncode" in data or "signal" in data:  # how it ended, in words
            ended = exit_status(data.get("returncode"), data.get("signal"))
            detail = ended + (", " + detail if detail else "")
        return f"[{e.event}{': ' + safe(detail) if detail else ''}]"
    if e.stream == "stderr":
        return f"stderr: {safe(e.raw or '')[:80]}"
    if e.error is not None:
        return f"unparsable line ({e.error}): {safe(e.raw or '')[:60]}"
    if isinstance(e.msg, list):
        return "batch [" + "; ".join(describe_message(m) for m in e.msg) + "]"
    return describe_message(e.msg)


def transcript_lines(entries: Sequence[Entry], evidence: Iterable[int] = (), *,
                     max_lines: int = MAX_LINES) -> list[str]:
    """The transcript, one line per entry; stderr and pings left out."""
    marked = set(evidence)
    pings = {(e.conn, _key(e.msg.get("id"))) for e in entries
             if e.src == "client" and isinstance(e.msg, dict) and e.msg.get("method") == PING}

    def is_ping(e: Entry) -> bool:
        msg = e.msg
        if not isinstance(msg, dict):
            return False
        if msg.get("method") == PING:
            return True
        return e.src == "agent" and "method" not in msg and (e.conn, _key(msg.get("id"))) in pings

    shown = [e for e in entries if e.stream != "stderr" and not is_ping(e)
             and not (e.stream == "harness" and e.event == "note" and e.seq not in marked)]
    keep = set(range(len(shown)))
    if len(shown) > max_lines:
        idx = [i for i, e in enumerate(shown) if e.seq in marked] or [len(shown) - 1]
        keep = {j for i in idx for j in range(i - CONTEXT, i + CONTEXT + 1)}
        keep |= set(range(min(4, len(shown))))  # the handshake
    out: list[str] = []
    skipped = 0
    for i, e in enumerate(shown):
        if i not in keep:
            skipped += 1
            continue
        if skipped:
            out.append(f"     ... {skipped} line(s) left out")
            skipped = 0
        arrow = ">>" if e.seq in marked else "  "
        who = {"client": "client", "agent": "agent ", "harness": "suite "}.get(e.src, e.src)
        out.append(f"#{e.seq:<4}{arrow} {who} {describe_entry(e)}")
    if skipped:
        out.append(f"     ... {skipped} line(s) left out")
    return out


def _key(value: Any) -> str:
    return json.dumps(value)


def indent(lines: Iterable[str], by: str = "    ") -> str:
    return "\n".join(by + line for line in lines)


def to_run_result(result: Any, options: Any, strict: bool,
                  saved: dict[int, str]) -> Any:
    """The fuzz run as a RunResult, so every report format works: one case per broken
    rule (its counterexample), and per protocol a case with what the passing runs showed."""
    from conformance import __version__
    from conformance.fuzz.regressions import failure_fingerprint
    from conformance.results import CaseResult, Finding, Outcome, Reason, RunResult

    run = RunResult(__version__, result.target, result.role, list(result.protocols),
                    options.profile.name, strict)
    for i, f in enumerate(result.failures):
        name = f"fuzz:{failure_fingerprint(f)}@v{f.protocol}"
        cr = CaseResult(name, f"fuzz counterexample for {f.requirement}", [f.requirement],
                        f.protocol, transcript_path=saved.get(i))
        cr.findings = [x.with_case(name) for x in f.findings]
        run.cases.append(cr)
    for protocol in result.protocols:
        rows = result.coverage.get(protocol, {})
        name = f"fuzz@v{protocol}"
        cr = CaseResult(name, f"{result.examples} generated run(s)", [], protocol,
                        note="" if rows else "no passing generated run on this version")
        broken = {f.requirement for f in result.failures if f.protocol == protocol}
        cr.findings = [x.with_case(name) for rid, x in sorted(rows.items())
                       if rid not in broken and x.outcome is not Outcome.FAIL]
        if not cr.findings and not rows:
            cr.findings = [Finding("FUZZ", Outcome.NOT_APPLICABLE,
                                   "not testable: " + ("; ".join(result.notes) or
                                                       "no run completed"), case=name,
                                   reason=Reason.NOT_TESTABLE)]
        run.cases.append(cr)
    return run
