"""JUnit XML: one testcase per case x requirement row, named by requirement ID."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from conformance.report.evidence import evidence_text
from conformance.report.text import xml_safe
from conformance.results import SEVERITY, Finding, Outcome, RunResult
from conformance.transcript import write_atomic

EVIDENCE_OF = 2  # findings of a row whose transcript and wire lines the body carries
BODY_LIMIT = 16000  # characters of a failure body (the evidence of two findings fits)


def to_xml(result: RunResult) -> str:
    suites = ET.Element("testsuites", name="acp-conformance")
    _run_properties(suites, result)
    by_case: dict[str, list[Finding]] = defaultdict(list)
    for f in result.all_findings():
        by_case[f.case].append(f)
    for c in result.cases:
        suite = ET.SubElement(suites, "testsuite", name=xml_safe(c.case))
        if c.reason is not None:  # why the case was not graded, or was cut
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", name="reason", value=c.reason.value)
        rows: dict[str, list[Finding]] = defaultdict(list)
        for f in by_case.get(c.case, []):
            rows[f.requirement].append(f)
        failures = skipped = 0
        for req, fs in rows.items():
            worst = max(fs, key=lambda f: SEVERITY[f.outcome])
            tc = ET.SubElement(suite, "testcase", classname=xml_safe(c.case), name=xml_safe(req))
            text = "\n".join(
                f"[{f.outcome.value}] {f.shown_message} entries={list(f.entries)}"
                + (f" expected={f.expected!r}" if f.expected is not None else "")
                + (f" actual={f.actual!r}" if f.actual is not None else "")
                + "".join(f"\n  {line}" for line in evidence_text(f) if i < EVIDENCE_OF)
                for i, f in enumerate(fs))
            if worst.outcome is Outcome.FAIL:
                failures += 1
                el = ET.SubElement(tc, "failure", message=xml_safe(worst.shown_message, 500))
                el.text = xml_safe(text, BODY_LIMIT)
            elif worst.outcome is Outcome.NOT_APPLICABLE:
                skipped += 1
                if worst.reason is not None:  # the code, for a consumer that must not parse
                    props = ET.SubElement(tc, "properties")
                    ET.SubElement(props, "property", name="reason", value=worst.reason.value)
                ET.SubElement(tc, "skipped", message=xml_safe(worst.message, 500))
            elif worst.outcome in (Outcome.WARN, Outcome.INFO):
                out = ET.SubElement(tc, "system-out")
                out.text = xml_safe(text, BODY_LIMIT)
        suite.set("tests", str(len(rows)))
        suite.set("failures", str(failures))
        suite.set("skipped", str(skipped))
        if c.stderr_tail and failures:
            err = ET.SubElement(suite, "system-err")
            err.text = xml_safe(c.stderr_tail)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _run_properties(suites: ET.Element, result: RunResult) -> None:
    """The run's verdict and MUST coverage, as properties of a first, empty testsuite."""
    from conformance.report.coverage import coverage, headline

    run = ET.SubElement(suites, "testsuite", name="acp-conformance", tests="0", failures="0",
                        skipped="0")
    props = ET.SubElement(run, "properties")
    ET.SubElement(props, "property", name="verdict",
                  value="interrupted" if result.interrupted else
                  "fail" if result.failed else "pass")
    if result.interrupted:
        ET.SubElement(props, "property", name="interrupted", value=result.interrupted)
    ET.SubElement(props, "property", name="headline", value=xml_safe(headline(result)))
    if result.repeat > 1:  # --repeat N: what the verdict rests on, and the rules that varied
        ET.SubElement(props, "property", name="repeat", value=str(result.repeat))
        ET.SubElement(props, "property", name="unstable",
                      value=str(len({(f.case, f.requirement) for f in result.unstable()})))
    for p, c in coverage(result).items():
        ET.SubElement(props, "property", name=f"coverage.v{p}",
                      value=f"{c['exercised']} of {c['musts']} MUST requirements exercised")


def write_junit(result: RunResult, path: Path) -> None:
    write_atomic(Path(path), to_xml(result))
