"""One verdict: the same traffic gets the same grade live and offline.

Every broken fixture (agents and clients) x protocol is run live with --transcripts,
then ``check`` grades the saved transcripts: the findings, the summary and the exit
code must be identical, because both grade each case from the scope its transcript
header records (conformance/lifecycle.py). The comparison (``offline.py``) is made
on the live run each fixture's own test makes (test_agent_suite.py under the default
profile, test_client_fixtures.py), so each fixture runs live once. Here: the grading
options are recorded and reproduced, and a transcript with no recorded scope is
graded with the default scope, and its case says so. Every agent, client and proxy
fixture goes through the pytest plugin's road in its own sweep (test_agent_suite.py,
test_client_fixtures.py, test_proxy.py), against `check` of that sweep's live run
(helpers.plugin_agrees_with_check), so no fixture is run live twice by the command line.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli
from helpers import assert_one_verdict, cli_json, every_road, plugin
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
