"""The HTML report: one self-contained file a person can read and publish.

It holds the certification statement, the verdict per requirement with its
level and upstream sources, every finding with its evidence, and the wire
transcript of each case: offending lines highlighted, and every messageId
coloured so the grouping of chunks into messages shows at a glance.

No script, no external resource: the page loads nothing from the network
and its Content-Security-Policy forbids scripts, so a string from the target
is text even if an escaping bug let it through. Every target-supplied string
is escaped (``text.safe`` for control characters and lone surrogates, bidi
controls made visible, then HTML-escaped).

This module builds the page and its sections; ``html_escape`` makes strings
inert, ``html_wire`` draws the wire transcript of a case.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from conformance.report.catalogue import (
    NOT_ATTRIBUTABLE,
    REASON_TEXT,
    RequirementVerdict,
    Statement,
    failing_first,
    reason_tally,
    requirement_verdicts,
    source_commit,
    statement,
    tally,
    unattributable,
)
from conformance.report.coverage import counted
from conformance.report.html_escape import anchor, esc, esc_block
from conformance.report.html_wire import transcript_table
from conformance.report.text import safe
from conformance.report.traceability import TraceRow
from conformance.results import CaseResult, Finding, Outcome, RunResult
from conformance.transcript import Entry, TranscriptError, write_atomic

MAX_VALUE = 600  # characters of an expected/actual value
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
       "form-action 'none'")

TranscriptLoader = Callable[[CaseResult], "tuple[list[Entry] | None, str]"]


def load_transcript(case: CaseResult) -> tuple[list[Entry] | None, str]:
    """The case's saved transcript, or None and why it is not shown."""
    return read_transcript(case.transcript_path)


def read_transcript(path: str | None) -> tuple[list[Entry] | None, str]:
    from conformance.transcript import load

    if not path:
        return None, "no transcript was saved for this case (run with --transcripts DIR)"
    if not Path(path).exists():
        return None, f"transcript {path} no longer exists"
    try:
        return load(Path(path))[1], ""
    except TranscriptError as exc:
        return None, f"transcript unreadable: {exc}"


def _badge(outcome: Outcome | None, label: str | None = None) -> str:
    cls = outcome.value if outcome is not None else "none"
    shown = label or (outcome.value.replace("_", " ") if outcome is not None else "not run")
    if outcome is Outcome.NOT_APPLICABLE and label is None:
        shown = "not testable"
    return f'<span class="badge {cls}">{html.escape(shown)}</span>'


def _json_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return esc(text, MAX_VALUE)


# -- page parts -------------------------------------------------------------------


def _statement(st: Statement, verdict: str) -> str:
    name = " ".join(x for x in (st.target_name, st.target_version) if x) or "(not reported)"
    rows = [
        ("Target", esc(name) + f' <span class="muted">({esc(st.named_as)})</span>'),
        ("Command", f"<code>{esc(st.target, 300)}</code>"),
        ("Side tested", esc(st.role)),
        ("Protocol", esc(", ".join(f"v{p}" for p in st.protocols))),
        ("Profile", esc(st.profile) + (" (strict: SHOULD breaches fail)" if st.strict else "")),
        ("Tool", esc(st.tool)),
        ("Catalogue", f"<code>{esc(st.graded_against.get('catalogue', ''))}</code>"),
        ("Spec source", esc(st.graded_against.get("spec_source", ""))
         + (f" (schemas {esc(st.graded_against['schema_versions'])})"
            if st.graded_against.get("schema_versions") else "")),
        ("Date", esc(st.date or "not recorded")),
        *([("Repetitions", esc(st.repetitions, 300)
            + "".join(f"<br>{esc(u, 300)}" for u in st.unstable))] if st.repeat > 1 else []),
        ("MUST", _badge(Outcome.PASS if st.must_passed else Outcome.FAIL,
                        "pass" if st.must_passed else "fail") + " "
         + (esc(st.partial) + "; " if st.partial and st.must_passed else "")
         + esc(st.summary(st.must))),
        *((f"MUST exercised, v{p}", esc(st.exercised_line(p), 600)) for p in st.protocols),
        ("SHOULD", esc(st.summary(st.should))),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    cls = "pass" if verdict.startswith("PASS") else "fail"
    notes = "".join(f"<li>{esc(n)}</li>" for n in st.notes)
    return (f'<section id="statement"><h2>Certification statement '
            f'<span class="verdict {cls}">{verdict}</span></h2>'
            f'<table class="kv">{body}</table>'
            + (f"<p>Notes:</p><ul>{notes}</ul>" if notes else "")
            + '<p class="muted">MUST passes only when no MUST requirement fails; requirements '
              'that could not be exercised are listed as not testable, never as passed.</p>'
              "</section>")


def _requirements(rows: Sequence[RequirementVerdict], case_index: dict[str, int]) -> str:
    out = ['<section id="requirements"><h2>Requirements</h2>',
           ('<table class="grid"><thead><tr><th>Requirement</th><th>Level</th><th>Verdict</th>'
            "<th>Findings</th><th>Title and sources</th></tr></thead><tbody>")]
    for v in rows:
        rid = v.meta.id
        sources = " ".join(f'<a href="{html.escape(s.url, quote=True)}" rel="noreferrer">'
                           f"{html.escape(s.path)}</a>" for s in v.meta.sources)
        sub = "".join(f"<li><code>{html.escape(r)}</code> {_badge(o)}</li>"
                      for r, o in sorted(v.rules.items()))
        findings = [f for f in v.findings if f.outcome in (Outcome.FAIL, Outcome.WARN, Outcome.INFO)]
        out.append(
            f'<tr id="req-{html.escape(rid)}" class="row-{v.outcome.value if v.outcome else "none"}">'
            f"<td><code>{html.escape(rid)}</code></td><td>{html.escape(v.meta.level)}</td>"
            f"<td>{_badge(v.outcome, v.shown if v.shown == NOT_ATTRIBUTABLE else None)}</td>"
            f"<td>{html.escape(tally(v.counts))}</td>"
            f"<td>{html.escape(v.meta.title)}<div class=\"sources\">{sources}</div>"
            + (f"<div class=\"tck\">official TCK: {html.escape(', '.join(v.meta.tck))}</div>"
               if v.meta.tck else "")
            + (f"<details><summary>{len(v.rules)} sub-rule(s)</summary><ul>{sub}</ul></details>"
               if v.rules else "")
            + "</td></tr>")
        if findings:
            out.append(f'<tr class="evidence"><td></td><td colspan="4">'
                       f"{_finding_list(findings, case_index)}</td></tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _same_info(findings: Sequence[Finding]) -> dict[int, list[Finding]]:
    """INFO findings that say the same (rule and message) in several cases: {index of the
    first: all of them}, so a list shows them as one bullet with a count."""
    groups: dict[tuple[str, str], list[int]] = {}
    for j, f in enumerate(findings):
        if f.outcome is Outcome.INFO:
            groups.setdefault((f.requirement, f.shown_message), []).append(j)
    return {js[0]: [findings[j] for j in js] for js in groups.values() if len(js) > 1}


def _finding_list(findings: Iterable[Finding], case_index: dict[str, int],
                  anchors: dict[int, str] | None = None) -> str:
    items = []
    findings = list(findings)
    same = _same_info(findings) if anchors is None else {}  # a case's own list: each one
    hidden = {id(g) for first, gs in same.items() for g in gs[1:]}
    for j, f in enumerate(findings):
        if id(f) in hidden:
            continue
        if j in same:
            cases = [g.case for g in same[j]]
            links = ", ".join(f'<a href="#{anchor(c)}">{esc(c)}</a>' if c in case_index
                              else esc(c) for c in cases[:6])
            more = f" and {len(cases) - 6} more" if len(cases) > 6 else ""
            items.append(f"<li>{_badge(f.outcome)} <code>{html.escape(f.requirement)}</code> "
                         f"in {len(cases)} cases ({links}{more}): "
                         f"{esc(f.shown_message, 1000)}</li>")
            continue
        ci = case_index.get(f.case)
        where = (f'<a href="#{anchor(f.case)}">{esc(f.case)}</a>' if ci is not None
                 else esc(f.case))
        entries = " ".join(f'<a href="#{anchor(f.case)}-e{e}">#{e}</a>' if ci is not None
                           else f"#{e}"
                           for e in f.entries)
        ev = []
        if f.expected is not None:
            ev.append(f"<dt>expected</dt><dd><code>{_json_value(f.expected)}</code></dd>")
        if f.actual is not None:
            ev.append(f"<dt>actual</dt><dd><code>{_json_value(f.actual)}</code></dd>")
        if entries:
            ev.append(f"<dt>entries</dt><dd>{entries}</dd>")
        if f.repeats is not None:  # --repeat: the rule came out differently between runs
            ev.append(f"<dt>unstable</dt><dd>{esc(f.repeats.text)}"
                      + "".join(f"<br>a run where it {esc(verb)}: <code>{esc(path)}</code>"
                                for verb, path in f.repeats.kept()) + "</dd>")
        own_id = f' id="{anchors[j]}"' if anchors and j in anchors else ""
        label = NOT_ATTRIBUTABLE if unattributable(f) else None
        items.append(f"<li{own_id}>{_badge(f.outcome, label)} <code>{html.escape(f.requirement)}</code> "
                     f"in {where}: {esc(f.shown_message, 1000)}"
                     + (f'<dl class="ev">{"".join(ev)}</dl>' if ev else "") + "</li>")
    return f'<ul class="findings">{"".join(items)}</ul>'


def _cases(result: RunResult, loader: TranscriptLoader) -> str:
    out = ['<section id="cases"><h2>Cases</h2>']
    for ci, c in enumerate(result.cases):
        outcome = c.outcome
        is_open = " open" if outcome in (Outcome.FAIL, Outcome.WARN) else ""
        graded = [f for f in c.findings if f.outcome in (Outcome.FAIL, Outcome.WARN, Outcome.INFO)]
        anchors = {j: f"{anchor(c.case)}-f{j}" for j in range(len(graded))}
        finding_anchor = {id(f): anchors[j] for j, f in enumerate(graded)}
        entries, why = loader(c)
        out.append(
            f'<details id="{anchor(c.case)}" class="case"{is_open}><summary>{_badge(outcome)} '
            f"<code>{esc(c.case)}</code> {esc(c.description)}</summary>"
            f'<p class="muted">protocol v{c.protocol}; requirements '
            f"{html.escape(', '.join(c.requirements))}"
            + (f"; transcript <code>{esc(c.transcript_path)}</code>" if c.transcript_path else "")
            + "</p>"
            + ('<p class="note">'  # a failed case is never shown as not run too
               + (f"<code>{html.escape(c.reason.value)}</code> "
                  if c.reason and outcome is not Outcome.FAIL else "")
               + f"{esc(c.shown_note)}</p>" if c.note else "")
            + (_finding_list(graded, {c.case: ci}, anchors) if graded
               else '<p class="muted">no fail, warn or info finding</p>')
            + (f"<h4>Target stderr (tail)</h4><pre>{esc_block(c.stderr_tail)}</pre>"
               if c.stderr_tail.strip() else "")
            + "<h4>Wire transcript</h4>"
            + transcript_table(ci, c, entries, why, finding_anchor)
            + "</details>")
    out.append("</section>")
    return "".join(out)


def _reasons(result: RunResult) -> str:
    """The not_applicable rows by reason code: what was not graded, and why."""
    tally = reason_tally(result)
    if not tally:
        return ""
    rows = "".join(f"<tr><td><code>{html.escape(r.value)}</code></td><td>{n}</td>"
                   f"<td>{html.escape(REASON_TEXT[r])}</td><td>{esc(first, 300)}</td></tr>"
                   for r, n, first in tally)
    return ('<section id="reasons"><h2>Not graded, by reason</h2><table class="grid"><thead>'
            "<tr><th>Reason</th><th>Rows</th><th>Meaning</th><th>First row says</th></tr>"
            f"</thead><tbody>{rows}</tbody></table></section>")


def _baseline(verdict: Any) -> str:
    lines = "".join(f"<li>{esc(line)}</li>" for line in verdict.lines())
    return f'<section id="baseline"><h2>Expected-failures baseline</h2><ul>{lines}</ul></section>'


def _traceability(rows: Sequence[TraceRow]) -> str:
    # an installed suite has no fixture manifests: no column of "unknown", one line instead
    known = any(r.fixtures is not None for r in rows)
    out = ['<section id="traceability"><h2>Traceability</h2>',
           ('<table class="grid"><thead><tr><th>Requirement</th><th>Level</th><th>Status</th>'
            "<th>Cases</th><th>Rules and checkers</th>"
            + ("<th>Broken fixtures</th>" if known else "") + "</tr></thead><tbody>")]
    for r in rows:
        status = "<br>".join(f"{html.escape(p)}: {html.escape(s)}" for p, s in r.sides.items())
        cases = "<br>".join(f"{html.escape(role)}: {html.escape(', '.join(ids))}"
                            for role, ids in sorted(r.cases.items()))
        rules = html.escape(", ".join(r.rules))
        if r.checkers:
            rules += f'<div class="muted">{html.escape(", ".join(r.checkers))}</div>'
        fixtures = ("unknown" if r.fixtures is None else ", ".join(r.fixtures) or "none")
        out.append(f"<tr><td><code>{html.escape(r.meta.id)}</code></td>"
                   f"<td>{html.escape(r.meta.level)}</td><td>{status}</td><td>{cases}</td>"
                   f"<td>{rules}</td>"
                   + (f"<td>{html.escape(fixtures)}</td>" if known else "") + "</tr>")
    out.append("</tbody></table>")
    if not known:
        out.append('<p class="muted">The broken fixtures that prove each rule can fail are '
                   "in the suite's source repository (fixtures/), not in this install.</p>")
    out.append("</section>")
    return "".join(out)


def to_html(result: RunResult, *, baseline: Any = None, trace: Sequence[TraceRow] | None = None,
            transcripts: TranscriptLoader | None = None) -> str:
    st = statement(result)
    loader = transcripts or load_transcript
    case_index = {c.case: i for i, c in enumerate(result.cases)}
    title = f"acp-conformance: {st.role} {safe(st.target_name or st.target, 80)}"
    counts = counted(result)  # the console's count
    summary = ", ".join(f"{counts[o.value]} {o.value.replace('_', ' ')}" for o in Outcome)
    nav = ['<a href="#statement">statement</a>', '<a href="#requirements">requirements</a>',
           '<a href="#cases">cases</a>']
    if baseline is not None:
        nav.append('<a href="#baseline">baseline</a>')
    if trace is not None:
        nav.append('<a href="#traceability">traceability</a>')
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        (f"<header><h1>{esc(title)}</h1><p>{html.escape(summary)} findings in "
         f"{len(result.cases)} case(s). <nav>{' &middot; '.join(nav)}</nav></p></header>"),
        _statement(st, st.verdict),
    ]
    if baseline is not None:
        parts.append(_baseline(baseline))
    parts.append(_requirements(failing_first(requirement_verdicts(result)), case_index))
    parts.append(_reasons(result))
    parts.append(_cases(result, loader))
    if trace is not None:
        parts.append(_traceability(trace))
    parts.append(f'<footer class="muted">Sources link files of the upstream ACP repository at '
                 f"commit {html.escape(source_commit()[:12])}, the text the requirement catalogue "
                 "was written from. Every string from the target is shown as text.</footer>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_html(result: RunResult, path: Path, **kwargs: Any) -> None:
    write_atomic(Path(path), to_html(result, **kwargs))


_HUES = [210, 20, 120, 280, 50, 170, 330, 90, 250, 0, 190, 300]
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1400px;
padding:0 1.2em 3em;color:#1d1d1f;background:#fff}
h1{font-size:1.5em;margin:.8em 0 .2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}
code,pre,.raw{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;padding:.6em;overflow:auto;max-height:20em;white-space:pre-wrap}
table{border-collapse:collapse}td,th{padding:3px 6px;vertical-align:top;text-align:left}
table.grid td,table.grid th{border-bottom:1px solid #eee}table.kv th{padding-right:1.5em}
.muted{color:#6a737d}.note{background:#fff8c5;padding:.3em .6em}
.badge{display:inline-block;border-radius:3px;padding:0 6px;font-size:12px;font-weight:600;
text-transform:uppercase;color:#fff;background:#8a8a8a}
.badge.pass{background:#1a7f37}.badge.fail{background:#cf222e}.badge.warn{background:#9a6700}
.badge.info{background:#0969da}.badge.not_applicable,.badge.none{background:#8c959f}
.verdict{font-size:.8em;padding:2px 10px;border-radius:4px;color:#fff}
.verdict.pass{background:#1a7f37}.verdict.fail{background:#cf222e}
.sources a{margin-right:.8em;font-size:12px}
tr.evidence td{background:#fafbfc}ul.findings{margin:.2em 0;padding-left:1.2em}
ul.findings li{margin:.3em 0}dl.ev{margin:.2em 0 .4em 1em;display:grid;
grid-template-columns:max-content auto;gap:0 .8em}dl.ev dt{color:#6a737d}dl.ev dd{margin:0}
details.case{border:1px solid #ddd;border-radius:4px;margin:.6em 0;padding:.3em .7em}
details.case>summary{cursor:pointer;font-weight:600}
table.wire{width:100%;font-size:12px;table-layout:fixed}
table.wire th:nth-child(1){width:3em}table.wire th:nth-child(2){width:3em}
table.wire th:nth-child(3){width:6em}table.wire th:nth-child(4){width:14em}
table.wire th:nth-child(5){width:11em}table.wire th:nth-child(7){width:13em}
table.wire td{border-bottom:1px solid #f0f0f0;border-left:4px solid transparent}
table.wire td.raw{word-break:break-all;white-space:pre-wrap}
tr.s-stderr td{color:#8250df}tr.s-harness td{color:#6a737d;font-style:italic}
tr.hit-fail{background:#ffebe9}tr.hit-warn{background:#fff8c5}tr.hit-info{background:#ddf4ff}
tr.hit-fail td:first-child{box-shadow:inset 4px 0 #cf222e}
tr.hit-warn td:first-child{box-shadow:inset 4px 0 #bf8700}
tr:target{outline:2px solid #0969da}li:target{background:#ddf4ff}
tr.gap td{text-align:center;color:#6a737d}
.chip{display:inline-block;max-width:100%;overflow:hidden;text-overflow:ellipsis;
white-space:nowrap;border-radius:10px;padding:0 7px;font-family:ui-monospace,monospace;
font-size:11px;vertical-align:middle}.chip.odd{outline:2px dashed #cf222e}
mark{border-radius:2px;padding:0 1px}
.tag{display:inline-block;font-size:11px;border-radius:3px;padding:0 4px;margin:1px;
background:#eee;color:#1d1d1f;text-decoration:none}
.tag.fail{background:#cf222e;color:#fff}.tag.warn{background:#bf8700;color:#fff}
.tag.info{background:#0969da;color:#fff}.err{color:#cf222e}
""" + "".join(f".g{i}{{background:hsl({h},70%,85%);color:#1d1d1f}}"
              f"tr.bg{i} td:nth-child(5){{border-left-color:hsl({h},60%,50%)}}"
              for i, h in enumerate(_HUES))

