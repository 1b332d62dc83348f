"""Traceability (``list --traceability``), progress on a terminal, and NO_COLOR.

Traceability is checked against the sources it is derived from: the
requirement register, the registered rules, the case files and the broken
fixture manifests. Progress and colour are checked the way a person sees
them: the CLI runs under a pseudo-terminal (pexpect).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pexpect
import pytest
import yaml

from conformance import cases as casemod
from conformance.checks import ALWAYS, all_rules
from conformance.cli import main
from conformance.report.catalogue import requirements
from conformance.report.traceability import fixture_expectations, traceability
from conformance.requirements import load_register

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_every_requirement_is_listed_with_its_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--traceability"]) == 0
    out = capsys.readouterr().out
    for rid, req in load_register().items():
        assert f"\n{rid}  [{req.level}," in "\n" + out
    block = out.split("\nMID-V2-10  ")[1].split("\nTARGET")[0]
    assert "agent:   excluded: applies only to v2-to-v1 proxies" in block
    a02 = out.split("\nMID-A-02  ")[1].split("\nMID-A-03")[0]
    assert "agent:   tested" in a02
    assert "ids-across-turns" in a02 and "identity.Uniqueness" in a02
    assert "agents/per_turn_counter" in a02
    assert "sources: docs/rfds/message-id.mdx" in a02


def test_matrix_agrees_with_cases_rules_and_manifests() -> None:
    cases = casemod.load_dir()
    rows = {r.meta.id: r for r in traceability(cases)}
    assert set(rows) == set(requirements())
    rules = all_rules()
    for rid, row in rows.items():
        assert row.rules == sorted(r for r in rules if r.split("/")[0] == rid)
        for role in ("agent", "client"):
            if any(x.split("/")[0] == rid for x in ALWAYS[role]):
                assert row.cases.get(role) == ["every case"], (rid, role)
                continue
            cited = [c.id for c in cases if c.role == role and any(
                x.split("/")[0] == rid for x in (*c.requirements, *c.checks))]
            assert row.cases.get(role, []) == cited, (rid, role)
    fixtures = fixture_expectations(REPO_ROOT)
    assert fixtures
    manifest = yaml.safe_load((REPO_ROOT / "fixtures/agents/manifest.yaml").read_text("utf-8"))
    for fx in manifest["fixtures"]:
        text = yaml.safe_dump(fx["expect"])
        for rid, row in rows.items():
            named = f"{rid}/" in text or f"'{rid}'" in text or f" {rid}\n" in text
            assert (f"agents/{fx['name']}" in (row.fixtures or [])) == named, (fx["name"], rid)


def test_every_tested_requirement_is_normative_or_recorded() -> None:
    """A requirement is tested, excluded with a reason, or says it is not required."""
    for row in traceability(casemod.load_dir()):
        for status in row.sides.values():
            assert status == "tested" or status.startswith(
                ("excluded: ", "not covered", "tested in v")), status


def test_tested_names_the_versions_the_cases_cover() -> None:
    """"tested" means in every version the requirement has: a v1/v2 client rule whose
    cases apply to v1 only says so, in every report that shows the matrix."""
    cases = casemod.load_dir()
    rows = {r.meta.id: r for r in traceability(cases)}
    assert rows["MID-C-07"].sides["client"] == "tested"
    assert rows["MID-A-02"].sides["agent"] == "tested"
    assert rows["TARGET"].sides["agent"] == "tested"  # graded in every agent case
    # The same requirement with its cases narrowed to v1 says so.
    v1 = [dataclasses.replace(c, protocols=(1,)) if "MID-C-07" in c.requirements else c
          for c in cases]
    assert {r.meta.id: r for r in traceability(v1)}["MID-C-07"].sides["client"] == (
        "tested in v1; not covered in v2")


# -- a person at a terminal -------------------------------------------------------------


def spawn(args: list[str], **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
    environ.update(env, TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "conformance", *args], cwd=str(REPO_ROOT),
                          env=environ, encoding="utf-8", timeout=120, dimensions=(40, 160))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return str(child.before)


ARGS = ["demo", "--case", "ids-across-sessions", "--protocol", "1", "--show", "all"]


def test_progress_on_a_terminal_colour_and_quiet_in_ci() -> None:
    tty = spawn(ARGS)
    assert "[0/1 done] running ids-across-sessions v1" in tty
    assert "\x1b[32mPASS" in tty  # colour on a terminal
    ci = spawn(ARGS, CI="true")
    assert "done] running" not in ci and "verdict: PASS" in ci
    plain = spawn(ARGS, NO_COLOR="1")
    assert "\x1b[" not in plain and "verdict: PASS" in plain


def test_every_requirement_names_its_upstream_source() -> None:
    """Reports link each requirement to the text it was read from: a file of the upstream
    repository at the catalogue's commit, or, for a text that is not in it there (a later
    draft, an RFD page, a crate's docs, a pull request), its address. Only the suite's own
    policy (MID-C-08, and the suite's rule families) has none."""
    from conformance.report.catalogue import requirements, source_commit

    metas = requirements()
    unsourced = {i for i, m in metas.items() if not m.sources and i.startswith("MID-")}
    assert unsourced == {"MID-C-08"}, unsourced
    for m in metas.values():
        for s in m.sources:
            assert s.url.startswith("https://"), (m.id, s)
            if not s.path.startswith("https://"):
                assert s.url.endswith(f"/blob/{source_commit()}/{s.path}"), (m.id, s)
    assert [s.url for s in metas["MID-V2-13"].sources][0] == (
        "https://agentclientprotocol.com/rfds/v2/session-replay-complete")
