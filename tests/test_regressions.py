"""The committed regression library (fixtures/regressions/), replayed for real.

Every file was written by ``acp-conformance fuzz`` against a broken fixture. Each
must: grade offline to its recorded finding (what ``check`` does); carry the
fingerprint its own content gives; replay STILL FAILING against the fixture it
came from; and replay FIXED against the reference target of its side (for a
file with a model script, the correct LLM-backed fixture agent behind a scripted
model server playing that script).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli
from helpers import expected_fingerprint, regrade_offline

from conformance import profiles
from conformance.checks import Options
from conformance.cli.demo import reference_agent_command
from conformance.fuzz import regressions
from conformance.fuzz.client_fuzz import ClientChoice, replay_client
from conformance.fuzz.player import AgentTarget
from conformance.modelserver.server import ModelServer

LIBRARY = REPO_ROOT / "fixtures" / "regressions"
FILES = sorted(LIBRARY.glob("*.jsonl"))
REFERENCE_ADAPTER = "conformance.client.reference:make_client"


def options_of(reg: regressions.Regression) -> Options:
    return Options(profile=profiles.get(str(reg.header.get("profile", profiles.DEFAULT_PROFILE))))


def recorded_agent(reg: regressions.Regression, state: Path,
                   command: str | None = None) -> AgentTarget:
    """The header's target (or ``command``), run from the repository root with this
    interpreter."""
    command = command or reg.target
    assert command is not None
    argv = shlex.split(command)
    argv = [sys.executable if argv[0].startswith("python") else argv[0]] + [
        str(REPO_ROOT / a) if (REPO_ROOT / a).is_file() else a for a in argv[1:]]
    return AgentTarget(argv, command, {"ACP_REFERENCE_STATE_DIR": str(state)})


def client_args(adapter: str) -> ClientChoice:
    return ClientChoice(adapter=adapter, timeout=5.0)


def test_the_library_has_both_sides() -> None:
    roles = {regressions.read(f).role for f in FILES}
    assert roles == {"agent", "client"}, [f.name for f in FILES]


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_file_grades_offline_and_keeps_its_fingerprint(path: Path) -> None:
    reg = regressions.read(path)
    assert reg.fingerprint == path.stem == expected_fingerprint(reg)
    found = regrade_offline(reg, strict=bool(reg.header.get("strict")))
    assert reg.requirement in {f.requirement for f in found}
    # Portable: no path of the machine that recorded it (the folder holding the repository).
    assert str(Path(__file__).resolve().parents[2]) not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_file_still_fails_on_its_fixture_and_is_fixed_by_the_reference(
        path: Path, tmp_path: Path) -> None:
    reg = regressions.read(path)
    options = options_of(reg)
    strict = bool(reg.header.get("strict"))
    if reg.role == "agent" and reg.model is not None:  # an LLM-backed agent: its model too
        with ModelServer() as server:
            common = {"options": options, "strict": strict, "cwd": str(tmp_path),
                      "attempts": 2, "model": server}
            still_target = recorded_agent(reg, tmp_path)
            fixed_target = recorded_agent(reg, tmp_path,
                                          "python fixtures/agents/llm_responses_agent.py")
            for target in (still_target, fixed_target):
                target.env = {**server.env(), **target.env}
            still = regressions.replay_agent(reg, still_target, **common)
            fixed = regressions.replay_agent(reg, fixed_target, **common)
    elif reg.role == "agent":
        common = {"options": options, "strict": strict, "cwd": str(tmp_path), "attempts": 2}
        still = regressions.replay_agent(reg, recorded_agent(reg, tmp_path), **common)
        reference = AgentTarget(reference_agent_command(), "reference agent",
                                {"ACP_REFERENCE_STATE_DIR": str(tmp_path)})
        fixed = regressions.replay_agent(reg, reference, **common)
    else:
        assert reg.target is not None and reg.target.startswith("fixtures/clients/")
        recorded = str(REPO_ROOT / reg.target)
        still = replay_client(reg, client_args(recorded), options=options, strict=strict,
                              attempts=2)
        fixed = replay_client(reg, client_args(REFERENCE_ADAPTER), options=options,
                              strict=strict)
    assert still.status == regressions.STILL_FAILING, (still.note, still.others)
    assert fixed.status == regressions.FIXED, [f.message for f in fixed.findings]


def test_check_grades_the_library_offline() -> None:
    proc = run_cli("check", str(LIBRARY), "--show", "all")  # every rule graded, as a row
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for path in FILES:
        assert regressions.read(path).requirement.split("/")[0] in proc.stdout
