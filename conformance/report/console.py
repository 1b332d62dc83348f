"""Console summary: per requirement, counts by outcome and the worst finding."""

from __future__ import annotations

import os
from collections import defaultdict

from conformance.report.text import safe
from conformance.results import SEVERITY, Finding, Outcome, RunResult

COLOURS = {Outcome.FAIL: "31", Outcome.WARN: "33", Outcome.INFO: "36", Outcome.PASS: "32",
           Outcome.NOT_APPLICABLE: "2"}


def _colour(enabled: bool, outcome: Outcome, text: str) -> str:
    return f"\x1b[{COLOURS[outcome]}m{text}\x1b[0m" if enabled else text


def console_summary(result: RunResult, *, colour: bool | None = None, verbose: bool = False) -> str:
    if colour is None:
        colour = False
    if os.environ.get("NO_COLOR"):
        colour = False
    lines = [f"acp-conformance {result.tool_version}: {result.role} {safe(result.target, 100)}",
             f"protocol v{'/v'.join(map(str, result.protocols))}, profile {result.profile}"
             + (", strict" if result.strict else "")]
    info = result.target_info
    if info.get("name"):
        lines.append(f"target reports itself as {safe(info.get('name'))} {safe(info.get('version') or '')}")
    for c in result.cases:
        if c.note:
            lines.append(f"  note: {c.case}: {safe(c.note)}")
    by_req: dict[str, list[Finding]] = defaultdict(list)
    for f in result.all_findings():
        by_req[f.requirement].append(f)
    lines.append("")
    width = max((len(r) for r in by_req), default=10)
    for req in sorted(by_req):
        fs = by_req[req]
        worst = max(fs, key=lambda f: SEVERITY[f.outcome])
        per: dict[Outcome, int] = defaultdict(int)
        for f in fs:
            per[f.outcome] += f.faults
        tally = " ".join(f"{n} {o.value}" for o, n in sorted(per.items(),
                                                             key=lambda kv: -SEVERITY[kv[0]]))
        label = _colour(colour, worst.outcome, f"{worst.outcome.value.upper():<14}")
        line = f"{label} {req:<{width}}  {tally}"
        if worst.outcome in (Outcome.FAIL, Outcome.WARN) or verbose:
            where = f" [{worst.case} #{','.join(map(str, worst.entries[:4]))}]" if worst.entries else (
                f" [{worst.case}]" if worst.case else "")
            line += f"\n{'':15} {safe(worst.shown_message)}{where}"
        lines.append(line)
    totals = result.counts()
    lines.append("")
    lines.append("summary: " + ", ".join(f"{totals[o.value]} {o.value}" for o in Outcome))
    lines.append("verdict: " + ("FAIL" if result.failed else "PASS"))
    return "\n".join(lines)
