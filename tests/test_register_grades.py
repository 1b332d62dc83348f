"""Grades are data: the register holds each sub-rule's grade per profile and protocol
version, checkers only look it up, and ``list`` / ``list --json`` state what reports show.

The other half of the proof (every fault a broken fixture triggers is reported with the
grade ``list --json`` states) runs over every fixture's live run in ``offline.py``
(``assert_graded_as_listed``, called by the agent and client fixture sweeps).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli

from conformance.checks import Options, all_rules
from conformance.checks.base import Sink
from conformance.profiles import PROFILES, get
from conformance.requirements import load_grades, load_register, load_rule_records
from conformance.results import Outcome

CHECKS = REPO_ROOT / "conformance" / "checks"
# Catalogue-internal references a reader of a report cannot look up.
INTERNAL = re.compile(r"\((?:see )?C-\d+\)|\bC-\d+:|\bPart [A-J]\b|\bAppendix [A-J]\b")


def test_every_rule_has_its_grades_in_the_register_and_no_grade_is_orphaned() -> None:
    rules, grades = all_rules(), load_grades()
    assert sorted(set(rules) - set(grades)) == []
    assert sorted(set(grades) - set(rules)) == ["SCHEMA/official"]  # graded in schema.py
    register = load_register(suite=True)
    for rid, g in grades.items():
        assert rid.split("/", 1)[0] == g.requirement, rid  # filed under its requirement
        assert set(g.by_profile) == set(PROFILES), rid
        rule = rules.get(rid)
        for version in rule.versions if rule else register[g.requirement].versions:
            for profile in PROFILES:
                assert g.of(profile, version) in (Outcome.FAIL, Outcome.WARN, Outcome.INFO)


def _grade_writing(path: Path) -> list[str]:
    """Where a checker module writes a grade: an ``Outcome.FAIL/WARN/INFO`` name, or an
    ``outcome=`` argument to a call."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "Outcome" and node.attr in ("FAIL", "WARN", "INFO")):
            out.append(f"{path.name}:{node.lineno} Outcome.{node.attr}")
        if isinstance(node, ast.Call):
            out += [f"{path.name}:{node.lineno} outcome=" for k in node.keywords
                    if k.arg == "outcome"]
    return out


def test_no_checker_writes_a_grade() -> None:
    found = [w for p in sorted(CHECKS.glob("*.py")) if p.name != "base.py"
             for w in _grade_writing(p)]
    assert found == []


def test_the_grade_reader_finds_a_grade_written_in_code(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("x = Outcome.WARN if v2 else Outcome.INFO\nfound('r', outcome=x)\n")
    assert sorted(_grade_writing(bad)) == ["bad.py:1 Outcome.INFO", "bad.py:1 Outcome.WARN",
                                   "bad.py:2 outcome="]


@pytest.mark.parametrize("rule,profile,protocol,modifiers,grade", [
    ("MID-S-01/near-miss-key", "acp-sdk-2.4.0", 1, (), Outcome.WARN),
    ("MID-S-01/near-miss-key", "acp-sdk-2.4.0", 2, (), Outcome.FAIL),
    ("MID-V2-05/response-id", "acp-sdk-2.4.0", 2, (), Outcome.FAIL),
    ("MID-V2-05/response-id", "acp-repo-2026-08-22", 2, (), Outcome.WARN),
    ("MID-A-02/cross-turn-reuse", "acp-sdk-2.4.0", 1, (), Outcome.FAIL),
    ("MID-A-02/cross-turn-reuse", "acp-sdk-2.4.0", 1, ("cross-turn-reuse=warn",), Outcome.WARN),
    ("MID-A-05/no-ids", "acp-sdk-2.4.0", 1, (), Outcome.INFO),
    ("MID-A-05/no-ids", "acp-sdk-2.4.0", 1, ("strict-ids",), Outcome.WARN),
    ("MID-C-03/merged", "acp-repo-2026-08-22", 1, (), Outcome.WARN),
    ("MID-C-03/merged", "acp-repo-2026-08-22", 2, (), Outcome.FAIL),
])
def test_the_sink_grades_by_the_register(rule: str, profile: str, protocol: int,
                                         modifiers: tuple[str, ...], grade: Outcome) -> None:
    options = Options(profile=get(profile),
                      cross_turn_reuse=Outcome.WARN if "cross-turn-reuse=warn" in modifiers
                      else Outcome.FAIL, strict_ids="strict-ids" in modifiers)
    sink = Sink(all_rules(), protocol=protocol, options=options)
    sink.add(rule, "a fault", (1,), None, None)
    assert [f.outcome for f in sink.rows(rule)] == [grade]
    assert load_grades()[rule].of(profile, protocol, frozenset(modifiers)) is grade


def test_list_json_is_the_register() -> None:
    proc = run_cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    by_rule = {r["rule"]: r for r in rows}
    assert set(by_rule) == set(load_grades())
    for r in rows:
        assert {"rule", "requirement", "level", "text", "source", "grades"} <= set(r)
        assert r["text"] and r["source"], r["rule"]  # the normative sentence and its source
        assert set(r["grades"]) == set(PROFILES)
        for versions in r["grades"].values():
            assert [int(v) for v in versions] == r["versions"], r["rule"]
    assert by_rule["MID-S-01/near-miss-key"]["grades"]["acp-sdk-2.4.0"] == {"1": "warn",
                                                                            "2": "fail"}
    assert by_rule["MID-V2-05/response-id"]["grades"] == {
        "acp-sdk-2.4.0": {"2": "fail"}, "acp-repo-2026-08-22": {"2": "warn"},
        "acp-schema-1.21": {"2": "fail"}}
    # catalogue Appendix K: graded under acp-schema-1.21 (the older profiles do not apply
    # the marker rules at all: not_applicable, allowed_by_profile, as list says too)
    assert by_rule["MID-V2-13/missing"]["grades"] == {
        "acp-schema-1.21": {"2": "fail"}, "acp-sdk-2.4.0": {"2": "not_applicable"},
        "acp-repo-2026-08-22": {"2": "not_applicable"}}
    assert by_rule["MID-A-10/new-id"]["grades"]["acp-schema-1.21"] == {"1": "warn", "2": "warn"}
    assert by_rule["MID-A-02/cross-turn-reuse"]["options"] == {"cross-turn-reuse=warn": "warn"}


def test_list_states_the_grade_per_version_and_profile() -> None:
    proc = run_cli("list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    near = next(line for line in lines if "MID-S-01/near-miss-key" in line)
    assert "v1 warn, v2 fail" in near
    response = next(line for line in lines if line.split()[:1] == ["MID-V2-05/response-id"])
    assert "v2 fail (acp-repo-2026-08-22: v2 warn)" in response
    reuse = next(line for line in lines if "MID-A-02/cross-turn-reuse" in line)
    assert "(--cross-turn-reuse warn: warn)" in reuse


def test_no_catalogue_internal_reference_reaches_a_reader() -> None:
    """The register's texts and the command line's help say what a rule is, not where in
    our catalogue it is discussed ("C-10", "Part C")."""
    for req in load_register(suite=True).values():
        for field in (req.title, req.text, req.source, *req.excluded.values()):
            assert not INTERNAL.search(field), (req.id, field)
    for rule in all_rules().values():
        assert not INTERNAL.search(rule.title + rule.untested), rule.id
    for command in ([], ["fuzz"], ["check"], ["list"]):
        proc = run_cli(*command, "--help")
        assert not INTERNAL.search(proc.stdout), (command, INTERNAL.findall(proc.stdout))


def test_a_rule_is_one_record_in_the_register() -> None:
    """Checkers name a rule by ID only; its title, side, versions, "not testable" text and
    profiles are the register's (no second copy in code)."""
    package = REPO_ROOT / "conformance"
    in_code = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "Rule" and (len(node.args) != 1 or node.keywords)):
                in_code.append(f"{path.relative_to(package)}:{node.lineno}")
    assert in_code == []
    records = load_rule_records()
    for rid, rule in all_rules().items():
        record = records[rid]
        assert record.title and record.role in ("agent", "client", "proxy"), rid
        assert set(record.versions) <= set(load_register(suite=True)[record.requirement].versions)
        assert rule.title == record.title and rule.versions == record.versions, rid


def test_a_profile_gated_rule_is_not_applicable_under_other_profiles() -> None:
    """A rule whose record names the profiles that grade it is not_applicable with the
    reason allowed_by_profile under any other, whatever the traffic, by the grader."""
    from conformance.checks import grade
    from conformance.results import Reason

    gated = {rid: r for rid, r in load_rule_records().items() if r.profiles}
    assert gated  # MID-V2-11 and MID-V2-12 at least (and the client's MID-V2-14/truncated)
    for profile in PROFILES:
        options = Options(profile=get(profile))
        rows = {f.requirement: f for role in ("agent", "client")
                for f in grade([], protocol=2, options=options, role=role)}
        for rid, record in gated.items():
            if profile in record.profiles:
                assert rows[rid].reason is not Reason.ALLOWED_BY_PROFILE, (rid, profile)
            else:
                assert rows[rid].outcome is Outcome.NOT_APPLICABLE, (rid, profile)
                assert rows[rid].reason is Reason.ALLOWED_BY_PROFILE, (rid, profile)
                assert profile in rows[rid].message, (rid, profile)
