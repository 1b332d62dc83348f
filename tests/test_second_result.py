"""A case that grades a second target (the real agent behind a proxy) carries that
target's result itself (``CaseResult.behind``); the run engine gathers those into a run
of their own (``RunResult.behind``), in plan order and concluded as the run is, for
every shell: no role hands it over in a side channel. In process: the engine and the
case lifecycle are pure of the shells."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conformance import cases as casemod
from conformance.checks import Options
from conformance.engine import Suite, run_suite
from conformance.grading import Ending, Scope, grade_sides
from conformance.lifecycle import Side, new_transcript, play_case
from conformance.results import CaseResult, Finding, Outcome
from conformance.transcript import Transcript, load

CASES = {c.id: c for c in casemod.load_dir()}
PLAN = [(1, CASES["ids-across-turns"]), (1, CASES["load-fresh-process"])]


def settings(**kw: Any) -> Any:
    base = {"protocols": [1], "options": Options(), "strict": False, "transcripts": None,
            "masker": None, "handle_signals": False, "progress": None, "jobs": 1,
            "deadline": None, "keep_going": False, "repeat": 1}
    return SimpleNamespace(**{**base, **kw})


def played(outcomes: dict[str, Outcome]) -> Any:
    """A role's play: each case passes for the target in front; the target behind gets
    ``outcomes[case id]`` on MID-A-02 (a second repetition of a case passes)."""
    times: dict[str, int] = {}

    def play(protocol: int, case: Any, signals: Any, cutoff: Any) -> CaseResult:
        name = f"{case.id}@v{protocol}"
        times[name] = times.get(name, 0) + 1
        behind = CaseResult(name, case.description, list(case.requirements), protocol,
                            target_info={"name": "inner", "version": "1"})
        outcome = outcomes[case.id] if times[name] == 1 else Outcome.PASS
        behind.findings = [Finding("MID-A-02", outcome, "m", case=name)]
        return CaseResult(name, case.description, list(case.requirements), protocol,
                          findings=[Finding("MID-P-01", Outcome.PASS, "ok", case=name)],
                          behind=behind)

    return play


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_engine_gathers_the_results_behind_into_a_run_of_their_own(jobs: int) -> None:
    suite = Suite("proxy", "the proxy", list(PLAN), played({
        "ids-across-turns": Outcome.FAIL, "load-fresh-process": Outcome.PASS}),
        scope=lambda case: Scope("proxy"), behind="the agent --acp")
    result = run_suite(suite, settings(jobs=jobs))
    assert not result.failed  # the agent's fault is never the proxy's
    behind = result.behind
    assert behind is not None and (behind.role, behind.target) == ("agent", "the agent --acp")
    assert [c.case for c in behind.cases] == ["ids-across-turns@v1", "load-fresh-process@v1"]
    assert behind.failed and behind.target_info == {"name": "inner", "version": "1"}
    assert behind.behind is None


def test_no_target_behind_no_run_behind() -> None:
    suite = Suite("proxy", "the proxy", list(PLAN), played({
        "ids-across-turns": Outcome.FAIL, "load-fresh-process": Outcome.PASS}),
        scope=lambda case: Scope("proxy"))
    assert run_suite(suite, settings()).behind is None


def test_repetitions_of_the_result_behind_are_read_as_one() -> None:
    """--repeat N: the target behind's repetitions of a case are merged as the case's are,
    so a rule that came out differently between them is shown so."""
    suite = Suite("proxy", "the proxy", list(PLAN[:1]), played({
        "ids-across-turns": Outcome.FAIL}), scope=lambda case: Scope("proxy"),
        behind="the agent --acp")
    result = run_suite(suite, settings(repeat=2))
    assert result.behind is not None
    [case] = result.behind.cases
    [row] = case.findings
    assert row.outcome is Outcome.FAIL and row.repeats is not None
    assert dict(row.repeats.outcomes) == {"fail": 1, "pass": 1}
    assert result.behind.repeat == 2


class Quiet:
    """A drive that sends nothing: what the case grades is what the transcripts hold."""

    def drive(self) -> None:
        pass

    def stop(self, hurry: bool) -> None:
        pass

    def conn(self) -> int:
        return 0

    def ended(self, ending: Ending) -> Ending:
        return ending


def test_play_case_grades_both_sides_and_keeps_the_second(tmp_path: Path) -> None:
    """The second transcript is saved beside the first with the case's ending; graded
    alone (its header's own scope) it is the result behind, pointing at its file."""
    case = CASES["ids-across-turns"]
    from conformance.proxy.grading import proxy_scope

    name = "ids-across-turns@v1"
    front = new_transcript("proxy", 1, proxy_scope(Options(), False, case), "proxy", name,
                           ["MID-P-01"])
    front.header.update(agent_protocol=1, agent_side=f"{name}.agent-side.jsonl")
    agent = Transcript({"role": "proxy", "protocol": 1, "case": name, "side": "agent",
                        "requirements": list(case.requirements),
                        "scope": Scope("agent", rules=("MID-A-02",)).to_json()})
    cr = play_case(case, 1, "proxy", Quiet(), front, transcripts=tmp_path,
                   side=lambda: Side(agent, ".agent-side", grade_sides, alone=True))
    assert {f.requirement.split("/")[0] for f in cr.findings} >= {"MID-P-01"}
    assert cr.behind is not None and cr.behind.case == name
    assert {f.requirement.split("/")[0] for f in cr.behind.findings} == {"MID-A-02"}
    header, _ = load(Path(cr.behind.transcript_path or ""))
    assert header["ended"] == {"note": ""} and header["side"] == "agent"
    assert Path(cr.transcript_path or "").name == f"{name}.jsonl"
    # a second side not graded alone is kept, and is no result of its own
    cr = play_case(case, 1, "proxy", Quiet(), front, transcripts=tmp_path / "x",
                   side=lambda: Side(agent, ".agent-side", grade_sides))
    assert cr.behind is None and (tmp_path / "x" / f"{name}.agent-side.jsonl").is_file()
