"""The pytest plugin's proxy role (``--acp-proxy CMD``), tested with ``pytester``: every
test runs a real pytest in a subprocess, which runs the real fixture proxies, the
suite's agent double behind them or a real agent (``--acp-agent``).

A transparent proxy passes, a broken one fails its items with the rule and the
evidence, the option checks are the command line's usage errors (one line each), and
the findings of a real agent behind the proxy are the agent's, reported apart: the
proxy's items do not fail for them, and ``--acp-json`` gets ``NAME.agent.json`` beside
it with the command line's rows.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parents[1]
REFERENCE = shlex.join([sys.executable, "-m", "conformance.reference.agent"])

Run = Callable[..., pytest.RunResult]


def fixture_proxy(name: str) -> str:
    return shlex.join([sys.executable, str(REPO_ROOT / "fixtures" / "proxies" / f"{name}.py")]
                      ) + " {agent}"


def fixture_agent(name: str) -> str:
    return shlex.join([sys.executable, str(REPO_ROOT / "fixtures" / "agents" / f"{name}.py")])


def rows(path: Path) -> set[tuple[str, str, str]]:
    report = json.loads(path.read_text(encoding="utf-8"))
    return {(r["case"], r["requirement"], r["outcome"]) for r in report["results"]}


@pytest.fixture
def run(plugin_pytest: Run) -> Run:
    """pytest in a subprocess with only this plugin (conftest.py)."""
    return plugin_pytest


def test_a_transparent_proxy_passes_its_items(run: Run) -> None:
    result = run("--acp-proxy", fixture_proxy("transparent"), "--acp-protocol", "1",
                 "--acp-case", "proxy-grouping", "--acp-case", "proxy-opacity", "-v")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["acp-proxy::proxy-grouping?v1? PASSED*",
                                 "acp-proxy::proxy-opacity?v1? PASSED*",
                                 "verdict: PASS*"])
    assert "the agent behind the proxy" not in result.stdout.str()  # the double: no agent


def test_a_proxy_that_rewrites_ids_fails_its_items_with_the_rule_and_evidence(
        run: Run, pytester: pytest.Pytester) -> None:
    result = run("--acp-proxy", fixture_proxy("rewrites_ids"), "--acp-case", "proxy-opacity",
                 "--acp-transcripts", "t")
    result.assert_outcomes(failed=2)  # one item per case and version
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*proxy-opacity@v1: The proxy forwards*",
        "*FAIL MID-P-01: the proxy changed the messageId \"msg-a1\"*to \"px-1\"*",
        "*entries #*; expected {\"agent_side\": {*\"messageId\": \"msg-a1\"}}; "
        "actual {\"client_side\": {*\"messageId\": \"px-1\"}}",
        "transcript: t/proxy-opacity@v1.jsonl",
    ])
    result.stdout.fnmatch_lines(["FAILED acp-proxy::proxy-opacity[[]v1[]]*",
                                 "FAILED acp-proxy::proxy-opacity[[]v2[]]*"])
    for side in ("", ".agent-side"):  # both sides recorded, as on the command line
        assert (pytester.path / "t" / f"proxy-opacity@v2{side}.jsonl").is_file()


@pytest.mark.parametrize("args,message", [
    (["--acp-proxy", "cat"],
     "--acp-proxy: the command must say where the agent command goes, with {agent} "
     "(e.g. 'my-bridge --upstream {agent}')"),
    (["--acp-proxy", "cat {agent}", "--acp-client", "cat {agent}"],
     "--acp-client does not apply to the proxy role (--acp-proxy): leave it out"),
    (["--acp-proxy", "cat {agent}", "--acp-proxy-adapts", "--acp-protocol", "1"],
     "--acp-proxy-adapts runs the v2 cases (v2 behind the proxy, v1 in front): "
     "not with --acp-protocol 1"),
    (["--acp-proxy-adapts", "--acp-agent", REFERENCE],
     "--acp-proxy-adapts does not apply to the agent role (--acp-agent): leave it out"),
    (["--acp-proxy-adapts"], "--acp-proxy-adapts needs --acp-proxy"),
    (["--acp-proxy", "no-such-proxy-binary {agent}"],
     "target command not found on PATH: no-such-proxy-binary"),
    (["--acp-proxy", "cat {agent}", "--acp-case", "client-opacity"],
     "nothing to run: no proxy case for v1/v2 among client-opacity; these would run: "
     "--case proxy-opacity*"),
], ids=["no-agent-placeholder", "with-a-client", "adapts-v1", "adapts-with-an-agent",
        "adapts-alone", "missing-executable", "empty-selection"])
def test_proxy_option_errors_are_one_line_usage_errors(run: Run, args: list[str],
                                                        message: str) -> None:
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert len(errors) == 1, result.errlines
    result.stderr.fnmatch_lines([f"ERROR: acp-conformance: {message}"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_the_same_option_errors_on_the_command_line() -> None:
    """What the plugin refuses, the command line refuses too (``cmd_run``, the roles table's proxy entry)."""
    for args in (["--proxy", "cat"], ["--proxy", "cat {agent}", "--client", "cat {agent}"],
                 ["--proxy", "cat {agent}", "--proxy-adapts", "--protocol", "1"]):
        proc = run_cli(*args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_declared_adapter_runs_the_v2_cases_and_one_that_fans_out_late_fails(
        run: Run) -> None:
    ok = run("--acp-proxy", fixture_proxy("adapter_v2_to_v1"), "--acp-proxy-adapts",
             "--acp-case", "proxy-grouping", "-v")  # both versions asked: v2 behind it only
    ok.assert_outcomes(passed=1)
    ok.stdout.fnmatch_lines(["acp-proxy::proxy-grouping?v2? PASSED*"])
    late = run("--acp-proxy", fixture_proxy("fans_out_late"), "--acp-proxy-adapts",
               "--acp-case", "MID-V2-10")
    assert late.ret == pytest.ExitCode.TESTS_FAILED
    late.stdout.fnmatch_lines(["*FAIL MID-V2-10: *"])


def test_a_real_agent_behind_the_proxy_is_reported_apart_with_the_cli_rows(
        run: Run, pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The per-turn counter reuses IDs across turns: its own fault, not the transparent
    proxy's. The proxy's items pass; the agent's findings have their own section and
    ``NAME.agent.json``, with the rows the command line reports for it."""
    agent = fixture_agent("per_turn_counter")
    selection = ["--protocol", "1", "--case", "ids-across-turns", "--case", "wire-shapes"]
    result = run("--acp-proxy", fixture_proxy("transparent"), "--acp-agent", agent,
                 *[w.replace("--", "--acp-", 1) for w in selection], "--acp-json", "out.json")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK  # the session grades the proxy
    result.stdout.fnmatch_lines([
        "*acp-conformance: the agent behind the proxy*",
        "its own findings, graded on what it wrote before the proxy; not the proxy's",
        "MID-A-02/cross-turn-reuse*FAIL*",
        "verdict: FAIL",
    ])
    plugin_proxy, plugin_agent = pytester.path / "out.json", pytester.path / "out.agent.json"
    assert not any(r[2] == "fail" for r in rows(plugin_proxy))
    assert ("ids-across-turns@v1", "MID-A-02/cross-turn-reuse", "fail") in rows(plugin_agent)
    cli = run_cli("--proxy", fixture_proxy("transparent"), "--agent", agent, *selection,
                  "--json", str(tmp_path / "cli.json"), timeout=300)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert rows(plugin_proxy) == rows(tmp_path / "cli.json")
    assert rows(plugin_agent) == rows(tmp_path / "cli.agent.json")
    summary: dict[str, Any] = json.loads(plugin_agent.read_text(encoding="utf-8"))["summary"]
    cli_summary = json.loads((tmp_path / "cli.agent.json").read_text(encoding="utf-8"))
    assert summary["headline"] == cli_summary["summary"]["headline"]
    assert summary["verdict"] == "fail"


def test_the_agent_behind_travels_from_xdist_workers(run: Run, pytester: pytest.Pytester) -> None:
    agent = fixture_agent("per_turn_counter")
    result = run("--acp-proxy", fixture_proxy("transparent"), "--acp-agent", agent,
                 "--acp-protocol", "1", "--acp-case", "ids-across-turns",
                 "--acp-case", "wire-shapes", "--acp-json", "out.json",
                 "-p", "xdist.plugin", "-n", "2")
    result.assert_outcomes(passed=2)
    agent_rows = rows(pytester.path / "out.agent.json")
    assert {c for c, _, _ in agent_rows} == {"ids-across-turns@v1", "wire-shapes@v1"}
    assert ("wire-shapes@v1", "MID-A-02/cross-turn-reuse", "fail") in agent_rows


def test_acp_session_says_why_it_is_skipped_under_the_proxy_role(
        run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_vendor="""
        def test_mine(acp_session):
            acp_session.start()
    """)
    result = run("--acp-proxy", fixture_proxy("transparent"), "--acp-agent", REFERENCE,
                 "-m", "not acp", "test_vendor.py", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*acp_session drives an agent directly; --acp-agent is behind "
                                 "--acp-proxy here: run without --acp-proxy*"])
