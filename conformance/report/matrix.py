"""One matrix from many runs: ``report --merge A.json B.json ...``.

Each input is a run's JSON report (``--json``). The matrix has a column per run
(its target's name and version, protocols, rule profile, suite version and
catalogue revision, and its verdict on top) and a row per requirement, with a
row per sub-rule under it; a cell is the worst outcome the run gave that rule
(fail, warn, info, pass, not applicable, in that order) and links to the run's
own report (its HTML report beside the JSON one when there is one). A rule a
run did not grade at all is an empty cell, never a pass.

Runs graded against different catalogue revisions do not compare: merging them
is refused (:class:`MixedCatalogues`) unless the caller allows it, and then each
column names its revision.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.report.html_escape import esc
from conformance.report.markdown import md

WORST = ("fail", "warn", "info", "pass", "not_applicable")  # worst first
SHOWN = {"fail": "FAIL", "warn": "WARN", "info": "INFO", "pass": "pass",
         "not_applicable": "n/a"}


class MatrixError(ValueError):
    """An input that is not a run's JSON report (one line: file and reason)."""


class MixedCatalogues(MatrixError):
    """The runs were graded against different catalogue revisions."""


@dataclass
class Run:
    """One column: a run's JSON report."""

    path: Path
    target: str
    target_name: str
    target_version: str
    role: str
    protocols: list[int]
    profile: str
    suite: str
    catalogue: str
    verdict: str
    cells: dict[str, str] = field(default_factory=dict)  # rule -> worst outcome
    link: str = ""  # the run's own report, relative to the matrix
    distinct: str = ""  # added to the label when two runs have the same

    @property
    def label(self) -> str:
        from conformance.report.heading import shown_command

        name = self.target_name or shown_command(self.target)  # no machine path as a column
        return f"{name} {self.target_version}".strip() + self.distinct


def _worst(a: str | None, b: str) -> str:
    if a is None:
        return b
    return min(a, b, key=lambda o: WORST.index(o) if o in WORST else len(WORST))


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _meta(r: Run) -> list[tuple[str, str]]:
    """The column heads under the run's label."""
    return [("verdict", r.verdict.upper()), ("role", r.role),
            ("protocols", ", ".join(f"v{p}" for p in r.protocols)), ("profile", r.profile),
            ("suite", r.suite), ("catalogue", r.catalogue)]


def read_run(path: Path) -> Run:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise MatrixError(f"{path}: cannot read: {exc.strerror}") from None
    except (UnicodeDecodeError, ValueError):
        raise MatrixError(f"{path}: not a JSON report (invalid JSON)") from None
    if not isinstance(data, dict) or data.get("format") != "acp-conformance-report":
        raise MatrixError(f"{path}: not an acp-conformance JSON report (--json)")
    results = data.get("results")
    if not isinstance(results, list):
        raise MatrixError(f"{path}: the report has no 'results' list")
    info, graded, tool, summary = (_obj(data.get(k)) for k in
                                   ("target_info", "graded_against", "tool", "summary"))
    run = Run(Path(path), str(data.get("target") or ""), str(info.get("name") or ""),
              str(info.get("version") or ""), str(data.get("role") or ""),
              [p for p in _list(data.get("protocols")) if isinstance(p, int)],
              str(data.get("profile") or ""), str(graded.get("suite") or tool.get("version")
                                                  or ""),
              str(graded.get("catalogue") or "unknown"), str(summary.get("verdict") or "?"))
    for row in results:
        if not isinstance(row, dict):
            continue
        rule, outcome = row.get("requirement"), row.get("outcome")
        if isinstance(rule, str) and isinstance(outcome, str):
            run.cells[rule] = _worst(run.cells.get(rule), outcome)
            base = rule.split("/", 1)[0]
            if base != rule:
                run.cells[base] = _worst(run.cells.get(base), outcome)
    return run


@dataclass
class Matrix:
    runs: list[Run]
    rules: list[str]  # requirements, each followed by its sub-rules
    mixed: bool  # graded against more than one catalogue revision (allowed)


FAMILIES = ("MID-S", "MID-A", "MID-C", "MID-V2", "MID-P")  # the catalogue's order


def _order(rule: str) -> tuple[int, str, int, str]:
    base, _, sub = rule.partition("/")
    family, _, number = base.rpartition("-")
    rank = FAMILIES.index(family) if family in FAMILIES else len(FAMILIES)
    return (rank, family or base, int(number) if number.isdigit() else 0, sub)


def build(paths: Sequence[Path], *, allow_mixed: bool = False,
          out_dir: Path | None = None) -> Matrix:
    """The matrix of ``paths`` (MatrixError, MixedCatalogues: one line each)."""
    if not paths:
        raise MatrixError("--merge needs at least one JSON report")
    runs = [read_run(p) for p in paths]
    revisions = sorted({r.catalogue for r in runs})
    if len(revisions) > 1 and not allow_mixed:
        raise MixedCatalogues(
            "the runs were graded against different catalogue revisions ("
            + ", ".join(f"{rev}: {sum(r.catalogue == rev for r in runs)} run(s)"
                        for rev in revisions)
            + "); re-run them on one suite version, or give --allow-mixed")
    for r in runs:
        html_report = r.path.with_suffix(".html")
        own = html_report if html_report.is_file() else r.path
        r.link = (os.path.relpath(own.resolve(), out_dir.resolve()) if out_dir is not None
                  else str(own))
    labels = [r.label for r in runs]
    for r in runs:  # two columns must never look alike: the report's file tells them apart
        if labels.count(r.label) > 1:
            r.distinct = f" ({r.path.parent.name + '/' if r.path.parent.name else ''}{r.path.stem})"
    rules = sorted({rule for r in runs for rule in r.cells}, key=_order)
    return Matrix(runs, rules, len(revisions) > 1)


def _anchor(run: Run, rule: str) -> str:
    if run.link.endswith(".html"):
        return f"{run.link}#req-{rule.split('/', 1)[0]}"
    return run.link


def to_json(m: Matrix) -> dict[str, Any]:
    return {
        "format": "acp-conformance-matrix", "version": 1,
        "mixed_catalogues": m.mixed,
        "runs": [{"report": r.link, "label": r.label, "target": r.target, "name": r.target_name,
                  "version": r.target_version, "role": r.role, "protocols": r.protocols,
                  "profile": r.profile, "suite": r.suite, "catalogue": r.catalogue,
                  "verdict": r.verdict} for r in m.runs],
        "rules": [{"rule": rule, "cells": [r.cells.get(rule) for r in m.runs]}
                  for rule in m.rules],
    }


def to_markdown(m: Matrix) -> str:
    lines = ["# acp-conformance matrix", ""]
    if m.mixed:
        lines += [("**Mixed catalogue revisions** (merged with --allow-mixed): the columns "
                  "were graded against different rules."), ""]
    head = ["rule"] + [f"[{md(r.label, 60)}]({md(r.link, 300)})" for r in m.runs]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for i, (name, _) in enumerate(_meta(m.runs[0])):
        lines.append(f"| *{name}* | " + " | ".join(md(_meta(r)[i][1], 80) for r in m.runs)
                     + " |")
    for rule in m.rules:
        shown = rule if "/" not in rule else f"&nbsp;&nbsp;{rule}"
        cells = []
        for r in m.runs:
            outcome = r.cells.get(rule)
            cells.append(f"[{SHOWN.get(outcome, outcome)}]({md(_anchor(r, rule), 300)})"
                         if outcome else "")
        lines.append(f"| {shown} | " + " | ".join(cells) + " |")
    lines += ["", (f"{len(m.runs)} run(s), {len(m.rules)} rule(s). An empty cell: the run "
              "did not grade that rule.")]
    return "\n".join(lines) + "\n"


CSS = """body{font-family:system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}td.sub{padding-left:1.5em}
.o-fail{background:#f8d0d0}.o-warn{background:#fbe8b8}.o-info{background:#dde8f8}
.o-pass{background:#d8f0d8}.o-not_applicable{color:#777}a{color:inherit}"""


def to_html(m: Matrix) -> str:
    out = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<title>acp-conformance matrix</title>", f"<style>{CSS}</style></head><body>",
           "<h1>acp-conformance matrix</h1>"]
    if m.mixed:
        out.append("<p><strong>Mixed catalogue revisions</strong> (merged with --allow-mixed):"
                   " the columns were graded against different rules.</p>")
    out.append("<table><thead><tr><th>rule</th>")
    for r in m.runs:
        out.append(f'<th><a href="{html.escape(r.link, quote=True)}">{esc(r.label, 200)}</a>'
                   "</th>")
    out.append("</tr></thead><tbody>")
    for i, (name, _) in enumerate(_meta(m.runs[0])):
        out.append(f"<tr><th>{name}</th>" + "".join(
            f'<td class="o-{html.escape(r.verdict) if name == "verdict" else ""}">'
            f"{esc(_meta(r)[i][1], 200)}</td>" for r in m.runs) + "</tr>")
    for rule in m.rules:
        klass = ' class="sub"' if "/" in rule else ""
        out.append(f"<tr><td{klass}>{esc(rule)}</td>")
        for r in m.runs:
            outcome = r.cells.get(rule)
            if outcome is None:
                out.append("<td></td>")
                continue
            href = html.escape(_anchor(r, rule), quote=True)
            out.append(f'<td class="o-{html.escape(outcome)}"><a href="{href}">'
                       f"{esc(SHOWN.get(outcome, outcome))}</a></td>")
        out.append("</tr>")
    out.append(f"</tbody></table><p>{len(m.runs)} run(s), {len(m.rules)} rule(s). An empty "
               "cell: the run did not grade that rule.</p></body></html>")
    return "\n".join(out) + "\n"


__all__ = ["Matrix", "MatrixError", "MixedCatalogues", "Run", "build", "read_run", "to_html",
           "to_json", "to_markdown"]
