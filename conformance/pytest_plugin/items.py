"""The suite's cases as pytest items: one per case and protocol version, in plan order."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conformance.pytest_plugin import workers
from conformance.pytest_plugin.state import STATE

if TYPE_CHECKING:
    from conformance.cases import Case
    from conformance.results import CaseResult, Finding


class AcpSuite(pytest.Collector):
    """The suite's cases for one target, in the order a CLI run executes them."""

    def collect(self) -> list[pytest.Item]:
        state = self.config.stash[STATE]
        return [AcpCase.from_parent(self, name=f"{case.id}[v{protocol}]", case=case,
                                    protocol=protocol, order=i)
                for i, (protocol, case) in enumerate(state.plan)]


class CaseFailed(Exception):
    """A case with fails the baseline does not list, or with stale baseline entries."""

    def __init__(self, result: CaseResult, unexpected: Sequence[Finding],
                 stale: Sequence[Any]) -> None:
        super().__init__(result.case)
        self.result = result
        self.unexpected = list(unexpected)
        self.stale = list(stale)


def describe_failure(exc: CaseFailed) -> str:
    from conformance.report.text import safe

    cr = exc.result
    lines = [f"{cr.case}: {cr.description}"]
    if exc.unexpected:
        lines.append(f"{len(exc.unexpected)} fail finding(s):")
    for f in exc.unexpected:
        lines.append(f"  FAIL {f.requirement}: {safe(f.shown_message, 300)}")
        evidence = []
        if f.entries:
            evidence.append("entries " + ", ".join(f"#{e}" for e in f.entries))
        if f.expected is not None:
            evidence.append(f"expected {safe(f.expected, 120)}")
        if f.actual is not None:
            evidence.append(f"actual {safe(f.actual, 120)}")
        if evidence:
            lines.append(f"       {'; '.join(evidence)}")
    for e in exc.stale:
        lines.append(f"  STALE baseline entry {e} ({e.where}): it no longer fails; remove it")
    if cr.note:
        lines.append(f"note: {safe(cr.note, 300)}")
    lines.append(f"transcript: {cr.transcript_path or '(not saved)'}")
    if cr.stderr_tail.strip():
        tail = cr.stderr_tail.strip("\n").split("\n")[-20:]
        lines.append("target stderr (tail):")
        lines.extend(f"  {safe(line, 300)}" for line in tail)
    return "\n".join(lines)


def describe_agent_behind(cr: CaseResult) -> str:
    """The fail and warn findings of the real agent behind a proxy, one line each ("")."""
    from conformance.report.text import safe
    from conformance.results import Outcome

    return "\n".join(f"{f.outcome.value.upper()} {f.requirement}: {safe(f.shown_message, 300)}"
                     for f in cr.findings if f.outcome in (Outcome.FAIL, Outcome.WARN))


class AcpCase(pytest.Item):
    """One case over one protocol version against the target."""

    def __init__(self, *, case: Case, protocol: int, order: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.protocol = protocol
        self.order = order
        self.result: CaseResult | None = None
        self.agent_result: CaseResult | None = None  # the real agent's, behind a proxy
        self.add_marker("acp")
        self.add_marker(f"acp_v{protocol}")
        self.extra_keyword_matches.update(case.requirements)  # -k MID-A-07

    def runtest(self) -> None:
        """Report the case as the run engine decided it (``conformance.engine``): played in
        plan order, or not run with its reason; a case that did not run to its end fails
        when the engine says its version fails the run, and is skipped only when not."""
        from conformance.results import Outcome, Reason

        state = self.config.stash[STATE]
        wanted = {it.order for it in self.session.items if isinstance(it, AcpCase)}
        engine = state.engine_for(self.config, wanted)
        state.playing = True  # a signal now cuts the case and grades it (reports.Reports)
        try:
            engine.result_at(self.order)
            # under -n N, as the serial run gives it
            cr = workers.as_serial(engine, self.order, state.control(self.config))
        finally:
            state.playing = False
        self.result = cr
        self.agent_result = cr.behind
        if self.agent_result is not None:  # the agent's own findings: shown, never the proxy's
            behind = describe_agent_behind(self.agent_result)
            if behind:
                masker = state.run.masker
                self.add_report_section("call", "the agent behind the proxy (its own findings, "
                                        "not the proxy's)", masker.text(behind) if masker
                                        else behind)
        if cr.cut == "deadline":  # cut in progress, or not run: the run did not test it all
            pytest.fail(f"{cr.case}: {cr.note} (--acp-deadline passed)", pytrace=False)
        if cr.transcript_path:
            self.user_properties.append(("transcript", cr.transcript_path))
        if cr.stderr_tail.strip():
            self.add_report_section("call", "stderr (target, tail)", cr.stderr_tail)
        for f in cr.findings:
            if f.outcome is Outcome.WARN:
                self.user_properties.append(("warn", f"{f.requirement}: {f.shown_message}"))
        fails = [f for f in cr.findings if f.outcome is Outcome.FAIL]
        verdict = state.baseline.evaluate([cr]) if state.baseline is not None else None
        unexpected = verdict.unexpected if verdict is not None else fails
        stale = verdict.stale if verdict is not None else []
        if unexpected or stale:
            raise CaseFailed(cr, unexpected, stale)
        if cr.cut and cr.cut != "deadline" and cr.reason is Reason.NOT_RUN:
            pytest.skip(cr.note)  # the session was interrupted before it (not a pass)
        if cr.cut and cr.cut != "deadline":  # a signal: graded on what was recorded, not all
            pytest.fail(f"{cr.case}: {cr.note}", pytrace=False)
        if verdict is not None and verdict.expected:
            listed = sorted({f.requirement for f in verdict.expected})
            pytest.xfail(f"baseline lists {len(verdict.expected)} failure(s): {', '.join(listed)}")
        unfinished = "" if cr.completed else engine.unfinished(self.protocol)
        carrier = workers.carrier(engine, cr) if unfinished else ""
        if carrier:  # one root cause, one failed item: the others name it, never silently
            pytest.skip(f"not run: v{self.protocol} was settled by the fault that {carrier} "
                        f"{'report' if ' and ' in carrier else 'reports'}")
        if unfinished:  # the engine fails the run: this case is why, never a silent skip
            pytest.fail(f"{cr.case}: {cr.note} ({cr.reason.value if cr.reason else 'aborted'})"
                        f"; the run fails: {unfinished}", pytrace=False)
        if cr.reason is not None and cr.reason is not Reason.CUT:
            pytest.skip(f"{cr.reason.value}: {cr.note}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            masker = self.config.stash[STATE].run.masker
            text = describe_failure(excinfo.value)
            return masker.text(text) if masker else text
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        path, _, line = self.case.source.rpartition(":")
        return Path(path), max(int(line) - 1, 0) if line.isdigit() else 0, \
            f"{self.case.id} v{self.protocol}"


def payload(item: AcpCase) -> dict[str, Any]:
    """A case result as plain JSON data: it travels from xdist workers in the report."""
    from conformance.report.jsonreport import case_to_json

    assert item.result is not None
    data = {"order": item.order, "case": case_to_json(item.result),
            "results": [f.to_json() for f in item.result.findings],
            "target_info": item.result.target_info}
    if item.agent_result is not None:  # the real agent behind a proxy: reported apart
        data["agent"] = {"case": case_to_json(item.agent_result),
                         "results": [f.to_json() for f in item.agent_result.findings],
                         "target_info": item.agent_result.target_info}
    return dict(json.loads(json.dumps(data, ensure_ascii=True, default=str)))
