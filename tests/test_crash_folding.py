"""One fault, one finding, for an agent that exits on its own mid-case
(conformance/faultfold.py's crash fault): what the exit cut short (a prompt it accepted
and never echoed, a turn it never ended) is listed on the ``TARGET/exit`` finding as a
consequence, on the command line, by ``check`` on the saved transcript and through the
pytest plugin, only where the control (the transcript without the cut work) meets the
rule; a fault of the same rule of the agent's own keeps its own finding.

Real subprocesses: fixtures/hostile/agents/exits_after_second_prompt.py, the reference
agent, and that fixture made to never echo a prompt as well."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_one_verdict, every_road

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "fixtures" / "hostile" / "agents" / "exits_after_second_prompt.py"
SELECTION = ["--case", "prompts-in-flight", "--protocol", "2"]
CONSEQUENCE = "a consequence of the agent's exit mid-case (TARGET/exit)"

pytest_plugins = ["pytester"]

#: exits_after_second_prompt that also never echoes a prompt (v2_no_echo's fault): its
#: first prompt's turn ends without an echo before any exit, a fault of its own.
NO_ECHO_AND_EXITS = """
import sys
sys.path[:0] = [{repo!r}, {hostile!r}, {agents!r}]
from exits_after_second_prompt import ExitsAfterSecondPrompt
from v2_no_echo import NoEchoAgent
from conformance.reference.agent import main

class NoEchoAndExits(ExitsAfterSecondPrompt, NoEchoAgent):
    pass

sys.exit(main(agent_class=NoEchoAndExits))
"""


def _targets(command: str) -> tuple[list[str], list[str]]:
    return (["--agent", command, "--timeout", "5"],
            ["--acp-agent", command, "--acp-timeout", "5"])


def _rows(report: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["requirement"] == rule]


def test_an_exit_is_one_finding_with_its_consequences_on_every_road(
        tmp_path: Path, pytester: pytest.Pytester) -> None:
    cli, plug = _targets(f"{sys.executable} {FIXTURE}")
    roads = every_road(tmp_path, pytester, cli, plug, SELECTION)
    assert_one_verdict(roads, "fail")
    for road, (_, report, _) in roads.items():
        faults = [r for r in report["results"] if r["outcome"] in ("fail", "warn")]
        assert [r["requirement"] for r in faults] == ["TARGET/exit"], (road, faults)
        assert any(c.startswith("MID-V2-05/no-echo: ") for c in faults[0]["consequences"]), \
            (road, faults[0])
        [echo] = _rows(report, "MID-V2-05/no-echo")
        assert echo["outcome"] == "not_applicable", (road, echo)
        assert CONSEQUENCE in echo["message"], (road, echo)
        assert "the transcript without the work the exit cut short" in echo["message"]
    assert "as a consequence: MID-V2-05/no-echo" in roads["cli"][2]


def test_the_reference_agent_folds_nothing(tmp_path: Path, pytester: pytest.Pytester) -> None:
    cli, plug = _targets(f"{sys.executable} -m conformance.reference.agent")
    roads = every_road(tmp_path, pytester, cli, plug, SELECTION)
    assert_one_verdict(roads, "pass")
    for road, (_, report, _) in roads.items():
        assert not any(r.get("consequences") for r in report["results"]), road
        assert [r["outcome"] for r in _rows(report, "TARGET/exit")] == ["pass"], road
        assert [r["outcome"] for r in _rows(report, "MID-V2-05/no-echo")] == ["pass"], road


def test_a_missing_echo_of_the_agents_own_keeps_its_finding(tmp_path: Path) -> None:
    """The agent never echoes and then exits: the control (without the cut work) still
    lacks the first prompt's echo, so MID-V2-05/no-echo stands as a fail of its own, and
    the exit lists no consequence of it; `check` grades the transcript the same."""
    script = tmp_path / "no_echo_and_exits.py"
    script.write_text(NO_ECHO_AND_EXITS.format(
        repo=str(REPO), hostile=str(FIXTURE.parent),
        agents=str(REPO / "fixtures" / "agents")), encoding="utf-8")
    cli, _ = _targets(f"{sys.executable} {script}")
    roads = every_road(tmp_path, None, cli, [], SELECTION)
    assert_one_verdict(roads, "fail")
    report = roads["cli"][1]
    assert "fail" in {r["outcome"] for r in _rows(report, "MID-V2-05/no-echo")}, report
    [exit_row] = [r for r in _rows(report, "TARGET/exit") if r["outcome"] == "fail"]
    assert not any(c.startswith("MID-V2-05/no-echo") for c in exit_row.get("consequences", ())), \
        exit_row
