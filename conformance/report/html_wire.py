"""The HTML report's wire transcript of a case: one row per line, offending lines
highlighted, and every messageId coloured so the grouping of chunks into messages
shows at a glance."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import Any

from conformance.report.html_escape import anchor, esc
from conformance.results import SEVERITY, CaseResult, Finding, Outcome
from conformance.transcript import Entry

MAX_RAW = 2000  # characters of one wire line shown
MAX_ROWS = 1500  # transcript rows shown per case (offending rows are always shown)
PALETTE = 12  # colours for message IDs, reused in order of first appearance
_MID = re.compile(r'"messageId"\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null)')


@dataclass
class _Row:
    entry: Entry
    kind: str
    mid: Any  # the messageId value, or _NONE
    has_mid: bool


_NONE = object()


def _describe(e: Entry) -> _Row:
    if e.stream == "harness":
        return _Row(e, f"harness: {e.event or 'event'}", _NONE, False)
    if e.stream == "stderr":
        return _Row(e, "stderr", _NONE, False)
    m = e.msg if e.is_message else None
    if not isinstance(m, dict):
        kind = "batch" if isinstance(m, list) else ("unparsed" if e.error else "?")
        return _Row(e, kind, _NONE, False)
    method = m.get("method")
    raw_params = m.get("params")
    params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    if isinstance(method, str):
        raw_update = params.get("update")
        update = raw_update if isinstance(raw_update, dict) else None
        if method == "session/update" and update is not None:
            kind = f"update: {update.get('sessionUpdate')}"
            if "messageId" in update:
                return _Row(e, kind, update.get("messageId"), True)
            return _Row(e, kind, _NONE, False)
        kind = method if "id" not in m else f"{method} #{m.get('id')}"
        if "messageId" in params:
            return _Row(e, kind, params.get("messageId"), True)
        return _Row(e, kind, _NONE, False)
    result = m.get("result")
    kind = f"{'error' if 'error' in m else 'result'} #{m.get('id')}"
    if isinstance(result, dict) and "messageId" in result:
        return _Row(e, kind, result.get("messageId"), True)
    return _Row(e, kind, _NONE, False)


def _direction(e: Entry) -> str:
    if e.stream == "stdin":
        return f"{e.src} &rarr;"
    if e.stream == "stdout":
        return f"&larr; {e.src}"
    return html.escape(e.stream)


def _raw_cell(e: Entry, colour: str) -> str:
    if e.stream == "harness":
        return f'<span class="muted">{esc(e.data if e.data is not None else "", MAX_RAW)}</span>'
    raw = e.raw if e.raw is not None else (f"[{len(e.raw_b64 or '') * 3 // 4} bytes, not UTF-8]")
    more = len(raw) - MAX_RAW
    shown = raw[:MAX_RAW]
    m = _MID.search(shown) if colour else None
    if m:
        body = (esc(shown[:m.start()], MAX_RAW) + f'<mark class="{colour}">'
                + esc(m.group(), MAX_RAW) + "</mark>" + esc(shown[m.end():], MAX_RAW))
    else:
        body = esc(shown, MAX_RAW)
    if more > 0:
        body += f' <span class="muted">[&hellip; {more} more chars]</span>'
    if e.error:
        body += f'<div class="err">{esc(e.error)}</div>'
    if e.fuzz:
        body += ' <span class="tag">sent on purpose (fuzz)</span>'
    return body


def transcript_table(ci: int, case: CaseResult, entries: list[Entry] | None, why: str,
                finding_anchor: dict[int, str]) -> str:
    if entries is None:
        return f'<p class="muted">{esc(why)}</p>'
    marks: dict[int, list[Finding]] = {}
    for f in case.findings:
        if f.outcome in (Outcome.FAIL, Outcome.WARN, Outcome.INFO):
            for s in f.entries:
                marks.setdefault(s, []).append(f)
    colours: dict[str, int] = {}
    show = set(range(min(len(entries), MAX_ROWS)))
    for s in marks:
        show.update(range(max(0, s - 2), s + 3))
    out = [('<table class="wire"><thead><tr><th>#</th><th>conn</th><th>dir</th><th>kind</th>'
            "<th>messageId</th><th>line</th><th>findings</th></tr></thead><tbody>")]
    skipped = 0
    for e in entries:
        if e.seq not in show:
            skipped += 1
            continue
        if skipped:
            out.append(f'<tr class="gap"><td colspan="7">&hellip; {skipped} entries not shown'
                       "</td></tr>")
            skipped = 0
        row = _describe(e)
        colour = ""
        chip = ""
        if row.has_mid:
            key = json.dumps(row.mid, sort_keys=True, default=str)
            n = colours.setdefault(key, len(colours))
            colour = f"g{n % PALETTE}"
            label = row.mid if isinstance(row.mid, str) else json.dumps(row.mid, default=str)
            bad = "" if isinstance(row.mid, str) else " odd"
            shown = esc(label, 48) if label != "" else "&quot;&quot;"
            chip = (f'<span class="chip {colour}{bad}" title="message {n + 1}: '
                    f'{esc(label, 400)}">{shown}</span>')
        fs = marks.get(e.seq, [])
        worst = max((f.outcome for f in fs), key=lambda o: SEVERITY[o], default=None)
        classes = [f"s-{e.stream}"]
        if colour:
            classes.append(f"b{colour}")
        if worst is not None:
            classes.append(f"hit-{worst.value}")
        first: dict[str, Finding] = {}
        for f in fs:  # one tag per rule, linking to its first finding on this line
            first.setdefault(f.requirement, f)
        tags = " ".join(
            f'<a class="tag {f.outcome.value}" href="#{finding_anchor.get(id(f), "")}">'
            f"{html.escape(f.requirement)}</a>" for f in first.values())
        out.append(f'<tr id="{anchor(case.case)}-e{e.seq}" class="{" ".join(classes)}">'
                   f"<td>{e.seq}</td><td>{e.conn}</td><td>{_direction(e)}</td>"
                   f"<td>{esc(row.kind, 80)}</td><td>{chip}</td>"
                   f"<td class=\"raw\">{_raw_cell(e, colour)}</td><td>{tags}</td></tr>")
    if skipped:
        out.append(f'<tr class="gap"><td colspan="7">&hellip; {skipped} entries not shown</td></tr>')
    out.append("</tbody></table>")
    legend = (f'<p class="muted">{len(colours)} distinct messageId value(s); each has its own '
              "colour (colours repeat after "
              f"{PALETTE}), so chunks of one message share a colour.</p>") if colours else ""
    return legend + "".join(out)
