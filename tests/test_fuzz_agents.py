"""Agent fuzzing against live processes: the reference agent and broken ones.

The fuzzer is never told which rule a broken agent breaks: it runs with
``strict`` (so SHOULD breaches count) and must come back with a rule the
fixture's manifest names, a counterexample shrunk by replaying it, a regression
file, and a replay that still fails on the fixture and passes on the reference.
Runs use the ``ci`` effort with fixed seeds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, run_cli, v1_only_agent
from helpers import fixture_target, reference_target, regrade_offline

from conformance.checks import Options
from conformance.cli import main
from conformance.fuzz import regressions
from conformance.fuzz.agent_fuzz import run_agent_fuzz
from conformance.fuzz.agent_machine import AgentFuzzConfig
from conformance.fuzz.grading import FuzzResult
from conformance.fuzz.player import AgentTarget
from conformance.fuzz.settings import get_effort

MANIFEST = {fx["name"]: fx for fx in yaml.safe_load(
    (REPO_ROOT / "fixtures" / "agents" / "manifest.yaml").read_text())["fixtures"]}
CI = get_effort("ci")


def known_rules(name: str) -> set[str]:
    """Every rule the manifest says the fixture trips, as expected or on the way."""
    fx = MANIFEST[name]
    out: set[str] = set()
    for version in fx["expect"].values():
        groups = version.get("profiles", {}).values() if "profiles" in version else [version]
        for g in groups:
            for rules in g.values():
                out.update(rules)
    for rules in (fx.get("may_also") or {}).values():
        out.update(rules)
    return out


def names(found: set[str], rules: set[str]) -> bool:
    return any(f == r or f.startswith(r + "/") for f in found for r in rules)


def fuzz(target: AgentTarget, *, seed: int, max_failures: int | None = 1,
         max_examples: int | None = None) -> FuzzResult:
    effort = get_effort("ci", max_examples=max_examples)
    return run_agent_fuzz(AgentFuzzConfig(target, strict=True, max_failures=max_failures),
                          effort, seed)


def test_reference_agent_survives_the_ci_profile(tmp_path: Path) -> None:
    result = fuzz(reference_target(tmp_path), seed=20261129, max_failures=None)
    assert result.failures == [], [(f.requirement, f.steps) for f in result.failures]
    assert result.examples >= CI.max_examples
    assert result.notes == []
    passed = {r for rows in result.coverage.values() for r, f in rows.items()
              if f.outcome.value == "pass"}
    assert len(passed) >= 15  # the generated runs really exercised the rules


def test_broken_agent_is_found_shrunk_saved_and_replayed(tmp_path: Path) -> None:
    """A cancel at a generated moment: the update after the cancelled end of the turn."""
    name = "update_after_cancel"
    target = fixture_target(name, tmp_path / "state")
    result = fuzz(target, seed=3)
    assert len(result.failures) == 1
    failure = result.failures[0]
    assert names({failure.requirement}, known_rules(name)), failure.requirement
    assert result.time_to_first_failure is not None
    assert len(failure.steps) <= failure.found_steps
    # The fault races the cancel, so on a busy machine a shrink attempt may not reproduce
    # it and a step that changes nothing can stay (seen: a restart before any session)
    essential = [s for s in failure.steps if s != "restart"]
    assert essential[:2] == ["start", "new_session"], failure.steps
    assert any("cancel_after" in s.get("prompt", {}) for s in essential[2:]
               if isinstance(s, dict))

    fp = regressions.failure_fingerprint(failure)
    saved = regressions.save(tmp_path / "lib", fingerprint_=fp,
                             header=regressions.regression_header(failure, result, Options(), True),
                             entries=failure.transcript.entries)
    assert saved.path.name == f"{fp}.jsonl" and not saved.existed
    again = regressions.save(tmp_path / "lib", fingerprint_=fp, header={}, entries=[])
    assert again.existed  # the same bug twice collapses into one file

    reg = regressions.read(saved.path)
    assert reg.steps == failure.steps and reg.requirement == failure.requirement
    # The run recorded what it graded, as a suite case does: `check` of the file (and the
    # offline regrade) grades it from that header, and finds what the fuzzer found.
    assert reg.header["scope"]["role"] == "agent" and reg.header["scope"]["rules"] == "all"
    offline = regrade_offline(reg)
    assert {(f.requirement, f.outcome) for f in offline} == {
        (f.requirement, f.outcome) for f in failure.findings}
    # A cancel at a generated moment races the turn: on a busy machine the turn may end
    # before the agent reads the cancel (no cancelled end, no fault), so the file is
    # replayed as `replay --attempts` does: still failing if any of three attempts fails,
    # fixed only if none does (the reference agent, below)
    with_options = {"options": Options(), "strict": True, "cwd": str(tmp_path), "attempts": 3}
    still = regressions.replay_agent(reg, target, **with_options)
    assert still.status == regressions.STILL_FAILING, still.note
    fixed = regressions.replay_agent(reg, reference_target(tmp_path / "state"), **with_options)
    assert fixed.status == regressions.FIXED, [f.message for f in fixed.findings]


def test_a_seed_repeats_the_run(tmp_path: Path) -> None:
    """The same seed generates the same runs: the first failing run's steps are equal."""
    target = fixture_target("numeric_id", tmp_path)
    config = AgentFuzzConfig(target, strict=True, max_failures=1, shrink_attempts=0)
    runs = [run_agent_fuzz(config, get_effort("ci", max_examples=3), 99) for _ in range(2)]
    assert runs[0].failures
    assert [f.steps for f in runs[0].failures] == [f.steps for f in runs[1].failures]


def test_a_refused_version_is_noted_not_failed(tmp_path: Path) -> None:
    script = v1_only_agent(tmp_path)
    target = AgentTarget([sys.executable, str(script)], "v1 only",
                         {"ACP_REFERENCE_STATE_DIR": str(tmp_path)})
    result = run_agent_fuzz(AgentFuzzConfig(target, strict=True),
                            get_effort("ci", max_examples=4), seed=7)
    assert result.failures == []
    assert any(n.startswith("v2: not testable") for n in result.notes), result.notes
    assert set(result.coverage) == {1}


def test_time_budget_ends_generation(tmp_path: Path) -> None:
    effort = get_effort("dev", time_budget=0.5)
    result = run_agent_fuzz(AgentFuzzConfig(reference_target(tmp_path)), effort, seed=5)
    assert result.failures == []
    assert 1 <= result.examples < effort.max_examples


def test_a_budget_spent_before_the_first_run_still_plays_one(tmp_path: Path) -> None:
    """A time budget used up by the start-up (here a microsecond; on a busy machine half a
    second can be) still plays one run: a fuzz run never ends with nothing generated."""
    effort = get_effort("dev", time_budget=1e-6)
    result = run_agent_fuzz(AgentFuzzConfig(reference_target(tmp_path)), effort, seed=5)
    assert result.failures == []
    assert result.examples == 1


def test_cli_fuzz_saves_and_replay_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The real command line finds, shrinks and saves; replay and check read the file."""
    agent = f"{sys.executable} fixtures/agents/numeric_id.py"
    lib = tmp_path / "lib"
    env = f"ACP_REFERENCE_STATE_DIR={tmp_path}"
    proc = run_cli("fuzz", "--agent", agent, "--effort", "ci", "--seed", "1234",
                   "--max-failures", "1", "--regressions", str(lib), "--agent-env", env,
                   timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "seed 1234" in proc.stdout
    assert "FAIL MID-S-01/type" in proc.stdout
    assert ">>" in proc.stdout  # the transcript marks the evidence
    (saved,) = lib.glob("*.jsonl")
    assert saved.name.startswith("mid-s-01-type-")

    # The same commands in-process (the agent target still runs as a process).
    monkeypatch.chdir(REPO_ROOT)  # the recorded target is relative to the repository
    assert main(["replay", str(lib), "--agent-env", env]) == 1
    assert capsys.readouterr().out.startswith("STILL FAILING")
    reference = f"{sys.executable} -m conformance.reference.agent"
    assert main(["replay", str(saved), "--agent", reference, "--agent-env", env]) == 0
    assert capsys.readouterr().out.startswith("FIXED")
    assert main(["check", str(saved)]) == 1
    assert "MID-S-01/type" in capsys.readouterr().out


def test_fuzz_help_does_not_load_hypothesis() -> None:
    code = ("import sys; from conformance.cli import main; rc = main(['fuzz', '--help']); "
            "rc2 = main(['replay', '--help']); "
            "print(rc, rc2, 'hypothesis' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                         text=True, cwd=REPO_ROOT, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "0 0 False", out.stdout + out.stderr
    assert "--max-examples" in out.stdout and "--effort" in out.stdout


@pytest.mark.parametrize("args,message", [
    ([], "nothing to fuzz"),
    (["--agent", "x", "--client", "y {agent}"], "different sides"),
    (["--agent", "x", "--effort", "huge"], "invalid choice"),
    (["--agent", "x", "--max-examples", "0"], "--max-examples must be at least 1"),
    (["--agent", "no-such-agent-command-here"], "not found"),
])
def test_fuzz_usage_errors_are_one_line(args: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("replay_with", [
    {"client_adapter": {"module": "m"}}, {"client": 5}, {"client_profile": ["p.yaml"]},
    "fixtures/clients/case_insensitive.py:make_client", [],
])
def test_replay_refuses_a_recorded_client_of_the_wrong_type(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], replay_with: object) -> None:
    """A client regression file whose replay_with (the client it was found on) is edited:
    one line naming the field, where an object for the adapter ended replay with an
    internal error (found by editing regression files at random)."""
    source = REPO_ROOT / "fixtures" / "regressions" / "mid-c-02-merged-772c8e90bc.jsonl"
    regressions.read(source)  # the file as saved is read
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    header["replay_with"] = replay_with
    edited = tmp_path / "edited.jsonl"
    edited.write_text(json.dumps(header) + "\n" + "".join(lines[1:]), encoding="utf-8")
    assert main(["replay", str(edited)]) == 2
    err = capsys.readouterr().err
    assert err == (f"acp-conformance: error: {edited}:1: header 'replay_with' must be an "
                   "object whose client, client_adapter, client_profile are strings (is the "
                   "header edited?)\n")


def test_replay_refuses_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"format": "acp-conformance-transcript", "version": 1}\n')
    assert main(["replay", str(plain), "--agent", "true"]) == 2
    err = capsys.readouterr().err
    assert "not a regression file" in err and len(err.splitlines()) == 1
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such regression file" in capsys.readouterr().err
