"""The agent suite end to end: the real CLI against the reference agent and every broken one.

Each broken agent in fixtures/agents/ breaks one rule; its manifest entry says
which requirement the suite must report. The reference agent must pass with no
fail and no warn, in v1 and v2, under every v2 profile. Under the default profile
``check`` then grades the run's transcripts to the same findings and exit status
(offline.py), and where a fixture only warns, ``check --strict`` on the same transcripts
fails it (``--strict`` changes no step, so no second live run is needed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT, load_json, outcomes, run_cli
from helpers import assert_graded_the_same_both_ways
from offline import assert_check_agrees

MANIFEST = yaml.safe_load((REPO_ROOT / "fixtures" / "agents" / "manifest.yaml").read_text())
DEFAULT_PROFILE = MANIFEST["profiles"][0]
REFERENCE = f"{sys.executable} -m conformance.reference.agent"


def fixture_command(name: str) -> str:
    return f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / (name + '.py')}"


def matches(found: set[str], expected: str) -> bool:
    return any(f == expected or f.startswith(expected + "/") for f in found)


def expectations(fx: dict[str, Any], protocol: int, profile: str) -> dict[str, list[str]]:
    exp = fx["expect"].get(f"v{protocol}", {})
    if "profiles" in exp:
        exp = exp["profiles"].get(profile, {})
    return {k: list(v) for k, v in exp.items()}


def allowed_extra(fx: dict[str, Any], protocol: int) -> list[str]:
    return list((fx.get("may_also") or {}).get(f"v{protocol}", []))


CASES = [(fx["name"], p, prof) for fx in MANIFEST["fixtures"] for p in fx["protocols"]
         for prof in ([DEFAULT_PROFILE] if p == 1 or "profiles" not in fx["expect"].get(f"v{p}", {})
                      else MANIFEST["profiles"])]


@pytest.mark.parametrize("protocol", [1, 2])
@pytest.mark.parametrize("profile", ["acp-sdk-2.4.0", "acp-repo-2026-08-22", "acp-schema-1.21"])
def test_reference_agent_passes(tmp_path: Path, protocol: int, profile: str) -> None:
    report = tmp_path / "report.json"
    proc = run_cli("--agent", REFERENCE, "--protocol", str(protocol), "--profile", profile,
                   "--json", str(report), "--junit", str(tmp_path / "junit.xml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = outcomes(load_json(report))
    assert "fail" not in found, found.get("fail")
    assert "warn" not in found, found.get("warn")
    assert len(found.get("pass", ())) >= 20  # the suite really graded something


@pytest.mark.parametrize("name,protocol,profile", CASES,
                         ids=[f"{n}-v{p}-{pr}" for n, p, pr in CASES])
def test_broken_agent_is_caught(tmp_path: Path, name: str, protocol: int, profile: str) -> None:
    fx = next(f for f in MANIFEST["fixtures"] if f["name"] == name)
    exp = expectations(fx, protocol, profile)
    report = tmp_path / "report.json"
    args = ["--agent", fixture_command(name), "--protocol", str(protocol), "--profile", profile,
            "--timeout", "5"]
    proc = run_cli(*args, "--json", str(report), "--transcripts", str(tmp_path / "t"))
    assert report.exists(), proc.stderr
    for path in sorted((tmp_path / "t").glob("*.jsonl")):  # the short path changes no finding
        assert_graded_the_same_both_ways(path)
    # one verdict: offline, the same findings and exit status (under the default profile,
    # and under acp-schema-1.21, whose marker and key rules only its transcripts show)
    if profile in (DEFAULT_PROFILE, "acp-schema-1.21"):
        assert_check_agrees(report, tmp_path / "t", proc.returncode, args)
    found = outcomes(load_json(report))
    for outcome in ("fail", "warn", "info"):
        for req in exp.get(outcome, []):
            assert matches(found.get(outcome, set()), req), (
                f"{name} v{protocol}: expected {outcome} {req}; got {found}")
    expected_exit = 1 if exp.get("fail") else 0
    assert proc.returncode == expected_exit, proc.stdout[-3000:] + proc.stderr
    # Exactly that rule: no fail or warn outside the expectation and its listed side effects.
    listed = exp.get("fail", []) + exp.get("warn", []) + allowed_extra(fx, protocol)
    for outcome in ("fail", "warn"):
        stray = [r for r in found.get(outcome, set()) if not any(
            r == x or r.startswith(x + "/") for x in listed)]
        assert not stray, f"{name} v{protocol}: unexpected {outcome}: {stray}"
    if (name, protocol, profile) in WARN_CASES:  # a warning only: it fails under --strict
        assert_warnings_fail_under_strict(tmp_path / "t", exp["warn"], tmp_path)


WARN_CASES = [(n, p, pr) for n, p, pr in CASES
              if not expectations(next(f for f in MANIFEST["fixtures"] if f["name"] == n), p, pr)
              .get("fail") and expectations(next(f for f in MANIFEST["fixtures"]
                                                 if f["name"] == n), p, pr).get("warn")]


def assert_warnings_fail_under_strict(transcripts: Path, warned: list[str], tmp_path: Path) -> None:
    """``--strict`` changes no step, only the grades: ``check --strict`` on the transcripts a
    live run recorded fails the warned rules (exit 1), as a live ``--strict`` run would."""
    report = tmp_path / "strict.json"
    proc = run_cli("check", str(transcripts), "--strict", "--json", str(report), "--no-color")
    assert proc.returncode == 1, proc.stdout[-2000:]
    found = outcomes(load_json(report))
    for req in warned:
        assert matches(found.get("fail", set()), req)


def test_every_graded_rule_has_a_failing_fixture() -> None:
    """A checker that no broken agent trips is unproven (STYLE 9)."""
    from conformance.checks import all_rules
    from conformance.results import Outcome

    tripped: set[str] = set()
    for fx in MANIFEST["fixtures"]:
        for per in fx["expect"].values():
            groups = per.get("profiles", {}).values() if "profiles" in per else [per]
            for g in groups:
                tripped.update(g.get("fail", []) + g.get("warn", []))
    rules = [r for r in all_rules().values() if r.role == "agent" and any(
        g in (Outcome.FAIL, Outcome.WARN) for vs in r.grades.by_profile.values()
        for g in vs.values())]
    # Target faults (TARGET/*) and non-JSON-RPC lines are proven by fixtures/hostile.
    proven_elsewhere = ("TARGET/", "MID-S-06/jsonrpc")
    missing = [r.id for r in rules if not r.id.startswith(proven_elsewhere)
               and not any(
        r.id == t or r.id.startswith(t + "/") for t in tripped)]
    assert not missing, f"rules with no broken fixture: {missing}"
