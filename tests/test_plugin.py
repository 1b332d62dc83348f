"""The pytest plugin, tested with ``pytester`` against the reference agent and
broken fixture agents: every test runs a real pytest in a subprocess, which
runs real agent processes.
"""

from __future__ import annotations

import shlex
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parents[1]
REFERENCE = shlex.join([sys.executable, "-m", "conformance.reference.agent"])
INSTALLED = any(ep.name == "acp_conformance" for ep in metadata.entry_points(group="pytest11"))

Run = Callable[..., pytest.RunResult]


def fixture_agent(name: str) -> str:
    return shlex.join([sys.executable, str(REPO_ROOT / "fixtures" / "agents" / f"{name}.py")])


@pytest.fixture
def run(plugin_pytest: Run) -> Run:
    """pytest in a subprocess with only this plugin (conftest.py)."""
    return plugin_pytest


def test_cases_are_items_named_by_case_id(run: Run) -> None:
    picked = run("--acp-agent", REFERENCE, "--collect-only", "-q", "-m", "acp_v1",
                 "-k", "ids-across")
    assert [line for line in picked.outlines if line.startswith("acp-agent::")] == [
        "acp-agent::ids-across-turns[v1]", "acp-agent::ids-across-sessions[v1]"]
    by_requirement = run("--acp-agent", REFERENCE, "--collect-only", "-q", "-k", "MID-A-07")
    chosen = [line for line in by_requirement.outlines if line.startswith("acp-agent::")]
    assert chosen == ["acp-agent::load-fresh-process[v1]", "acp-agent::load-same-connection[v1]",
                      "acp-agent::load-while-streaming[v1]", "acp-agent::resume-v1[v1]"]


def test_reference_agent_passes_with_junit(run: Run, pytester: pytest.Pytester) -> None:
    result = run("--acp-agent", REFERENCE, "--acp-protocol", "1",
                 "-k", "ids-across-sessions or wire-shapes", "--junitxml", "junit.xml")
    result.assert_outcomes(passed=2)
    root = ET.parse(pytester.path / "junit.xml").getroot()
    cases = {tc.get("name"): tc for tc in root.iter("testcase")}
    assert set(cases) == {"ids-across-sessions[v1]", "wire-shapes[v1]"}
    for tc in cases.values():
        assert tc.get("classname") == "acp-agent"
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        assert Path(props["transcript"]).is_file()


def test_broken_agent_fails_with_evidence_transcript_and_stderr(
        run: Run, pytester: pytest.Pytester) -> None:
    noisy = pytester.makepyfile(noisy_agent=f"""
        import runpy, sys
        sys.stderr.write("stderr-marker: about to send numeric IDs\\n")
        sys.stderr.flush()
        sys.argv = [{str(REPO_ROOT / 'fixtures/agents/numeric_id.py')!r}]
        runpy.run_path(sys.argv[0], run_name="__main__")
    """)
    result = run("--acp-agent", shlex.join([sys.executable, str(noisy)]), "-k", "wire-shapes",
                 "-x", "-rN")
    result.assert_outcomes(failed=1)  # -x: the second version never ran
    out = result.stdout.str()
    assert "wire-shapes@v1:" in out and "FAIL MID-S-01/type: agent_message_chunk carries a " \
        "number messageId" in out
    assert "expected a JSON string; actual " in out and "entries #" in out
    transcript = next(line.split("transcript: ", 1)[1] for line in result.outlines
                      if line.startswith("transcript: "))
    assert Path(transcript).is_file() and transcript.endswith("wire-shapes@v1.jsonl")
    assert "target stderr (tail):" in out and "  stderr-marker: about to send numeric IDs" in out
    assert "Captured stderr (target, tail) call" in out


def test_baseline_turns_listed_fails_into_xfail_and_stale_entries_into_failures(
        run: Run, pytester: pytest.Pytester) -> None:
    baseline = pytester.makefile(".yaml", baseline="""
        expected_failures:
          - wire-shapes@v1:MID-S-01/type      # the known numeric IDs
          - ids-across-sessions@v1:MID-A-02   # passes: stale
    """)
    result = run("--acp-agent", fixture_agent("numeric_id"), "--acp-protocol", "1",
                 "-k", "wire-shapes or ids-across-sessions", "--acp-baseline", str(baseline),
                 "-rxX")
    result.assert_outcomes(xfailed=1, failed=1)
    out = result.stdout.str()
    assert "baseline lists" in out and "MID-S-01/type" in out
    assert "STALE baseline entry ids-across-sessions@v1:MID-A-02" in out
    assert "baseline: " in out and "1 stale" in out


@pytest.mark.parametrize("args,message", [
    (["--acp-agent", "no-such-agent-command-x"], "target command not found on PATH"),
    (["--acp-agent", REFERENCE, "--acp-baseline", "missing.yaml"], "cannot read baseline"),
    (["--acp-agent", REFERENCE, "--acp-case", "no-such-case"], "unknown case or requirement"),
    (["--acp-agent", REFERENCE, "--acp-profile", "nope"], "unknown profile 'nope'"),
])
def test_bad_options_are_usage_errors(run: Run, args: list[str], message: str) -> None:
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str() and "Traceback" not in result.stderr.str()


VENDOR_TEST = """
    import pytest

    @pytest.mark.parametrize("acp_protocol", [1])
    def test_ids_stay_unique_across_turns(acp_session):
        acp_session.start()
        acp_session.new_session()
        acp_session.prompt("Reply with two separate messages.")
        acp_session.step({"prompt": {"text": "Reply with two separate messages."}})
        assert acp_session.findings("MID-A-02")  # graded, not vacuous
        acp_session.assert_conformant("MID-A-02")
"""


def test_vendor_fixture_passes_on_reference_and_fails_on_broken(
        run: Run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_vendor=VENDOR_TEST)
    good = run("--acp-agent", REFERENCE, "-m", "not acp", "test_vendor.py")
    good.assert_outcomes(passed=1)  # -m "not acp" deselects the suite's own cases
    bad = run("--acp-agent", fixture_agent("per_turn_counter"), "-m", "not acp",
              "test_vendor.py")
    bad.assert_outcomes(failed=1)
    out = bad.stdout.str()
    assert "FAIL MID-A-02/cross-turn-reuse" in out
    assert "acp-conformance transcript" in out
    saved = next(line.strip() for line in bad.outlines if line.strip().endswith(".jsonl"))
    assert Path(saved).is_file()
    none = run("test_vendor.py", "-rs")
    none.assert_outcomes(skipped=1)
    assert "no agent to test: run pytest with --acp-agent CMD" in none.stdout.str()


def test_plugin_loads_through_its_pytest11_entry_point(pytester: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if not INSTALLED:
        pytest.skip("the package is not installed here, so no entry point is registered")
    (ep,) = [ep for ep in metadata.entry_points(group="pytest11") if ep.name == "acp_conformance"]
    assert ep.value == "conformance.pytest_plugin"
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    result = pytester.runpytest_subprocess("--acp-agent", REFERENCE, "--collect-only", "-q",
                                           "-p", "no:cacheprovider", timeout=300)
    assert "acp-agent::wire-shapes[v1]" in result.outlines


CLIENTS = REPO_ROOT / "fixtures" / "clients"


def test_client_cases_against_reference_and_broken_clients(run: Run) -> None:
    profile = str(CLIENTS / "reference.yaml")
    good = run("--acp-client", shlex.join([sys.executable, "-m", "conformance.client.reference",
                                           "--agent-cmd", "{agent}"]),
               "--acp-client-profile", profile, "--acp-protocol", "1", "-k", "client-opacity",
               "-v")
    good.assert_outcomes(passed=1)
    assert any("acp-client::client-opacity[v1] PASSED" in line for line in good.outlines)
    bad = run("--acp-client", shlex.join([sys.executable, str(CLIENTS / "case_insensitive.py"),
                                          "--agent-cmd", "{agent}"]),
              "--acp-client-profile", profile, "--acp-protocol", "1", "-k", "client-opacity")
    bad.assert_outcomes(failed=1)
    out = bad.stdout.str()
    assert "FAIL MID-C-02/merged: distinct IDs 'msg-a1' and 'MSG-A1'" in out
    assert "transcript: " in out


def test_client_usage_errors(run: Run) -> None:
    result = run("--acp-client", f"{sys.executable} -c pass", "--acp-protocol", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "must say where the agent command goes" in result.stderr.str()


def test_an_in_process_client_adapter_runs_the_client_cases(run: Run) -> None:
    adapter = f"{CLIENTS / 'sorted_by_id.py'}:make_client"
    result = run("--acp-client-adapter", adapter, "--acp-case", "client-display-order",
                 "--acp-protocol", "1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL MID-C-02/order: *", f"*case(s) against {adapter}: *"])
    ok = run("--acp-client-adapter", "conformance.client.reference.adapter:make_client",
             "--acp-case", "client-display-order", "--acp-protocol", "1")
    ok.assert_outcomes(passed=1)


@pytest.mark.parametrize("args,message", [
    (["--acp-client-adapter", "no_such_module:make"], "*cannot import no_such_module*"),
    (["--acp-client-adapter", "m:f", "--acp-client", "c {agent}"],
     "*give --acp-client CMD or --acp-client-adapter MODULE:FACTORY, not both"),
    (["--acp-client-adapter", "m:f", "--acp-client-profile", "p.yaml"],
     "*--acp-client-profile drives a client process; an adapter reports its messages itself"),
], ids=["bad-adapter", "adapter-and-command", "adapter-and-profile"])
def test_client_adapter_usage_errors(run: Run, args: list[str], message: str) -> None:
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_the_console_of_a_plugin_run_shows_no_secret(run: Run,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A secret-looking variable of the environment (what the agent inherits) is masked in
    the summary line that names the agent command and in a failing case's description."""
    secret = "ghp_pluginTOKEN93d1f"
    monkeypatch.setenv("ACP_TEST_PLUGIN_TOKEN", secret)
    agent = shlex.join(["env", f"UNUSED={secret}", sys.executable,
                        str(REPO_ROOT / "fixtures" / "agents" / "numeric_id.py")])
    result = run("--acp-agent", agent, "--acp-protocol", "1", "-k", "wire-shapes")
    result.assert_outcomes(failed=1)
    out = result.stdout.str() + result.stderr.str()
    assert secret not in out
    assert "UNUSED=***" in out  # the summary line names the command, masked
    assert "MID-S-01/type" in out  # the failure is still told
