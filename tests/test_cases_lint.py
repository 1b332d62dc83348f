"""The suite lints itself: case files, the requirement register and the catalogue agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli

from conformance.cases import CaseError, load_dir, load_file
from conformance.checks import all_rules
from conformance.requirements import NORMATIVE, lint, load_register


def test_bundled_cases_lint_clean() -> None:
    problems = lint(load_dir(), all_rules())
    assert problems == []


def test_lint_command_exit_code() -> None:
    proc = run_cli("lint-cases")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 problem(s)" in proc.stdout


def test_register_matches_the_catalogue(shared_dir: Path) -> None:
    """Every catalogue requirement is in the register with a level the catalogue states."""
    text = (shared_dir / "spec" / "messageid-requirements.md").read_text(encoding="utf-8")
    heads = re.findall(r"^\*\*(MID-[A-Z0-9]+-\d\d):", text, flags=re.MULTILINE)
    register = load_register()
    assert sorted(set(heads)) == sorted(register)
    for rid in heads:
        section = text.split(f"**{rid}:", 1)[1].split("\n**MID-", 1)[0]
        level_lines = [line for line in section.splitlines() if line.startswith("- Level:")]
        level = register[rid].level
        if not level_lines:  # "Rule, grading and source: see MID-S-03"
            assert "see MID-" in section and level == "informative", rid
            continue
        level_line = level_lines[0]
        assert level in level_line or level.lower() in level_line.lower(), (rid, level_line)


def test_uncovered_normative_requirement_is_reported(tmp_path: Path) -> None:
    case = """area: tiny
cases:
  - id: only-wire
    description: One case that covers only framing
    requirements: [MID-S-06]
    applies: {protocols: [1], role: agent}
    drive: [start]
    checks: [MID-S-06]
"""
    (tmp_path / "one.yaml").write_text(case)
    problems = lint(load_dir(tmp_path, known_rules=False), all_rules())
    assert any(p.startswith("MID-A-02 (MUST, agent side)") for p in problems)
    normative_agent = [r for r in load_register().values()
                       if "agent" in r.parties and r.level in NORMATIVE and "agent" not in r.excluded]
    assert len([p for p in problems if "agent side" in p]) == len(normative_agent) - 1


def test_unknown_check_is_reported(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("""area: x
cases:
  - id: c1
    description: d
    requirements: [MID-A-02]
    applies: {protocols: [1], role: agent}
    drive: [start]
    checks: [MID-A-02/no-such-rule]
""")
    problems = lint(load_dir(tmp_path, known_rules=False), all_rules())
    assert any("MID-A-02/no-such-rule" in p for p in problems)


@pytest.mark.parametrize("body,line,needle", [
    (("area: x\ncases:\n  - id: c1\n    description: d\n    requirements: [MID-A-02]\n"
     "    applies: {protocols: [1], role: agent}\n    drive: [start]\n    checks: [MID-A-02]\n"
     "    chekcs: [MID-A-03]\n"), 9, "unknown key"),
    (("area: x\ncases:\n  - id: c1\n    description: d\n    requirements: [MID-A-02]\n"
     "    applies: {protocols: [3], role: agent}\n    drive: [start]\n    checks: [MID-A-02]\n"),
     6, "protocols"),
    ("area: x\ncases:\n  - id: c1\n    description: [unclosed\n", 5, "invalid YAML"),
    (("area: x\ncases:\n  - id: c1\n    description: d\n    requirements: [MID-A-02]\n"
     "    applies: {protocols: [1], role: agent}\n    drive: [start, fly]\n"
     "    checks: [MID-A-02]\n"), 7, "not a known step"),
])
def test_malformed_case_names_file_and_line(tmp_path: Path, body: str, line: int,
                                            needle: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(CaseError) as err:
        load_file(path)
    msg = str(err.value)
    assert f"{path}:{line}:" in msg, msg
    assert needle in msg
    proc = run_cli("--agent", "true", "--cases", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and f"bad.yaml:{line}:" in proc.stderr


def test_the_requirement_checklist_names_what_is_missing(tmp_path: Path) -> None:
    """lint-cases --requirement goes through CONTRIBUTING.md's checklist for one ID."""
    proc = run_cli("lint-cases", "--requirement", "MID-A-02")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = [line.split()[1] for line in proc.stdout.splitlines()[:-1]]
    assert steps == ["register", "sources", "rule", "case", "fixture", "manifest", "docs"]
    assert proc.stdout.splitlines()[-1] == "MID-A-02: 0 step(s) missing"
    cases = tmp_path / "cases"
    cases.mkdir()
    for name in ("wire.yaml", "turns.yaml"):  # no case of these cites MID-A-05
        (cases / name).write_text((REPO_ROOT / "cases" / name).read_text(encoding="utf-8"),
                                  encoding="utf-8")
    proc = run_cli("lint-cases", "--requirement", "MID-A-05", "--cases", str(cases))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^MISSING +case ", proc.stdout, re.MULTILINE), proc.stdout
    assert "MID-A-05: 1 step(s) missing" in proc.stdout
    proc = run_cli("lint-cases", "--requirement", "MID-X-99")
    assert proc.returncode == 2 and "register it" in proc.stderr


def _twice(first_turn_repeats: bool, across_turns: bool) -> str:
    second = "    - turn: u\n      updates:\n        - {agent: \"Said. \", id: b}\n" \
        if across_turns else ""
    return ("area: x\ncases:\n  - id: c1\n    description: d\n    requirements: [MID-C-03]\n"
            "    applies: {protocols: [1, 2], role: client}\n    drive: [start, {play: t}]\n"
            "    checks: [MID-C-03]\n    stream:\n    - turn: t\n"
            + ("      repeats: true\n" if first_turn_repeats else "")
            + "      updates:\n        - {agent: \"Said. \", id: a1}\n"
            + ("" if across_turns else "        - {agent: \"Said. \", id: a2}\n") + second)


@pytest.mark.parametrize("repeats,across,ok", [
    (False, False, False),  # a text twice: messages could not be told apart
    (True, False, True),  # on purpose, within the turn: the observation counts copies
    (True, True, False),  # repeats covers the turn's own updates, not another turn's
])
def test_a_text_sent_twice_needs_repeats_in_its_turn(tmp_path: Path, repeats: bool,
                                                     across: bool, ok: bool) -> None:
    from conformance.client.script import check_case

    path = tmp_path / "twice.yaml"
    path.write_text(_twice(repeats, across))
    (case,) = load_file(path)
    if ok:
        check_case(case)
        return
    with pytest.raises(CaseError, match="is sent twice"):
        check_case(case)


GOOD = ("area: x\ncases:\n  - id: c1\n    description: d\n    requirements: [MID-A-02]\n"
        "    applies: {protocols: [1], role: agent}\n    drive: [start]\n    checks: [MID-A-02]\n")


def test_a_valid_file_is_walked_once_and_an_edit_is_walked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema walk is remembered by the digest of the file's text: the same bytes load
    without jsonschema, and one changed byte is validated (and its error reported) anew;
    a file that is not valid is never remembered."""
    import conformance.cases as cases

    monkeypatch.setenv("ACP_CONFORMANCE_CACHE_DIR", str(tmp_path / "memo"))
    path = tmp_path / "c" / "c.yaml"
    path.parent.mkdir()
    path.write_text(GOOD)
    assert [c.id for c in load_file(path)] == ["c1"]
    assert len(list((tmp_path / "memo" / "valid-cases").iterdir())) == 1

    def no_walk() -> None:
        raise AssertionError("the schema was walked again")

    with monkeypatch.context() as m:
        m.setattr(cases, "_validator", no_walk)
        assert [c.id for c in load_file(path)] == ["c1"]  # remembered: not walked
    path.write_text(GOOD.replace("protocols: [1]", "protocols: [3]"))
    for _ in range(2):  # an edit is walked; its error is reported each time
        with pytest.raises(CaseError, match=r"c\.yaml:6: .*protocols"):
            load_file(path)
    assert len(list((tmp_path / "memo" / "valid-cases").iterdir())) == 1


@pytest.mark.parametrize("memo", ["", "a-file"])
def test_without_a_writable_memo_every_load_validates(tmp_path: Path, memo: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``ACP_CONFORMANCE_CACHE_DIR=`` (empty) remembers nothing; a folder that cannot be made
    (a file stands there) is no error: the file is validated every time."""
    import conformance.cases as cases

    if memo:
        (tmp_path / memo).write_text("not a folder")
    monkeypatch.setenv("ACP_CONFORMANCE_CACHE_DIR", str(tmp_path / memo) if memo else "")
    (tmp_path / "c.yaml").write_text(GOOD)
    walks = []
    real = cases._validator
    monkeypatch.setattr(cases, "_validator", lambda: walks.append(1) or real())
    for _ in range(2):
        assert [c.id for c in load_file(tmp_path / "c.yaml")] == ["c1"]
    assert walks == [1, 1]
