"""Markdown: a CI step summary and the certification statement.

The statement names the protocol versions, profile, tool version, the target
as it reported itself in ``initialize``, the MUST results (pass only when no
MUST requirement fails), the SHOULD results and the date of the run. It is
built from a RunResult alone, so ``acp-conformance report --from out.json
--markdown x.md`` reproduces it from the JSON report byte for byte.

Target-supplied strings are escaped for Markdown and for the HTML that
Markdown renderers pass through, so they show as text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.report.catalogue import (
    REASON_TEXT,
    RequirementVerdict,
    Statement,
    failing_first,
    prose,
    reason_tally,
    requirement_verdicts,
    source_commit,
    statement,
)
from conformance.report.coverage import counted, say
from conformance.report.text import safe
from conformance.report.traceability import TraceRow
from conformance.results import SEVERITY, Outcome, RunResult
from conformance.transcript import write_atomic

MAX_ROWS = 60  # findings listed in the summary; the JSON report has them all
_BIDI = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SPECIAL = re.compile(r"([\\`*_\[\]|~])")  # inline markup; "<", ">" and "&" are escaped as HTML


def md(value: Any, limit: int = 200) -> str:
    """A value as inert Markdown text on one line (safe in a table cell)."""
    text = _BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", safe(value, limit))
    return _SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def _rows(rows: Sequence[RequirementVerdict]) -> list[str]:
    out = ["| Requirement | Level | Result | Findings | Title |", "|---|---|---|---|---|"]
    for v in failing_first(rows):
        result = v.shown.upper() if v.outcome in (Outcome.FAIL, Outcome.WARN) else v.shown
        tally = ", ".join(f"{n} {prose(o)}" for o, n in sorted(
            v.counts.items(), key=lambda kv: -SEVERITY[kv[0]]))
        tck = f" (official TCK: {md(', '.join(v.meta.tck))})" if v.meta.tck else ""
        out.append(f"| `{v.meta.id}` | {v.meta.level} | {result} | {tally or '-'} | "
                   f"{md(v.meta.title)}{tck} |")
    return out


def _must(st: Statement) -> str:
    """The MUST row: PASS only with every MUST exercised (else partial), or FAIL."""
    return say(not st.must_passed, st.partial)


def certification_statement(st: Statement) -> str:
    name = " ".join(x for x in (st.target_name, st.target_version) if x)
    must = st.summary(st.must)
    lines = [
        "## Certification statement",
        "",
        "| | |",
        "|---|---|",
        f"| Verdict | **{st.verdict}** |",
        f"| Target | {md(name) if name else 'not reported'} "
        + ("(as reported in `initialize`) |" if st.reported is None else f"({md(st.named_as)}) |"),
        f"| Command | {md(st.target, 300)} |",
        f"| Side tested | {md(st.role)} |",
        f"| Protocol | {', '.join(f'v{p}' for p in st.protocols)} |",
        f"| Profile | {md(st.profile)}{' (strict: SHOULD breaches fail)' if st.strict else ''} |",
        f"| Tool | {md(st.tool)} |",
        f"| Catalogue | {md(st.graded_against.get('catalogue'))} |",
        f"| Spec source | {md(st.graded_against.get('spec_source'), 300)}"
        + (f" (schemas {md(st.graded_against['schema_versions'])})"
           if st.graded_against.get("schema_versions") else "") + " |",
        f"| MUST requirements | **{_must(st)}**: {must} |",
        *(f"| MUST requirements exercised, v{p} | {md(st.exercised_line(p), 600)} |"
          for p in st.protocols),
        f"| SHOULD requirements | {st.summary(st.should)} |",
        f"| Date | {md(st.date) if st.date else 'not recorded'} |",
        *([f"| Repetitions | {md(st.repetitions, 300)} |"] if st.repeat > 1 else []),
        "",
        ("MUST passes only when no MUST requirement fails. A requirement that could not be "
         "exercised is listed as *not testable*, one no selected case graded as *not run*, "
         "and one the cases cover without a rule of its own as *no direct check*; none of "
         "these counts as passed."),
        "",
        "### MUST requirements",
        "",
        *_rows(st.must),
        "",
        "### SHOULD requirements",
        "",
        *_rows(st.should),
    ]
    if st.unstable:  # --repeat: the rules a race decided
        lines += ["", "### Unstable between repetitions", ""] + [
            f"- {md(n, 300)}" for n in st.unstable]
    if st.notes:
        lines += ["", "### Notes", ""] + [f"- {md(n, 300)}" for n in st.notes]
    return "\n".join(lines)


def _findings(result: RunResult) -> list[str]:
    bad = [f for f in result.all_findings() if f.outcome in (Outcome.FAIL, Outcome.WARN)]
    if not bad:
        return ["No fail or warn finding."]
    bad.sort(key=lambda f: -SEVERITY[f.outcome])
    out = ["| Outcome | Requirement | Case | Finding | Evidence |", "|---|---|---|---|---|"]
    for f in bad[:MAX_ROWS]:
        ev = []
        if f.entries:
            ev.append("entries " + ", ".join(f"#{e}" for e in f.entries[:8]))
        if f.expected is not None:
            ev.append(f"expected {md(f.expected, 80)}")
        if f.actual is not None:
            ev.append(f"actual {md(f.actual, 80)}")
        if f.repeats is not None:  # --repeat: where to see each outcome
            ev += [f"a run where it {verb}: `{md(path, 200)}`" for verb, path in f.repeats.kept()]
        out.append(f"| {f.outcome.value.upper()} | `{f.requirement}` | {md(f.case)} | "
                   f"{md(f.shown_message, 300)} | {'; '.join(ev) or '-'} |")
    if len(bad) > MAX_ROWS:
        out.append("")
        out.append(f"{len(bad) - MAX_ROWS} more fail/warn findings are in the JSON report.")
    return out


def _traceability(rows: Sequence[TraceRow]) -> list[str]:
    known = any(r.fixtures is not None for r in rows)  # an installed suite has no manifests
    out = [("<details><summary>Traceability: every catalogue requirement, its cases, "
            "checkers and broken fixtures</summary>"), "",
           "| Requirement | Level | Status | Cases | Checkers |"
           + (" Broken fixtures |" if known else ""),
           "|---|---|---|---|---|" + ("---|" if known else "")]
    for r in rows:
        status = "; ".join(f"{p}: {md(s, 200)}" for p, s in r.sides.items())
        cases = "; ".join(f"{role}: {', '.join(ids)}" for role, ids in sorted(r.cases.items()))
        fixtures = ("unknown" if r.fixtures is None else ", ".join(r.fixtures) or "none")
        out.append(f"| `{r.meta.id}` | {r.meta.level} | {status} | {md(cases, 400) or '-'} | "
                   f"{md(', '.join(r.checkers), 300) or '-'} |"
                   + (f" {md(fixtures, 400)} |" if known else ""))
    if not known:
        out += ["", "The broken fixtures that prove each rule can fail are in the suite's "
                "source repository (fixtures/), not in this install."]
    out += ["", f"Sources: files of the upstream ACP repository at commit {source_commit()[:12]}.",
            "", "</details>"]
    return out


def to_markdown(result: RunResult, *, baseline: Any = None,
                trace: Sequence[TraceRow] | None = None) -> str:
    st = statement(result)
    counts = counted(result)  # the console's count
    name = st.target_name or st.target
    lines = [f"# acp-conformance: {md(result.role)} {md(name, 100)}", "",
             f"**{st.verdict}**: " + ", ".join(f"{counts[o.value]} {o.value.replace('_', ' ')}"
                                               for o in Outcome)
             + f" findings in {len(result.cases)} case(s).", "",
             certification_statement(st), "", "## Fail and warn findings", "",
             *_findings(result)]
    tally = reason_tally(result)
    if tally:
        lines += ["", "## Not graded, by reason", "",
                  "| Reason | Rows | Meaning | First row says |", "|---|---|---|---|"]
        lines += [f"| `{r.value}` | {n} | {REASON_TEXT[r]} | {md(first, 150)} |"
                  for r, n, first in tally]
    if baseline is not None:
        lines += ["", "## Expected-failures baseline", ""]
        lines += [f"- {md(line, 300)}" for line in baseline.lines()]
    others = [v for v in requirement_verdicts(result)
              if not v.meta.is_must and not v.meta.is_should]
    if others:
        lines += ["", "## Other requirements (MAY, informative: recorded, never failing)", "",
                  *_rows(others)]
    if trace is not None:
        lines += ["", *_traceability(trace)]
    return "\n".join(lines) + "\n"


def write_markdown(result: RunResult, path: Path, **kwargs: Any) -> None:
    write_atomic(Path(path), to_markdown(result, **kwargs))
