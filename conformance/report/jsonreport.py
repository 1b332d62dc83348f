"""The JSON report. Schema (version 1)::

    {"format": "acp-conformance-report", "version": 1,
     "tool": {"name", "version"}, "role": "agent"|"client", "target": str,
     "target_info": {"name", "version", "protocol"}, "protocols": [1, 2],
     "profile": str, "strict": bool,
     "results": [{"case", "requirement", "outcome", "message",
                  "evidence": {"entries": [int], "expected"?, "actual"?}}],
     "cases": [{"case", "description", "protocol", "requirements", "outcome",
                "note", "transcript"}],
     "summary": {"pass": n, "fail": n, "warn": n, "info": n, "not_applicable": n,
                 "verdict": "pass"|"fail"}}

No wall-clock times appear in it, so two runs of the same target compare equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance import TOOL_NAME
from conformance.results import RunResult
from conformance.transcript import write_atomic

FORMAT = "acp-conformance-report"


def to_json(result: RunResult) -> dict[str, Any]:
    summary: dict[str, Any] = dict(result.counts())
    summary["verdict"] = "fail" if result.failed else "pass"
    return {
        "format": FORMAT, "version": 1,
        "tool": {"name": TOOL_NAME, "version": result.tool_version},
        "role": result.role, "target": result.target, "target_info": result.target_info,
        "protocols": result.protocols, "profile": result.profile, "strict": result.strict,
        "results": [f.to_json() for f in result.all_findings()],
        "cases": [{"case": c.case, "description": c.description, "protocol": c.protocol,
                   "requirements": c.requirements, "outcome": c.outcome.value, "note": c.note,
                   "transcript": c.transcript_path} for c in result.cases],
        "summary": summary,
    }


def dumps(result: RunResult) -> str:
    # ensure_ascii keeps lone surrogates and control characters from the target valid JSON.
    return json.dumps(to_json(result), indent=2, ensure_ascii=True, default=str) + "\n"


def write_json(result: RunResult, path: Path) -> None:
    write_atomic(Path(path), dumps(result))
