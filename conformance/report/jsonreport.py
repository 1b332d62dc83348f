"""The JSON report. Schema (version 1)::

    {"format": "acp-conformance-report", "version": 1,
     "tool": {"name", "version"}, "role": "agent"|"client", "target": str,
     "target_info": {"name", "version", "protocol", "reported"?: {"name", "version"}},
     "protocols": [1, 2],
     "profile": str, "strict": bool,
     "results": [{"case", "requirement", "outcome", "message",
                  "evidence": {"entries": [int], "expected"?, "actual"?,
                               "transcript"?: str, "lines"?: [str]},
                  "reason"?: code, "occurrences"?: n, "faults"?: n}],
     "cases": [{"case", "description", "protocol", "requirements", "outcome",
                "note", "reason"?: code, "cut"?: str, "transcript", "stderr_tail"}],
     "summary": {"pass": n, "fail": n, "warn": n, "info": n, "not_applicable": n,
                 "verdict": "pass"|"fail"|"interrupted", "headline": str, "partial": bool},
     "graded_against": {"catalogue", "spec_source", "schema_versions", "suite"},
     "coverage": {"v1": {"exercised": n, "musts": n, "not_exercised": [id],
                         "not_advertised": [id], "version_unsupported"?: true}},
     "tck"?: {"MID-A-02": ["ACP-PATCH-203"], ...},
     "date"?: "YYYY-MM-DD", "cut"?: str, "unfinished"?: {"1": str},
     "interrupted"?: "SIGTERM"}

``reason`` (on a not_applicable row, and on a case that was not graded or was cut)
is a code from a fixed vocabulary (``conformance.results.Reason``: not_testable,
not_run, not_attributable, version_unsupported, allowed_by_profile, no_capability,
excluded_by_case, cut); read it, never the message's wording.

A result row is one fault: ``occurrences`` (when more than 1) says how often the
transcript showed it, and ``evidence.entries`` holds the first few of them. A row
that counts the faults of a rule past the few listed in full says how many in
``faults``. Summary counts are faults. ``tck`` maps each requirement the results
name to the official ACP Test Compatibility Kit's requirement IDs for the same
requirement, where it has one (as the Markdown and HTML reports and ``list
--traceability`` show them); it maps requirements, not sub-rules, as the
register does.

No wall-clock times appear in it: the optional top-level ``date`` (the day of
the run, for the certification statement) is the only date, and it is outside
``results``, so two runs of the same target compare equal apart from it (and
from what the target itself varies, such as the session IDs in ``evidence.lines``).
``graded_against`` names the register's revision (``catalogue``), the profile's
spec source and schema versions, and the suite's version, so two reports can be
compared. ``summary.headline`` is the verdict as the statement says it: ``PASS,
partial: N of M MUST requirements exercised`` when a MUST of the tested side was not
exercised (``partial`` true); ``coverage`` gives those counts per version
(docs/grading.md). ``target_info`` is the target as it described itself in ``initialize``; with
``--target-name`` / ``--target-version`` its ``name`` and ``version`` are the given ones
and ``reported`` holds what ``initialize`` said.
``interrupted`` names the signal that stopped the run (SIGINT,
SIGTERM): the verdict is then ``interrupted`` (never a pass), the cases graded before
it are kept and the rest are listed as not run (reason not_run, ``cut`` the signal).
``cut`` says why a run ended before its plan (``--deadline``); ``unfinished`` names
each version in which cases were played but none ran to its end (the run fails).
A failing or warning row's ``evidence`` carries its case's ``transcript`` (when
one was kept) and ``lines``: the wire lines of its entries, as
``conformance.report.evidence`` writes them (``#7 >> agent {...}``; capped, masked).
``from_json`` reads the file back into a RunResult, so every other report can
be rebuilt from it (``acp-conformance report --from FILE``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance import TOOL_NAME
from conformance.report.catalogue import graded_against, requirements
from conformance.results import CaseResult, Finding, Outcome, Reason, Repeats, RunResult
from conformance.transcript import write_atomic

FORMAT = "acp-conformance-report"


class ReportFormatError(Exception):
    """A JSON report that cannot be read back: one line naming the file."""


def to_json(result: RunResult) -> dict[str, Any]:
    from conformance.report.coverage import counted, coverage, headline

    summary: dict[str, Any] = dict(counted(result))  # the console's count
    summary["verdict"] = ("interrupted" if result.interrupted else
                          "fail" if result.failed else "pass")

    summary["headline"] = headline(result)  # "PASS, partial: ..." when MUSTs went unexercised
    summary["partial"] = summary["headline"].startswith("PASS, partial")
    findings = result.all_findings()
    out = {
        "format": FORMAT, "version": 1,
        "tool": {"name": TOOL_NAME, "version": result.tool_version},
        "role": result.role, "target": result.target, "target_info": result.target_info,
        "protocols": result.protocols, "profile": result.profile, "strict": result.strict,
        "results": [f.to_json() for f in findings],
        "cases": [case_to_json(c) for c in result.cases],
        "summary": summary,
        "graded_against": graded_against(result),
        "coverage": {f"v{p}": c for p, c in coverage(result).items()},
    }
    tck = tck_ids(findings)
    if tck:
        out["tck"] = tck
    if result.date:
        out["date"] = result.date
    if result.cut:
        out["cut"] = result.cut
    if result.interrupted:
        out["interrupted"] = result.interrupted
    if result.unfinished:
        out["unfinished"] = {str(p): why for p, why in sorted(result.unfinished.items())}
    if result.fuzz:
        out["fuzz"] = result.fuzz
    if result.repeat > 1:  # --repeat N: what the verdict rests on
        out["repeat"] = result.repeat
        summary["unstable"] = len({(f.case, f.requirement) for f in result.unstable()})
    return out


def tck_ids(findings: list[Finding]) -> dict[str, list[str]]:
    """The official TCK's IDs for each requirement the findings name, in catalogue order."""
    named = {f.base_requirement for f in findings}
    return {rid: list(meta.tck) for rid, meta in requirements().items()
            if rid in named and meta.tck}


def case_to_json(c: CaseResult) -> dict[str, Any]:
    out: dict[str, Any] = {"case": c.case, "description": c.description, "protocol": c.protocol,
                           "requirements": c.requirements, "outcome": c.outcome.value,
                           "note": c.note}
    if c.reason is not None:
        out["reason"] = c.reason.value
    if c.cut:
        out["cut"] = c.cut
    if c.aborted:
        out["aborted"] = True
    out.update({"transcript": c.transcript_path, "stderr_tail": c.stderr_tail})
    if len(c.runs) > 1:  # --repeat N: each repetition's transcript, in order
        out["runs"] = list(c.runs)
    return out


def _reason(value: Any) -> Reason | None:
    """A reason code read back; one this version does not know reads as not_testable."""
    if not value:
        return None
    try:
        return Reason(value)
    except ValueError:
        return Reason.NOT_TESTABLE


def case_from_json(d: dict[str, Any], results: list[dict[str, Any]]) -> CaseResult:
    """One case entry and its findings (the ``results`` rows naming it) -> CaseResult."""
    cr = CaseResult(str(d["case"]), str(d.get("description", "")),
                    [str(r) for r in d.get("requirements", [])], int(d.get("protocol", 1)),
                    transcript_path=d.get("transcript"), stderr_tail=str(d.get("stderr_tail") or ""),
                    note=str(d.get("note") or ""), reason=_reason(d.get("reason")),
                    cut=str(d.get("cut") or ""), aborted=d.get("aborted") is True,
                    runs=[None if p is None else str(p) for p in d.get("runs") or ()])
    for r in results:
        ev = r.get("evidence") or {}
        cr.findings.append(Finding(str(r["requirement"]), Outcome(r["outcome"]), str(r["message"]),
                                   ev.get("expected"), ev.get("actual"),
                                   tuple(int(e) for e in ev.get("entries", [])), cr.case,
                                   int(r.get("occurrences", 1)), int(r.get("faults", 1)),
                                   _reason(r.get("reason")),
                                   tuple(str(x) for x in r.get("consequences") or ()),
                                   ev.get("transcript") or None,
                                   tuple(str(x) for x in ev.get("lines") or ()),
                                   Repeats.from_json(r.get("repeats")),
                                   str(r.get("timer") or "")))
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
                           date=data.get("date"), cut=str(data.get("cut") or ""),
                           interrupted=str(data.get("interrupted") or ""),
                           unfinished={int(p): str(w) for p, w in
                                       (data.get("unfinished") or {}).items()},
                           catalogue=str((data.get("graded_against") or {}).get("catalogue")
                                         or ""), repeat=int(data.get("repeat") or 1))
        result.cases = [case_from_json(c, by_case.get(str(c["case"]), [])) for c in data["cases"]]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a value of another type
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
