"""One verdict: the same traffic gets the same grade live and offline.

Every broken fixture (agents and clients) x protocol is run live with --transcripts,
then ``check`` grades the saved transcripts: the findings, the summary and the exit
code must be identical, because both grade each case from the scope its transcript
header records (conformance/lifecycle.py). The comparison (``offline.py``) is made
on the live run each fixture's own test makes (test_agent_suite.py under the default
profile, test_client_fixtures.py), so each fixture runs live once. Here: the grading
options are recorded and reproduced, and a transcript with no recorded scope is
graded with the default scope, and its case says so.
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, run_cli
from helpers import assert_one_verdict, cli_json, every_road, plugin, rows
from offline import assert_check_agrees

pytest_plugins = ["pytester"]


def live_then_check(args: list[str], tmp_path: Path) -> None:
    live_json = tmp_path / "live.json"
    live = run_cli(*args, "--transcripts", str(tmp_path / "t"), "--json", str(live_json),
                   "--no-color", timeout=300)
    assert live_json.exists(), live.stdout + live.stderr
    assert_check_agrees(live_json, tmp_path / "t", live.returncode, args)


def test_grading_options_are_recorded_and_reproduced(tmp_path: Path) -> None:
    command = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"
    live_then_check(["--agent", command, "--protocol", "1", "--cross-turn-reuse", "warn",
                     "--strict-ids", "--case", "ids-across-turns"], tmp_path)
    report = json.loads((tmp_path / "check.json").read_text(encoding="utf-8"))
    reuse = [r for r in report["results"] if r["requirement"] == "MID-A-02/cross-turn-reuse"]
    assert reuse and {r["outcome"] for r in reuse} == {"warn"}  # as recorded, not the default


def test_a_transcript_without_scope_is_graded_by_default_and_says_so(tmp_path: Path) -> None:
    command = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"
    proc = run_cli("--agent", command, "--protocol", "1", "--case", "ids-across-turns",
                   "--transcripts", str(tmp_path / "t"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    path = tmp_path / "t" / "ids-across-turns@v1.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    for key in ("scope", "ended", "requirements"):
        header.pop(key)
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    check = run_cli("check", str(foreign), "--json", str(out))
    assert check.returncode == 1
    report = json.loads(out.read_text(encoding="utf-8"))
    assert "no grading scope recorded" in report["cases"][0]["note"]
    assert "no grading scope recorded" in check.stdout
    assert any(r["requirement"] == "MID-A-02/cross-turn-reuse" and r["outcome"] == "fail"
               for r in report["results"])


# --------------------------------------------------------------------------
# One verdict on every road: the CLI, `check` on its transcripts, the pytest plugin
# (one run engine, conformance/engine.py; one grading, conformance/grading.py)
# --------------------------------------------------------------------------

REFUSES = REPO_ROOT / "fixtures" / "harness" / "refuses_request.py"
TRANSPARENT = REPO_ROOT / "fixtures" / "proxies" / "transparent.py"
CASE_CLIENT = REPO_ROOT / "fixtures" / "clients" / "case_insensitive.py"
REFERENCE = shlex.join([sys.executable, "-m", "conformance.reference.agent"])


def test_an_agent_that_refuses_session_new_fails_on_every_road(
        tmp_path: Path, pytester: pytest.Pytester) -> None:
    agent = f"{sys.executable} {REFUSES}"
    selection = ["--case", "ids-across-turns", "--case", "prompt-lifecycle",
                 "--protocol", "1"]
    roads = every_road(tmp_path, pytester, ["--agent", agent], ["--acp-agent", agent],
                       selection)
    assert_one_verdict(roads, "fail")
    assert set(roads["cli"][1]["unfinished"]) == {"1"}
    # pytest: one item per case, each a failure with its reason, never a silent skip
    outcome = roads["pytest"][2]
    outcome.assert_outcomes(failed=2)
    outcome.stdout.fnmatch_lines(
        ["*refused session/new*the run fails: no v1 case ran to its end*"])


def test_the_same_agent_behind_a_transparent_proxy_fails_the_run(
        tmp_path: Path, pytester: pytest.Pytester) -> None:
    """Behind a transparent proxy the refusing agent is what it is alone: not a PASS of
    nothing. `check` on the proxy run's transcripts and the plugin's proxy role agree,
    row for row, and the plugin's item fails with the reason."""
    agent = f"{sys.executable} {REFUSES}"
    proxy = f"{shlex.quote(sys.executable)} {shlex.quote(str(TRANSPARENT))} {{agent}}"
    roads = every_road(tmp_path, pytester, ["--proxy", proxy, "--agent", agent],
                       ["--acp-proxy", proxy, "--acp-agent", agent],
                       ["--case", "ids-across-turns", "--protocol", "1"])
    assert_one_verdict(roads, "fail")
    assert "verdict: FAIL" in roads["cli"][2]
    assert roads["cli"][1]["unfinished"]["1"].startswith("no v1 case ran to its end")
    outcome = roads["pytest"][2]
    outcome.assert_outcomes(failed=1)
    outcome.stdout.fnmatch_lines(["*the run fails: no v1 case ran to its end*"])


def test_a_client_run_without_profile_is_a_partial_pass_on_every_road(
        tmp_path: Path, pytester: pytest.Pytester) -> None:
    """A broken client the suite cannot read without a profile passes only partially: the
    headline says what was measured, the same on every road, and the console says, in
    one line, what it cannot observe."""
    client = " ".join(shlex.quote(w) for w in (sys.executable, str(CASE_CLIENT),
                                                "--agent-cmd", "{agent}"))
    roads = every_road(tmp_path, pytester, ["--client", client], ["--acp-client", client],
                       ["--case", "client-opacity", "--protocol", "1"])
    assert_one_verdict(roads, "pass")
    live = roads["cli"][1]
    headline = live["summary"]["headline"]
    cov = live["coverage"]["v1"]
    assert cov["exercised"] < cov["musts"] and "MID-C-02" in cov["not_exercised"], cov
    assert headline == (f"PASS, partial: {cov['exercised']} of {cov['musts']} MUST "
                        "requirements exercised (not exercised: "
                        f"{', '.join(cov['not_exercised'])})"), headline
    assert live["summary"]["partial"] is True
    out = roads["cli"][2]
    assert f"verdict: {headline}" in out
    assert sum("no --client-profile: the suite cannot read what the client shows" in line
               for line in out.splitlines()) == 1


def test_the_reference_agent_is_a_full_pass_with_its_coverage(tmp_path: Path) -> None:
    code, report, out = cli_json(tmp_path, "ref", "--agent", REFERENCE, "--protocol", "1",
                                 "--case", "ids-across-turns")
    assert code == 0, out
    cov = report["coverage"]["v1"]
    assert set(cov) == {"exercised", "musts", "not_exercised", "not_advertised"}
    # one case exercises only some MUSTs: the headline says so, never a bare PASS
    assert cov["exercised"] < cov["musts"]
    assert report["summary"]["headline"].startswith("PASS, partial:")


@pytest.mark.parametrize("selection,plugin_selection", [
    (["--case", "load-fresh-process", "--protocol", "2"],
     ["--acp-case", "load-fresh-process", "--acp-protocol", "2"]),
    (["--case", "client-opacity"], ["--acp-case", "client-opacity"]),  # a client case
], ids=["no-v2-case", "client-case-for-an-agent"])
def test_an_empty_selection_is_a_usage_error_on_every_road(
        selection: list[str], plugin_selection: list[str], pytester: pytest.Pytester) -> None:
    proc = run_cli("--agent", REFERENCE, *selection)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing to run: no agent case" in lines[0], proc.stderr
    assert "these would run: --case " in lines[0]
    assert "verdict" not in proc.stdout
    result = plugin(pytester, "--acp-agent", REFERENCE, *plugin_selection)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*nothing to run: no agent case*these would run: --case *"])


def test_a_fuzz_counterexample_gets_the_same_rows_from_fuzz_check_and_replay(
        tmp_path: Path) -> None:
    """The fuzzer grades its streams with the one grading of a recorded case: the fails it
    reports for a saved counterexample are the fails `check` finds in the saved file, and
    `replay` of it fails on the same rule."""
    from conformance.checks import Options
    from conformance.fuzz import regressions
    from conformance.fuzz.client_fuzz import (
        ClientChoice,
        ClientTarget,
        replay_client,
        run_client_fuzz,
    )
    from conformance.fuzz.settings import get_effort

    client = f"{REPO_ROOT / 'fixtures' / 'clients' / 'sorted_by_id'}.py:make_client"
    result = run_client_fuzz(ClientTarget("sorted_by_id", adapter=client), get_effort("ci"),
                             seed=3, strict=True, max_failures=1)
    [failure] = result.failures
    fuzz_rows = {(f.requirement, f.outcome.value) for f in failure.findings}
    saved = regressions.save(
        tmp_path, fingerprint_=regressions.failure_fingerprint(failure),
        header=regressions.regression_header(failure, result, Options(), True),
        entries=failure.transcript.entries)
    code, checked, out = cli_json(tmp_path, "check", "check", str(saved.path), "--strict")
    assert code == 1, out
    check_rows = {(r["requirement"], r["outcome"]) for r in checked["results"]
                  if r["outcome"] == "fail"}
    assert fuzz_rows == check_rows, (fuzz_rows, check_rows)
    replayed = replay_client(regressions.read(saved.path),
                             ClientChoice(None, client, timeout=5.0), options=Options(),
                             strict=True)
    assert replayed.status == regressions.STILL_FAILING
    assert {(f.requirement, f.outcome.value) for f in replayed.findings} == {
        (failure.requirement, "fail")}


def test_a_case_not_run_beside_one_that_ran_is_a_skip_and_the_run_passes_on_every_road(
        tmp_path: Path, pytester: pytest.Pytester) -> None:
    """The other side of the engine's conclusion: a refused session/load ends its case as
    not run, but another case of the version ran to its end, so the run passes on every
    road and the pytest item of the refused case is a skip with its reason."""
    agent = f"{sys.executable} {REFUSES} --refuse session/load"
    roads = every_road(tmp_path, pytester, ["--agent", agent], ["--acp-agent", agent],
                       ["--case", "load-fresh-process", "--case", "ids-across-turns",
                        "--protocol", "1"])
    assert_one_verdict(roads, "pass")
    cases = {c["case"]: c for c in roads["cli"][1]["cases"]}
    assert cases["load-fresh-process@v1"]["reason"] == "not_run", cases
    assert "reason" not in cases["ids-across-turns@v1"]
    outcome = roads["pytest"][2]
    outcome.assert_outcomes(passed=1, skipped=1)


def _agent_fixtures() -> list[tuple[str, int, str]]:
    """(fixture, protocol, the first rule it must break there) for every agent fixture of
    the manifest that breaks one under the default profile."""
    import yaml

    manifest = yaml.safe_load((REPO_ROOT / "fixtures" / "agents" / "manifest.yaml")
                              .read_text(encoding="utf-8"))
    out = []
    for f in manifest["fixtures"]:
        for p in f["protocols"]:
            expect = (f.get("expect") or {}).get(f"v{p}") or {}
            if "profiles" in expect:
                expect = expect["profiles"].get(manifest["profiles"][0]) or {}
            rules = [r for grade in ("fail", "warn") for r in expect.get(grade) or []]
            if rules:
                out.append((f["name"], p, rules[0]))
                break
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name,protocol,rule", _agent_fixtures(),
                         ids=[f"{n}-v{p}" for n, p, _ in _agent_fixtures()])
def test_every_agent_fixture_gets_one_verdict_on_every_road(
        tmp_path: Path, pytester: pytest.Pytester, name: str, protocol: int,
        rule: str) -> None:
    """Every broken agent, on the cases of the rule it breaks: the CLI, `check` on its
    transcripts and the pytest plugin give one verdict, one headline and one set of
    (case, rule, outcome) rows."""
    agent = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / f'{name}.py'}"
    roads = every_road(tmp_path, pytester, ["--agent", agent], ["--acp-agent", agent],
                       ["--case", rule, "--protocol", str(protocol)])
    verdict = roads["cli"][1]["summary"]["verdict"]
    assert_one_verdict(roads, verdict)
    assert any(r[1].startswith(rule) and r[2] in ("fail", "warn") for r in rows(roads["cli"][1]))



def _first_rule(expect: dict[str, Any], protocols: list[int]) -> tuple[int, str | None]:
    """The first protocol in which a fixture breaks a rule, and that rule (fail before
    warn); for a fixture that breaks nothing, its first protocol and None."""
    for p in protocols:
        graded = expect.get(f"v{p}") or {}
        rules = [r for grade in ("fail", "warn") for r in graded.get(grade) or []]
        if rules:
            return p, rules[0]
    return protocols[0], None


@functools.lru_cache(maxsize=1)
def _bundled_cases() -> list[Any]:
    from conformance import cases as casemod

    return list(casemod.load_dir(None))


def _first_case(rule: str | None, protocol: int, ids: list[str],
                profile: str | None = None) -> str:
    """The first of ``ids`` that applies to ``protocol`` (under ``profile``, by default the
    default one) and lists ``rule`` (a sub-rule: its requirement); with no rule, or a rule
    every case grades (MID-C-08), the first that applies."""
    from conformance.profiles import DEFAULT_PROFILE

    by_id = {c.id: c for c in _bundled_cases()}
    applies = [i for i in ids if by_id[i].applies_to(protocol, profile or DEFAULT_PROFILE)]
    return next((i for i in applies if rule is not None
                 and rule.split("/", 1)[0] in by_id[i].requirements), applies[0])


CLIENTS = REPO_ROOT / "fixtures" / "clients"
PROXIES = REPO_ROOT / "fixtures" / "proxies"


def _client_fixtures() -> list[tuple[str, int, str | None, str]]:
    """(fixture, protocol, the first rule it breaks there or None, the case) for every
    client fixture of the manifest: the first of its manifest cases that grades the rule."""
    import yaml

    manifest = yaml.safe_load((CLIENTS / "manifest.yaml").read_text(encoding="utf-8"))
    out = []
    for entry in manifest["clients"]:
        protocol, rule = _first_rule(entry["expect"], sorted(int(v[1:]) for v in entry["expect"]))
        out.append((entry["file"][:-3], protocol, rule,
                    _first_case(rule, protocol, entry["cases"], entry.get("acp_profile"))))
    return out


def _client_targets(name: str) -> tuple[list[str], list[str]]:
    """The command line's and the plugin's options for a client fixture, as its manifest
    says (tests/test_client_fixtures.py): a profile, an adapter, or the wire only."""
    import yaml

    manifest = yaml.safe_load((CLIENTS / "manifest.yaml").read_text(encoding="utf-8"))
    entry = next(e for e in manifest["clients"] if e["file"] == f"{name}.py")
    path = CLIENTS / entry["file"]
    command = shlex.join([sys.executable, str(path), "--agent-cmd", "{agent}",
                          *entry.get("args", [])])
    cli, plug = ["--client", command, "--timeout", "20"], ["--acp-client", command,
                                                            "--acp-timeout", "20"]
    if entry["run"] == "adapter":
        cli, plug = (["--client-adapter", f"{path}:make_client"],
                     ["--acp-client-adapter", f"{path}:make_client"])
    elif entry["run"] != "wire":
        cli += ["--client-profile", str(CLIENTS / entry["profile"])]
        plug += ["--acp-client-profile", str(CLIENTS / entry["profile"])]
    if "acp_profile" in entry:  # a rule only that profile grades
        cli += ["--profile", entry["acp_profile"]]
        plug += ["--acp-profile", entry["acp_profile"]]
    return cli, plug


def _proxy_fixtures() -> list[tuple[str, int, str | None, str, bool]]:
    """(fixture, protocol, the first rule it breaks there or None, the selector, adapts)
    for every proxy fixture of the manifest: the cases of the rule (proxy cases are short:
    the suite's agent double plays them), or for one that breaks nothing the first case."""
    import yaml

    manifest = yaml.safe_load((PROXIES / "manifest.yaml").read_text(encoding="utf-8"))
    ids = [c.id for c in _bundled_cases() if c.role == "proxy"]
    out = []
    for entry in manifest["fixtures"]:
        protocol, rule = _first_rule(entry["expect"], entry["protocols"])
        out.append((entry["name"], protocol, rule, rule or _first_case(None, protocol, ids),
                    bool(entry.get("adapts"))))
    return out


def assert_breaks(roads: dict[str, Any], rule: str | None) -> None:
    """One verdict on every road, and the rule the fixture breaks among the rows (a
    fixture that breaks nothing passes)."""
    verdict = roads["cli"][1]["summary"]["verdict"]
    assert_one_verdict(roads, verdict)
    if rule is None:
        assert verdict == "pass", roads["cli"][2]
    else:
        assert any(r[1].startswith(rule) and r[2] in ("fail", "warn")
                   for r in rows(roads["cli"][1])), roads["cli"][2]


CLIENT_FIXTURES = _client_fixtures()
PROXY_FIXTURES = _proxy_fixtures()


@pytest.mark.slow
@pytest.mark.parametrize("name,protocol,rule,case", CLIENT_FIXTURES,
                         ids=[f"{n}-v{p}" for n, p, _, _ in CLIENT_FIXTURES])
def test_every_client_fixture_gets_one_verdict_on_every_road(
        tmp_path: Path, pytester: pytest.Pytester, name: str, protocol: int,
        rule: str | None, case: str) -> None:
    """Every client fixture, driven as its manifest says, on one case of the rule it breaks
    (the first of its manifest cases that grades it; a fixture that breaks nothing: its
    first case): the CLI, `check` on its transcripts and the pytest plugin give one
    verdict, one headline and one set of (case, rule, outcome) rows. Every fixture goes
    through every road (an adapter through the plugin's --acp-client-adapter). The 25
    take about 3 minutes serially on two shared cores (the two one-shot clients that
    leave the probe unanswered about 20 s each)."""
    cli, plug = _client_targets(name)
    roads = every_road(tmp_path, pytester, cli, plug,
                       ["--case", case, "--protocol", str(protocol)])
    assert_breaks(roads, rule)


@pytest.mark.slow
@pytest.mark.parametrize("name,protocol,rule,case,adapts", PROXY_FIXTURES,
                         ids=[f"{n}-v{p}" for n, p, _, _, _ in PROXY_FIXTURES])
def test_every_proxy_fixture_gets_one_verdict_on_every_road(
        tmp_path: Path, pytester: pytest.Pytester, name: str, protocol: int,
        rule: str | None, case: str, adapts: bool) -> None:
    """Every proxy fixture, with the suite's agent double behind it, on the cases of the
    rule it breaks (a fixture that breaks nothing: the first proxy case):
    the CLI, `check` on its transcripts and the plugin's proxy role give one verdict, one
    headline and one set of (case, rule, outcome) rows. The 12 take about 1.5 minutes
    serially on two shared cores."""
    command = f"{shlex.join([sys.executable, str(PROXIES / f'{name}.py')])} {{agent}}"
    adapt = ["--proxy-adapts"] if adapts else []
    roads = every_road(tmp_path, pytester, ["--proxy", command, *adapt],
                       ["--acp-proxy", command, *[f"--acp-{a[2:]}" for a in adapt]],
                       ["--case", case, "--protocol", str(protocol)])
    assert_breaks(roads, rule)
