"""Console summary: one row per requirement, its outcome and counts per protocol version
side by side, the worst finding under a failing row, and one count line per version.

A version the target did not support (every case of it noted "vN unsupported") is said
once in the header and gets no column, rather than a not-applicable count in every row.
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict

from conformance.report.catalogue import prose, tally
from conformance.report.text import safe
from conformance.results import SEVERITY, CaseResult, Finding, Outcome, Reason, RunResult, worst

COLOURS = {Outcome.FAIL: "31", Outcome.WARN: "33", Outcome.INFO: "36", Outcome.PASS: "32",
           Outcome.NOT_APPLICABLE: "2"}
NO_FINDING = "-"  # the rule does not apply to this version


def _colour(enabled: bool, outcome: Outcome, text: str) -> str:
    return f"\x1b[{COLOURS[outcome]}m{text}\x1b[0m" if enabled else text


def _short(text: str) -> str:
    return text.replace(Outcome.NOT_APPLICABLE.value, "n/a").replace(
        "not applicable", "n/a")  # too long for a cell


def unsupported_versions(result: RunResult) -> dict[int, str]:
    """{version: why} for each version whose every case says the target did not support it."""
    by_version: dict[int, list[CaseResult]] = defaultdict(list)
    for c in result.cases:
        by_version[c.protocol].append(c)
    return {p: cases[0].note for p, cases in sorted(by_version.items())
            if all(c.reason is Reason.VERSION_UNSUPPORTED for c in cases)}


def _header(result: RunResult, unsupported: dict[int, str]) -> list[str]:
    from conformance.report.heading import shown_command

    info = result.target_info
    reported = info.get("reported") if isinstance(info.get("reported"), dict) else None
    label = " ".join(str(info[k]) for k in ("name", "version") if info.get(k)) \
        if reported is not None else ""  # --target-name/--target-version head it
    lines = [f"acp-conformance {result.tool_version}: {result.role} "
             f"{safe(label or shown_command(result.target), 100)}",
             f"protocol v{'/v'.join(map(str, result.protocols))}, profile {result.profile}"
             + (", strict" if result.strict else "")]
    if result.repeat > 1:  # --repeat N
        unstable = len({(f.case, f.requirement) for f in result.unstable()})
        lines.append(f"each case played {result.repeat} times; "
                     + (f"{unstable} rule row{'s' if unstable != 1 else ''} varied between "
                        "runs (marked unstable)" if unstable
                        else "every rule came out the same in every run"))
    info = result.target_info
    if reported is not None:
        info = reported
    if info.get("name"):
        lines.append(f"target reports itself as {safe(info.get('name'))} "
                     f"{safe(info.get('version') or '')}".rstrip())
    for p, why in unsupported.items():
        n = sum(1 for c in result.cases if c.protocol == p)
        reason = why.split(":", 1)[1].strip() if ":" in why else why
        lines.append(f"v{p}: not supported by the target ({safe(reason)}); "
                     f"{n} case{'s' if n != 1 else ''} not testable")
    notes: dict[str, list[str]] = defaultdict(list)  # one line per distinct note
    gated = {p for p in {c.protocol for c in result.cases} if _not_applicable(result, p)}
    for c in result.cases:  # a gated version's note is its summary line: said once
        if c.note and c.protocol not in unsupported and c.protocol not in gated:
            notes[c.shown_note].append(c.case)
    for note, cases in notes.items():
        more = f" and {len(cases) - 1} more" if len(cases) > 1 else ""
        lines.append(f"  note: {cases[0]}{more}: {safe(note)}")
    return lines


def _cell(findings: list[Finding]) -> tuple[Outcome | None, str]:
    """(worst outcome, 'FAIL 6 fail 1 n/a') of one requirement in one version."""
    if not findings:
        return None, NO_FINDING
    per: dict[Outcome, int] = defaultdict(int)
    for f in findings:
        per[f.outcome] += f.faults  # a row counts faults, not their occurrences
    top = worst(per)
    return top, f"{_short(top.value).upper():<4} {_short(tally(per))}"


def _rule_versions() -> dict[str, tuple[int, ...]]:
    """The protocol versions each rule applies to: elsewhere its cell is "-", not "n/a"."""
    from conformance.checks import all_rules

    return {rid: tuple(rule.versions) for rid, rule in all_rules().items()}


def not_run(case: CaseResult) -> bool:
    """A case the run did not grade (e.g. after the first case of a version hung): every
    finding is not_applicable with the case's reason. Its note is in the header; its rows
    would say nothing."""
    return case.reason is not None and case.reason is not Reason.CUT and bool(
        case.findings) and all(f.outcome is Outcome.NOT_APPLICABLE for f in case.findings)


def _observed(findings: list[Finding]) -> bool:
    return any(f.outcome is not Outcome.NOT_APPLICABLE for f in findings)


def _where(f: Finding) -> str:
    if f.entries:
        return f" [{f.case} #{','.join(map(str, f.entries[:4]))}]"
    return f" [{f.case}]" if f.case else ""


def _rows(result: RunResult, versions: list[int]) -> dict[str, dict[int, list[Finding]]]:
    """{requirement: {version: findings}}; a rule that does not apply to a version (graded
    "applies to vN only") has no findings there, so its cell shows "-", not "n/a"."""
    rules = _rule_versions()
    rows: dict[str, dict[int, list[Finding]]] = defaultdict(lambda: {p: [] for p in versions})
    for c in result.cases:
        for f in c.findings if c.protocol in versions and not not_run(c) else ():
            if c.protocol in rules.get(f.requirement, versions) or _observed([f]):
                rows[f.requirement][c.protocol].append(f)
    return rows


LEGEND = ("legend: a cell is the rule's worst outcome in that version, then its counts;\n"
          "        n/a: not exercised by the traffic (N/A: nothing in that version did); "
          "-: does not apply")


def _failing(findings: list[Finding]) -> bool:
    return any(f.outcome in (Outcome.FAIL, Outcome.WARN) for f in findings)


def _value(value: object) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                          default=str)
    return safe(text, 160)


def _failures(result: RunResult, rows: dict[str, dict[int, list[Finding]]],
              colour: bool) -> list[str]:
    """One block per rule that failed or warned: the rule once with its fault count and the
    cases it was seen in, then its first fault's expected, actual, entries and transcript."""
    transcripts = {c.case: c.transcript_path for c in result.cases}
    lines: list[str] = []
    for req in sorted(rows, key=lambda r: (-max(SEVERITY[f.outcome] for fs in rows[r].values()
                                                 for f in fs), r)):
        bad = [f for fs in rows[req].values() for f in fs
               if f.outcome in (Outcome.FAIL, Outcome.WARN)]
        if not bad:
            continue
        top = max(SEVERITY[f.outcome] for f in bad)
        bad = [f for f in bad if SEVERITY[f.outcome] == top]
        first = next((f for f in bad if f.consequences), bad[0])  # one that lists them
        faults = sum(f.faults for f in bad)
        cases = list(dict.fromkeys(f.case for f in bad if f.case))
        seen = (f", seen in {len(cases)} case{'s' if len(cases) != 1 else ''}"
                f" ({', '.join(cases[:3])}{', ...' if len(cases) > 3 else ''})" if cases else "")
        title = f"{req}: {first.outcome.value.upper()}, {faults} fault{'s' if faults != 1 else ''}"
        lines.append(_colour(colour, first.outcome, title) + seen)
        # A fault's consequences each get a line of their own, never cut off with it.
        lines.append(f"    {safe(dataclasses.replace(first, consequences=()).shown_message)}")
        lines += [f"    then, as a consequence: {safe(c)}" for c in first.consequences]
        if first.expected is not None:
            lines.append(f"    expected:   {_value(first.expected)}")
        if first.actual is not None:
            lines.append(f"    actual:     {_value(first.actual)}")
        if first.entries:
            lines.append("    entries:    " + ", ".join(f"#{e}" for e in first.entries[:8])
                         + (f" of {first.case}" if first.case else ""))
        own = first.transcript if first.repeats is not None else None  # --repeat: its run's
        if own or transcripts.get(first.case):
            lines.append(f"    transcript: {safe(own or transcripts[first.case])}")
        if first.repeats is not None:  # --repeat: a race, told from a steady fault
            lines.append(f"    unstable:   {first.repeats.text}")
            lines += [f"      a run where it {verb}: {safe(path)}"
                      for verb, path in first.repeats.kept()]
        lines += [f"    {safe(line, 300)}" for line in first.wire]  # the lines it points at
    return lines


def console_summary(result: RunResult, *, colour: bool | None = None, verbose: bool = False,
                    show: str = "all") -> str:
    """The console text of a run. ``show="failures"`` (the command line's default) lists
    only the rules that failed or warned; ``"all"`` every rule. Either way the rules that
    failed or warned get a block in the Failures section at the end, before the counts."""
    colour = bool(colour) and not os.environ.get("NO_COLOR")
    unsupported = unsupported_versions(result)
    lines = _header(result, unsupported)
    ran = {c.protocol for c in result.cases}
    # A version with no case at all (--case picked cases of the other one) gets no column.
    versions = [p for p in sorted(set(result.protocols) | ran)
                if p not in unsupported and (p in ran or not ran)]
    rows = _rows(result, versions)
    listed = sorted(r for r in rows if show == "all" or verbose
                    or _failing([f for fs in rows[r].values() for f in fs]))
    cells = {req: {p: _cell(per[p]) for p in versions} for req, per in rows.items()}
    width = max((len(r) for r in listed), default=len("requirement"))
    widths = {p: max([len(f"v{p}")] + [len(cells[r][p][1]) for r in listed]) for p in versions}
    lines.append("")
    if listed:
        lines.append(("requirement".ljust(width) + "  "
                      + "  ".join(f"v{p}".ljust(widths[p]) for p in versions)).rstrip())
    for req in listed:
        shown = []
        for p in versions:
            top, text = cells[req][p]
            pad = " " * (widths[p] - len(text))
            shown.append((text if top is None else _colour(colour, top, text)) + pad)
        lines.append(f"{req:<{width}}  {'  '.join(shown)}".rstrip())
        if verbose:  # every version's column explained by its worst finding
            for p in versions:
                if rows[req][p]:
                    f = max(rows[req][p], key=lambda f: SEVERITY[f.outcome])
                    lines.append(f"    v{p}: {safe(f.shown_message)}{_where(f)}")
            continue
        top_finding = max((f for fs in rows[req].values() for f in fs),
                          key=lambda f: SEVERITY[f.outcome])
        if top_finding.outcome in (Outcome.FAIL, Outcome.WARN) and show == "all":
            lines.append(f"    {safe(top_finding.shown_message)}{_where(top_finding)}")
    hidden = len(rows) - len(listed)
    if hidden:
        lines.append(f"({'no rule failed or warned; ' if not listed else ''}"
                     f"{hidden} rule{'s' if hidden != 1 else ''} passed or were info or "
                     "not applicable: --show all lists them)")
    failures = _failures(result, rows, colour)
    if failures:
        lines += ["", "Failures", *failures]
    if listed:
        lines += ["", LEGEND]
    lines.append("")
    from conformance.report.coverage import counted

    for i, p in enumerate(versions):  # the one count every report gives (coverage.counted)
        counts = {o: counted(result, p)[o.value] for o in Outcome}
        lead = "summary:" if i == 0 else ""
        if p in result.unfinished:  # nothing ran to its end: no pass to count
            lines.append(f"{lead:<8} v{p} not tested: {safe(result.unfinished[p])}")
            continue
        gated = _not_applicable(result, p)
        if gated:  # e.g. a v2 agent without capabilities.session: one line, no counts
            lines.append(f"{lead:<8} v{p} not applicable: {safe(gated)}")
            continue
        lines.append(f"{lead:<8} v{p} " + ", ".join(f"{n} {prose(o)}" for o, n in counts.items()))
    if not versions:
        lines.append("summary: no protocol version was tested")
    from conformance.report.coverage import headline  # the claim of what was measured

    lines.append("verdict: " + headline(result))
    return "\n".join(lines)


def _not_applicable(result: RunResult, protocol: int) -> str:
    """Why no case of ``protocol`` applies, when every one of them ended for one missing
    capability with one note (the target advertised none of what they test); else ""."""
    cases = [c for c in result.cases if c.protocol == protocol]
    notes = {c.note for c in cases}
    if cases and len(notes) == 1 and all(c.reason is Reason.NO_CAPABILITY for c in cases):
        return notes.pop()
    return ""
