"""The JSON report. Schema (version 1)::

    {"format": "acp-conformance-report", "version": 1,
     "tool": {"name", "version"}, "role": "agent"|"client", "target": str,
     "target_info": {"name", "version", "protocol"}, "protocols": [1, 2],
     "profile": str, "strict": bool,
     "results": [{"case", "requirement", "outcome", "message",
                  "evidence": {"entries": [int], "expected"?, "actual"?},
                  "occurrences"?: n, "faults"?: n}],
     "cases": [{"case", "description", "protocol", "requirements", "outcome",
                "note", "transcript", "stderr_tail"}],
     "summary": {"pass": n, "fail": n, "warn": n, "info": n, "not_applicable": n,
                 "verdict": "pass"|"fail"},
     "date"?: "YYYY-MM-DD", "cut"?: str}

A result row is one fault: ``occurrences`` (when more than 1) says how often the
transcript showed it, and ``evidence.entries`` holds the first few of them. A row
that counts the faults of a rule past the few listed in full says how many in
``faults``. Summary counts are faults.

No wall-clock times appear in it: the optional top-level ``date`` (the day of
the run, for the certification statement) is the only date, and it is outside
``results``, so two runs of the same target compare equal apart from it.
``cut`` says why a run ended before its plan (``--deadline``).
``from_json`` reads the file back into a RunResult, so every other report can
be rebuilt from it (``acp-conformance report --from FILE``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance import TOOL_NAME
from conformance.results import CaseResult, Finding, Outcome, RunResult
from conformance.transcript import write_atomic

FORMAT = "acp-conformance-report"


class ReportFormatError(Exception):
    """A JSON report that cannot be read back: one line naming the file."""


def to_json(result: RunResult) -> dict[str, Any]:
    summary: dict[str, Any] = dict(result.counts())
    summary["verdict"] = "fail" if result.failed else "pass"
    out = {
        "format": FORMAT, "version": 1,
        "tool": {"name": TOOL_NAME, "version": result.tool_version},
        "role": result.role, "target": result.target, "target_info": result.target_info,
        "protocols": result.protocols, "profile": result.profile, "strict": result.strict,
        "results": [f.to_json() for f in result.all_findings()],
        "cases": [case_to_json(c) for c in result.cases],
        "summary": summary,
    }
    if result.date:
        out["date"] = result.date
    if result.cut:
        out["cut"] = result.cut
    return out


def case_to_json(c: CaseResult) -> dict[str, Any]:
    return {"case": c.case, "description": c.description, "protocol": c.protocol,
            "requirements": c.requirements, "outcome": c.outcome.value, "note": c.note,
            "transcript": c.transcript_path, "stderr_tail": c.stderr_tail}


def case_from_json(d: dict[str, Any], results: list[dict[str, Any]]) -> CaseResult:
    """One case entry and its findings (the ``results`` rows naming it) -> CaseResult."""
    cr = CaseResult(str(d["case"]), str(d.get("description", "")),
                    [str(r) for r in d.get("requirements", [])], int(d.get("protocol", 1)),
                    transcript_path=d.get("transcript"), stderr_tail=str(d.get("stderr_tail") or ""),
                    note=str(d.get("note") or ""))
    for r in results:
        ev = r.get("evidence") or {}
        cr.findings.append(Finding(str(r["requirement"]), Outcome(r["outcome"]), str(r["message"]),
                                   ev.get("expected"), ev.get("actual"),
                                   tuple(int(e) for e in ev.get("entries", [])), cr.case,
                                   int(r.get("occurrences", 1)), int(r.get("faults", 1))))
    return cr


def from_json(data: Any, name: str = "report") -> RunResult:
    """A parsed JSON report -> RunResult (findings, cases, target, date)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReportFormatError(f"{name}: not an {FORMAT} JSON file")
    if data.get("version") != 1:
        raise ReportFormatError(f"{name}: report version {data.get('version')!r} is not supported")
    try:
        by_case: dict[str, list[dict[str, Any]]] = {}
        for r in data["results"]:
            by_case.setdefault(str(r["case"]), []).append(r)
        result = RunResult(str(data["tool"]["version"]), str(data["target"]), str(data["role"]),
                           [int(p) for p in data["protocols"]], str(data["profile"]),
                           bool(data["strict"]), target_info=dict(data.get("target_info") or {}),
                           date=data.get("date"), cut=str(data.get("cut") or ""))
        result.cases = [case_from_json(c, by_case.get(str(c["case"]), [])) for c in data["cases"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportFormatError(f"{name}: malformed report ({type(exc).__name__}: {exc})") from None
    return result


def read_json(path: Path) -> RunResult:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportFormatError(f"{path}: cannot read report: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportFormatError(f"{path}: report is not JSON ({exc})") from None
    return from_json(data, str(path))


def dumps(result: RunResult) -> str:
    # ensure_ascii keeps lone surrogates and control characters from the target valid JSON.
    return json.dumps(to_json(result), indent=2, ensure_ascii=True, default=str) + "\n"


def write_json(result: RunResult, path: Path) -> None:
    write_atomic(Path(path), dumps(result))
