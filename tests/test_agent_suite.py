"""The agent suite end to end: the real CLI against the reference agent and every broken one.

Each broken agent in fixtures/agents/ breaks one rule; its manifest entry says
which requirement the suite must report. The reference agent must pass with no
fail and no warn, in v1 and v2, under every v2 profile. Under the default profile
``check`` then grades the run's transcripts to the same findings and exit status
(offline.py), and where a fixture only warns, ``check --strict`` on the same transcripts
fails it (``--strict`` changes no step, so no second live run is needed). A profile that
changes no step of a run (the same cases, the same requests: ``same_steps``) is proven the
same way: ``check --profile`` grades the default profile's recorded run, and
``test_a_profile_that_changes_no_step_grades_the_recorded_run_as_it_grades_a_live_one``
holds that such a re-grading is what a live run under that profile reports.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT, load_json, outcomes, run_cli
from helpers import (
    assert_breaks,
    assert_graded_the_same_both_ways,
    first_rule,
    plugin_agrees_with_check,
)
from offline import assert_check_agrees

pytest_plugins = ["pytester"]

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


#: (fixture, protocol) -> the rule the plugin's road selects: for every fixture that breaks
#: a rule under the default profile, the first protocol in which it does and that rule.
ONE_VERDICT = {(f["name"], p): rule for f in MANIFEST["fixtures"]
               for p, rule in [first_rule(f.get("expect") or {}, f["protocols"], DEFAULT_PROFILE)]
               if rule is not None}


@functools.cache
def same_steps(profile: str, protocol: int) -> bool:
    """Whether an agent run under ``profile`` plays exactly the steps of one under the
    default profile: the same cases apply, and the driver sends the same requests (a
    profile's idempotency keys go on v2 prompts only). A profile then changes only the
    grades, and ``check --profile`` on the default profile's transcripts grades it."""
    from conformance.cases import load_dir
    from conformance.profiles import get

    agent = [c for c in load_dir() if c.role == "agent"]
    return ([c.id for c in agent if c.applies_to(protocol, profile)]
            == [c.id for c in agent if c.applies_to(protocol, DEFAULT_PROFILE)]
            and (protocol == 1 or get(profile).idempotency_keys
                 == get(DEFAULT_PROFILE).idempotency_keys))


def regraded_under(variants: list[tuple[Any, ...]], key: tuple[Any, ...], profile: str,
                   protocol: int) -> list[str]:
    """The profiles the default profile's item of ``key`` also grades (with ``check
    --profile`` on its transcripts): those of ``variants`` that change no step. One item
    does it, so the re-grading never depends on which worker ran the live run."""
    if profile != DEFAULT_PROFILE:
        return []
    return [v[-1] for v in variants if v[:-1] == key and v[-1] != DEFAULT_PROFILE
            and same_steps(v[-1], protocol)]


def live_items(variants: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The variants that get a live run: the default profile's, and those that change a step."""
    return [v for v in variants if v[-1] == DEFAULT_PROFILE or not same_steps(v[-1], v[-2])]


REFERENCE_VARIANTS = [(p, prof) for prof in MANIFEST["profiles"] for p in (1, 2)]


@pytest.mark.parametrize("protocol,profile", live_items(REFERENCE_VARIANTS),
                         ids=[f"{pr}-{p}" for p, pr in live_items(REFERENCE_VARIANTS)])
def test_reference_agent_passes(tmp_path: Path, protocol: int, profile: str) -> None:
    report = tmp_path / "report.json"
    proc = run_cli("--agent", REFERENCE, "--protocol", str(protocol), "--profile", profile,
                   "--json", str(report), "--junit", str(tmp_path / "junit.xml"),
                   "--transcripts", str(tmp_path / "t"), in_process=True)
    for under in (profile, *regraded_under(REFERENCE_VARIANTS, (protocol,), profile,
                                           protocol)):
        if under != profile:  # the default profile's run, graded under this one
            report = tmp_path / f"{under}.json"
            proc = run_cli("check", str(tmp_path / "t"), "--profile", under, "--json",
                           str(report), "--junit", str(tmp_path / f"{under}.xml"), "--no-color")
        assert proc.returncode == 0, (under, proc.stdout + proc.stderr)
        found = outcomes(load_json(report))
        assert "fail" not in found, found.get("fail")
        assert "warn" not in found, found.get("warn")
        assert len(found.get("pass", ())) >= 20  # the suite really graded something


@pytest.mark.parametrize("name,protocol,profile", live_items(CASES),
                         ids=[f"{n}-v{p}-{pr}" for n, p, pr in live_items(CASES)])
def test_broken_agent_is_caught(tmp_path: Path, request: pytest.FixtureRequest, name: str,
                                protocol: int, profile: str) -> None:
    """The fixture over the whole suite of its version: the faults its manifest lists and
    no other; `check` on the run's transcripts agrees (offline.py); the short path changes
    no finding; a warning fails under --strict. Under the default profile, in the first
    version it breaks a rule in, the pytest plugin plays the cases of that rule and gives
    the verdict, headline and rows `check` gives those cases' transcripts of this run: one
    verdict on every road, each fixture run live once by the command line."""
    fx = next(f for f in MANIFEST["fixtures"] if f["name"] == name)
    report, transcripts = tmp_path / "report.json", tmp_path / "t"
    args = ["--agent", fixture_command(name), "--protocol", str(protocol), "--profile", profile,
            "--timeout", "5"]
    proc = run_cli(*args, "--json", str(report), "--transcripts", str(transcripts),
                   in_process=True)
    assert report.exists(), proc.stderr
    for path in sorted(transcripts.glob("*.jsonl")):  # the short path changes no finding
        assert_graded_the_same_both_ways(path)
    # one verdict: offline, the same findings and exit status (under the default profile,
    # and under acp-schema-1.21, whose marker and key rules only its transcripts show)
    if profile in (DEFAULT_PROFILE, "acp-schema-1.21"):
        assert_check_agrees(report, tmp_path / "t", proc.returncode, args)
    rule = ONE_VERDICT.get((name, protocol)) if profile == DEFAULT_PROFILE else None
    if rule is not None:  # the plugin's road: the cases of the rule the fixture breaks
        assert_breaks(plugin_agrees_with_check(
            tmp_path, request.getfixturevalue("pytester"),
            ["--acp-agent", fixture_command(name), "--acp-timeout", "5"], rule, protocol,
            load_json(report), transcripts), rule)
    strict_extra: tuple[str, ...] = ()
    # the profiles that change no step: the same run, graded by check --profile
    for under in (profile, *regraded_under(CASES, (name, protocol), profile, protocol)):
        if under != profile:
            strict_extra = ("--profile", under)
            report = tmp_path / f"{under}.json"
            proc = run_cli("check", str(transcripts), *strict_extra, "--json", str(report),
                           "--no-color")
            assert report.exists(), proc.stderr
        exp = expectations(fx, protocol, under)
        found = outcomes(load_json(report))
        for outcome in ("fail", "warn", "info"):
            for req in exp.get(outcome, []):
                assert matches(found.get(outcome, set()), req), (
                    f"{name} v{protocol} {under}: expected {outcome} {req}; got {found}")
        expected_exit = 1 if exp.get("fail") else 0
        assert proc.returncode == expected_exit, (under, proc.stdout[-3000:] + proc.stderr)
        # Exactly that rule: no fail or warn outside the expectation and its listed side effects.
        listed = exp.get("fail", []) + exp.get("warn", []) + allowed_extra(fx, protocol)
        for outcome in ("fail", "warn"):
            stray = [r for r in found.get(outcome, set()) if not any(
                r == x or r.startswith(x + "/") for x in listed)]
            assert not stray, f"{name} v{protocol} {under}: unexpected {outcome}: {stray}"
        if (name, protocol, under) in WARN_CASES:  # a warning only: it fails under --strict
            assert_warnings_fail_under_strict(transcripts, exp["warn"], tmp_path, *strict_extra)


def test_a_profile_that_changes_no_step_grades_the_recorded_run_as_it_grades_a_live_one(
        tmp_path: Path) -> None:
    """The shortcut above, held: the broken fixture whose grade the profile changes
    (``cross_kind_reuse``: ``acp-repo-2026-08-22`` has one ID space, so a thought and a
    message sharing an ID is a warning there, and fine in the default profile's per-kind
    spaces) run live under that profile reports what ``check --profile`` reports of the
    default profile's run: the same fail and warn rows, exit status and verdict."""
    profile = "acp-repo-2026-08-22"
    assert same_steps(profile, 1) and same_steps(profile, 2)
    assert not same_steps("acp-schema-1.21", 2)  # its cases and idempotency keys are steps
    assert same_steps("acp-schema-1.21", 1)
    agent = fixture_command("cross_kind_reuse")
    live = run_cli("--agent", agent, "--protocol", "2", "--profile", profile, "--timeout", "5",
                   "--json", str(tmp_path / "live.json"))
    default = run_cli("--agent", agent, "--protocol", "2", "--timeout", "5",
                      "--transcripts", str(tmp_path / "t"))
    assert default.returncode == 0, default.stdout + default.stderr  # no fault there
    again = run_cli("check", str(tmp_path / "t"), "--profile", profile,
                    "--json", str(tmp_path / "report.json"), "--no-color")
    live_report, check_report = load_json(tmp_path / "live.json"), load_json(tmp_path / "report.json")

    def faults(report: dict[str, Any]) -> set[tuple[str, str, str]]:
        return {(r["case"], r["requirement"], r["outcome"]) for r in report["results"]
                if r["outcome"] in ("fail", "warn")}

    assert faults(live_report) == faults(check_report), faults(live_report) ^ faults(check_report)
    assert any(r == "MID-A-02/cross-kind-reuse" for _, r, _ in faults(live_report))
    assert live.returncode == again.returncode, live.stdout + again.stdout
    assert live_report["summary"]["verdict"] == check_report["summary"]["verdict"]
    assert live_report["profile"] == check_report["profile"] == profile


WARN_CASES = [(n, p, pr) for n, p, pr in CASES
              if not expectations(next(f for f in MANIFEST["fixtures"] if f["name"] == n), p, pr)
              .get("fail") and expectations(next(f for f in MANIFEST["fixtures"]
                                                 if f["name"] == n), p, pr).get("warn")]


def assert_warnings_fail_under_strict(transcripts: Path, warned: list[str], tmp_path: Path,
                                     *extra: str) -> None:
    """``--strict`` changes no step, only the grades: ``check --strict`` on the transcripts a
    live run recorded fails the warned rules (exit 1), as a live ``--strict`` run would."""
    report = tmp_path / "strict.json"
    proc = run_cli("check", str(transcripts), "--strict", *extra, "--json", str(report),
                   "--no-color")
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
