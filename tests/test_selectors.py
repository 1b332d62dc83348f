"""One selector grammar: a case ID, requirement ID, sub-rule ID, or a glob of any of them;
a selector that selects nothing exits 2 with "did you mean" and a pointer to list."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_cli

from conformance.cases import CaseError, load_dir, select

CASES = load_dir()


def ids(*selectors: str) -> set[str]:
    return {c.id for c in select(CASES, list(selectors))}


def test_a_case_id_a_requirement_a_sub_rule_and_globs_select_cases() -> None:
    assert ids("ids-across-turns") == {"ids-across-turns"}
    by_requirement = ids("MID-A-02")
    assert "ids-across-turns" in by_requirement
    assert ids("MID-A-02/cross-turn-reuse") == by_requirement  # a sub-rule of its requirement
    assert ids("load-*") == {c.id for c in CASES if c.id.startswith("load-")} != set()
    assert ids("MID-A-0*") >= by_requirement | ids("MID-A-07")
    assert ids("*/cross-turn-reuse") == by_requirement  # a glob of sub-rule IDs


@pytest.mark.parametrize("selector,meant", [
    ("load", "'load*'"),                     # a prefix: the glob it probably meant
    ("ids-acros-turns", "ids-across-turns"),  # a typo
    ("MID-A-2", "MID-A-02"),
    ("MID-A-02/cross-turn", "MID-A-02/cross-turn-reuse"),
])
def test_a_miss_says_what_was_probably_meant(selector: str, meant: str) -> None:
    with pytest.raises(CaseError) as err:
        select(CASES, [selector])
    text = str(err.value)
    assert text.startswith(f"unknown case or requirement: {selector} (did you mean ")
    assert meant in text and "'acp-conformance list' shows every case and rule" in text


def test_the_command_line_exits_2_with_the_hint(tmp_path: Path) -> None:
    proc = run_cli("--agent", "true", "--case", "load", "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "did you mean 'load*'" in proc.stderr


def test_a_baseline_entry_of_an_unknown_case_says_what_was_meant(tmp_path: Path) -> None:
    baseline = tmp_path / "b.yaml"
    baseline.write_text("- ids-acros-turns@v1:MID-A-02\n", encoding="utf-8")
    proc = run_cli("--agent", "true", "--baseline", str(baseline), "--json",
                   str(tmp_path / "r.json"))
    assert proc.returncode == 2
    assert "unknown case 'ids-acros-turns' (did you mean ids-across-turns" in proc.stderr


def test_baseline_entries_take_globs() -> None:
    from conformance.baseline import Entry
    from conformance.results import Finding, Outcome

    def fail(case: str, rule: str) -> Finding:
        return Finding(rule, Outcome.FAIL, "x", case=case)

    entry = Entry("load-*", None, "MID-A-07", "b.yaml:1")
    assert entry.matches(fail("load-fresh-process@v1", "MID-A-07/replay-duplicate"))
    assert not entry.matches(fail("ids-across-turns@v1", "MID-A-07/replay-duplicate"))
    anywhere = Entry("*", 1, "*/cross-turn-reuse", "b.yaml:2")
    assert anywhere.matches(fail("ids-across-turns@v1", "MID-A-02/cross-turn-reuse"))
    assert not anywhere.matches(fail("ids-across-turns@v2", "MID-A-02/cross-turn-reuse"))
    assert not anywhere.matches(fail("ids-across-turns@v1", "MID-A-02/user-message-reuse"))


def test_a_baseline_glob_runs_against_the_real_command_line(tmp_path: Path) -> None:
    baseline = tmp_path / "b.yaml"
    baseline.write_text("- 'ids-across-*@v1:MID-A-02'\n", encoding="utf-8")
    agent = f"{sys.executable} fixtures/agents/per_turn_counter.py"
    proc = run_cli("--agent", agent, "--case", "ids-across-turns", "--protocol", "1",
                   "--baseline", str(baseline), "--json", str(tmp_path / "r.json"), "--no-color")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every fail is listed
    assert "verdict with baseline: PASS" in proc.stdout
