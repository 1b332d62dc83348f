"""GitHub workflow annotations (``--github-annotations``): one ``::error`` per failing rule.

A CI run shows each rule that fails the job as its own annotation, as linters do: the
rule, the first case it failed in and that finding's evidence, at the file and line of
the case in its case file (where the case has one); a stale baseline entry at its line
of the baseline. At most :data:`LIMIT` annotations, then one that says how many more.
A run that fails for no rule of its own (cut, a version that never ran to its end)
gets one annotation saying why. A listed (expected) failure of a baseline gets none.

Workflow command syntax: https://docs.github.com/actions/reference/workflow-commands-for-github-actions
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from conformance.results import Finding, Outcome, RunResult

LIMIT = 10  # annotations per run; GitHub shows ten errors per step


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def error(message: str, *, title: str, file: str | None = None, line: int | None = None) -> str:
    props = []
    if file:
        props.append(f"file={_prop(file)}")
        if line:
            props.append(f"line={line}")
    props.append(f"title={_prop(title)}")
    return f"::error {','.join(props)}::{_data(message)}"


def _where(source: str | None) -> tuple[str | None, int | None]:
    """``file:line`` -> (file relative to the working folder, line); nothing for a file
    outside it (the bundled cases of an installed suite): GitHub places an annotation only
    on a file of the checked-out repository, so the annotation then names no file."""
    if not source or ":" not in source:
        return None, None
    file, _, line = source.rpartition(":")
    try:
        rel = os.path.relpath(file)
    except ValueError:  # another drive
        return None, None
    if rel.startswith(".."):
        return None, None
    return rel, int(line) if line.isdigit() else None


def _text(f: Finding, faults: int, cases: list[str]) -> str:
    lines = [f"{f.case}: {f.shown_message}"]
    if f.expected is not None:
        lines.append(f"expected: {f.expected}")
    if f.actual is not None:
        lines.append(f"actual: {f.actual}")
    lines.append(f"{faults} fault{'s' if faults != 1 else ''} in {len(cases)} "
                 f"case{'s' if len(cases) != 1 else ''}")
    if f.transcript:
        lines.append(f"transcript: {f.transcript}"
                     + (f" (acp-conformance show {f.transcript}#{f.entries[0]})"
                        if f.entries else ""))
    return "\n".join(lines + list(f.wire[:3]))


def github_annotations(result: RunResult, *, verdict: Any = None,
                       sources: Mapping[str, str] | None = None,
                       limit: int = LIMIT) -> list[str]:
    """The ``::error`` lines of a run: ``verdict`` is the baseline's (None without one),
    ``sources`` maps a case ID to its ``file:line``."""
    failing: Iterable[Finding] = (verdict.unexpected if verdict is not None else
                                  [f for f in result.all_findings() if f.outcome is Outcome.FAIL])
    rules: dict[str, list[Finding]] = {}
    for f in failing:
        rules.setdefault(f.requirement, []).append(f)
    out: list[str] = []
    for req in sorted(rules):
        fs = rules[req]
        first = fs[0]
        cases = list(dict.fromkeys(f.case for f in fs))
        file, line = _where((sources or {}).get(first.case.split("@", 1)[0]))
        out.append(error(_text(first, sum(f.faults for f in fs), cases),
                         title=f"acp-conformance {req}", file=file, line=line))
    for entry in verdict.stale if verdict is not None else ():
        file, line = _where(entry.where)
        out.append(error(f"baseline entry {entry} now passes: remove it from the baseline",
                         title=f"acp-conformance stale baseline entry {entry.requirement}",
                         file=file, line=line))
    if len(out) > limit:
        more = len(out) - limit
        out = out[:limit] + [error(
            f"{more} more failing rule(s) or stale entries not annotated ({len(rules)} "
            "failing rule(s) in all); the step summary and the reports list every one",
            title="acp-conformance")]
    failed = verdict.failed if verdict is not None else result.failed
    if failed and not out:  # failed for no rule: say why, once
        why = result.cut or "; ".join(result.unfinished.values()) or "the run failed"
        out.append(error(f"verdict fail: {why}", title="acp-conformance"))
    return out


def case_sources(cases: Iterable[Any]) -> dict[str, str]:
    """{case ID: "file:line"} of loaded cases."""
    return {c.id: str(c.source) for c in cases if getattr(c, "source", None)}

