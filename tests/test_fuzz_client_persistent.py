"""Persistent client fuzzing: many generated runs as turns of one client process.

Against real client processes through a pty: the reference client is fuzzed on
reused processes and stays clean; a held-in fixture whose fault needs an earlier
turn on the same process (``folds_earlier_turn_ids``) is found by persistent
fuzzing and not by a fresh process per run within the same budget, and its
counterexample keeps the earlier turn it needs, replays to the same fail on a fresh
client (and is fixed by the reference client), and ``check`` grades the saved file
to the same fail. The stream arithmetic is checked without a target.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, run_cli
from helpers import saved_and_read, wait_for_count

sys.path.insert(0, str(REPO_ROOT / "fixtures" / "hostile"))

from harness import finish_cli, start_cli

from conformance.checks import Options
from conformance.client.profile import load as load_profile
from conformance.client.runner import reference_client
from conformance.fuzz import client_persistent, database, regressions
from conformance.fuzz.client_case import stream_case
from conformance.fuzz.client_fuzz import (
    ClientChoice,
    ClientTarget,
    replay_client,
    run_client_fuzz,
)
from conformance.fuzz.grading import violations
from conformance.fuzz.settings import get_effort

CLIENTS = REPO_ROOT / "fixtures" / "clients"
CROSS = "folds_earlier_turn_ids.py"
HELD_IN = {e["file"]: e for e in yaml.safe_load(
    (CLIENTS / "manifest.yaml").read_text(encoding="utf-8"))["persistent"]}
PROFILE = CLIENTS / "reference.yaml"


def fixture_command(name: str) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(CLIENTS / name))} --agent-cmd {{agent}}"


def target(command: str) -> ClientTarget:
    return ClientTarget("client", command=command, profile=load_profile(PROFILE),
                        timeout=10.0, profile_path=str(PROFILE))


def test_later_turns_are_told_apart_and_histories_play_first() -> None:
    stream = {"protocol": 2, "prompt": "p", "steps": [
        {"agent": "w1. ", "id": "a"}, {"upsert": "agent", "id": "b", "content": ["w2. "]},
        {"batch": [{"thought": "w3. ", "id": "c"}]}, {"tool_call": "Tool 1"}]}
    third = client_persistent.turn_stream(stream, 3)
    assert third["prompt"] != stream["prompt"]
    assert [s.get("agent") or s.get("content") or s.get("batch") for s in third["steps"]][:3] \
        == ["t3 w1. ", ["t3 w2. "], [{"thought": "t3 w3. ", "id": "c"}]]
    assert client_persistent.message_ids(third["steps"]) == {"a", "b", "c"}
    composed = client_persistent.with_history(third, [stream])
    case = stream_case(2, composed)
    assert case.drive == ("start", {"play": "fuzz-1"}, {"play": "fuzz"})
    assert [t["prompt"] for t in case.stream] == ["p", third["prompt"]]
    assert client_persistent.earlier_turns(composed) == 1


def test_reference_client_is_fuzzed_on_reused_processes() -> None:
    command, profile = reference_client()
    ref = ClientTarget("reference client", command=command, profile=profile, timeout=10.0)
    result = run_client_fuzz(ref, get_effort("ci", max_examples=30), seed=5, strict=True,
                             runs_per_process=50)
    assert result.failures == [], [(f.requirement, f.stream) for f in result.failures]
    assert result.reused >= 5, result.notes  # runs played as later turns of a kept client
    assert result.processes < result.examples
    passed = {r for cov in result.coverage.values() for r, f in cov.items()
              if f.outcome.value == "pass"}
    assert {"MID-C-02/merged", "MID-C-03/content"} <= passed


def test_a_one_shot_client_gets_a_fresh_process_per_run() -> None:
    adapter = ClientTarget("a", adapter="conformance.client.reference:make_client")
    assert client_persistent.cannot_persist(adapter) is None  # one object, many turns
    one_shot = target(f"{shlex.quote(sys.executable)} {CLIENTS / 'int_parsed.py'} "
                      "--agent-cmd {agent} --prompt {prompt}")
    assert "one-shot" in (client_persistent.cannot_persist(one_shot) or "")
    assert client_persistent.cannot_persist(target(fixture_command(CROSS))) is None


def test_cross_turn_fault_needs_persistent_mode(tmp_path: Path) -> None:
    """The fixture folds IDs only against earlier turns' messages: a fresh client per run
    never shows it; persistent fuzzing does, and the counterexample keeps the earlier
    turn, replays to the same fail on a fresh client, is fixed by the reference client,
    and ``check`` grades the saved file as the fuzzer did."""
    effort = get_effort("ci", max_examples=60)
    broken = target(fixture_command(CROSS))
    fresh = run_client_fuzz(broken, effort, seed=1, strict=True, max_failures=1,
                            protocols=(1,), runs_per_process=1)
    assert fresh.failures == [], [(f.requirement, f.stream) for f in fresh.failures]
    assert fresh.reused == 0

    found = run_client_fuzz(broken, effort, seed=1, strict=True, max_failures=1,
                            protocols=(1,), runs_per_process=50)
    assert len(found.failures) == 1, found.notes
    failure = found.failures[0]
    assert failure.requirement in HELD_IN[CROSS]["expect"]["v1"]["fail"], failure.requirement
    assert not failure.unconfirmed
    assert found.reused >= 1
    n = client_persistent.earlier_turns(failure.stream)
    assert n >= 1 and failure.earlier_sessions == n
    line = client_persistent.describe_history(failure)
    assert line is not None and f"seen after {n} earlier run(s) in the same process" in line

    reg = saved_and_read(tmp_path / "lib", failure, found)
    assert reg.stream == failure.stream and reg.stream["history"]
    choice = ClientChoice(fixture_command(CROSS), profile_path=PROFILE, timeout=10.0)
    still = replay_client(reg, choice, options=Options(), strict=True, attempts=2)
    assert still.status == regressions.STILL_FAILING, still.note
    command, _ = reference_client()
    fixed = replay_client(reg, ClientChoice(command, profile_path=PROFILE, timeout=10.0),
                          options=Options(), strict=True)
    assert fixed.status == regressions.FIXED, [f.message for f in fixed.findings]
    checked = run_cli("check", str(reg.path), "--strict")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert failure.requirement in checked.stdout

    # An example database keeps the earlier turns too: played first, still failing.
    db = database.open_directory(tmp_path / "db")
    database.save(db, failure)
    again = run_client_fuzz(broken, get_effort("ci", max_examples=1), seed=2, strict=True,
                            protocols=(1,), runs_per_process=1, database=db)
    assert any("1 still failing" in n for n in again.notes), again.notes
    assert [f.requirement for f in again.failures] == [failure.requirement]
    assert client_persistent.earlier_turns(again.failures[0].stream) == n


def test_the_cli_reports_the_earlier_turns_and_replays_the_file(tmp_path: Path) -> None:
    args = ["--client", fixture_command(CROSS), "--client-profile", str(PROFILE),
            "--protocol", "1", "--max-examples", "60", "--seed", "1", "--max-failures", "1",
            "--timeout", "10", "--regressions", str(tmp_path / "lib"), "--strict",
            "--runs-per-process", "50"]
    emitted = tmp_path / "emitted" / "found.yaml"
    proc = run_cli("fuzz", *args, "--out", str(tmp_path / "out"), "--emit-case",
                   str(emitted), timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL MID-C-02/merged (v1)" in proc.stdout, proc.stdout
    assert "earlier run(s) in the same process" in proc.stdout, proc.stdout
    assert "run(s) on a reused process" in proc.stdout, proc.stdout
    (saved,) = (tmp_path / "lib").glob("*.jsonl")
    replayed = run_cli("replay", str(saved), "--client", fixture_command(CROSS),
                       "--client-profile", str(PROFILE), "--strict", timeout=300)
    assert replayed.returncode == 1 and "STILL FAILING" in replayed.stdout, (
        replayed.stdout + replayed.stderr)

    # --emit-case writes the earlier turns as turns of the case: the suite plays them alike
    (case,) = yaml.safe_load(emitted.read_text("utf-8"))["cases"]
    assert case["drive"][0] == "start" and len(case["drive"]) >= 3
    folder = tmp_path / "cases"
    shutil.copytree(REPO_ROOT / "cases", folder)
    shutil.copy(emitted, folder / emitted.name)
    lint = run_cli("lint-cases", "--cases", str(folder))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    for client, fails in ((fixture_command(CROSS), True), (reference_client()[0], False)):
        report = tmp_path / f"suite-{fails}.json"
        run_cli("--client", client, "--client-profile", str(PROFILE), "--cases", str(folder),
                "--case", case["id"], "--protocol", "1", "--json", str(report), "--no-color",
                timeout=300)
        rows = json.loads(report.read_text("utf-8"))["results"]
        failed = {r["requirement"] for r in rows if r["outcome"] == "fail"}
        assert ("MID-C-02/merged" in failed) is fails, rows


def _marked(mark: str) -> list[int]:
    """The live processes whose environment carries ``mark``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text()
        except OSError:
            continue
        if mark.encode() in environ and ") Z " not in state:
            found.append(int(proc.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_signal_ends_a_persistent_run_and_every_kept_client(tmp_path: Path) -> None:
    """SIGTERM while clients are kept between runs: exit 143, interrupted, and no client
    or agent double of the run is left."""
    mark = f"ACP_TEST_KEPT_CLIENT={uuid.uuid4().hex}"
    command, _ = reference_client()
    client = f"env {mark} {command}"
    proc = start_cli(["fuzz", "--client", client, "--client-profile", str(PROFILE),
                      "--max-examples", "100000", "--runs-per-process", "50",
                      "--out", str(tmp_path / "out"), "--json", str(tmp_path / "report.json")],
                     tmp_path)
    # generating, a client kept: an event of the run's own (the progress line comes only
    # 30 s into a log), not a clock
    wait_for_count(lambda: len(_marked(mark)), 1, "a kept client running")
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    run = finish_cli(proc, tmp_path, signalled)
    assert run.returncode == 128 + signal.SIGTERM, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.report is not None and run.report["summary"]["verdict"] == "interrupted"
    deadline = time.monotonic() + 10
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _marked(mark) == []


def test_the_pool_plays_runs_as_turns_and_lets_a_rule_breaker_go() -> None:
    """Two runs on one kept client: the second is the second turn of the same transcript
    (its own prompt, its texts prefixed), graded with the first; a run naming an ID an
    earlier turn used goes to another client; a broken rule retires the client, and the
    run that broke it still breaks it alone on a fresh client (it stands alone)."""
    from conformance.fuzz.client_fuzz import play_stream, stream_of

    broken = ClientTarget("case_insensitive",
                          adapter=f"{CLIENTS / 'case_insensitive.py'}:make_client")
    pool = client_persistent.ClientPool(broken, Options(), True, None, 50)
    try:
        first = pool.play(1, stream_of(1, [{"agent": "w1. ", "id": "one"}]))
        assert first.started and not first.reused and first.history == []
        second = pool.play(1, stream_of(1, [{"agent": "w1. ", "id": "two"}]))
        assert second.reused and not second.started
        assert second.run.transcript is first.run.transcript  # one life, every turn
        assert [h["steps"][0]["id"] for h in second.history] == ["one"]
        assert second.stream["steps"][0]["agent"] == "t2 w1. "
        prompts = [e.msg["params"]["prompt"][0]["text"] for e in second.run.transcript.entries
                   if e.src == "client" and isinstance(e.msg, dict)
                   and e.msg.get("method") == "session/prompt"]
        assert prompts == ["Please play the generated turn.", "Please play generated turn 2."]
        assert not violations(second.run.findings, True)
        again = pool.play(1, stream_of(1, [{"agent": "w1. ", "id": "one"}]))
        assert again.started and not again.history  # "one" was used by the kept client
        looks = [{"agent": "w1. ", "id": "msg-a"}, {"agent": "w2. ", "id": "MSG-A"}]
        bad = pool.play(1, stream_of(1, looks))
        assert bad.reused and bad.history
        rules = {f.requirement for f in violations(bad.run.findings, True)}
        assert "MID-C-02/merged" in rules
        assert pool.restarted.get("a rule broke") == 1
        assert all(kept.runs and kept.drive.client.alive()
                   for kept in pool.kept.get(1, []))
        # Alone it still breaks a rule (put down to no cause without the earlier turn's
        # evidence: MID-C-03/merged): the fuzzer reports that run, without history.
        alone = play_stream(broken, 1, stream_of(1, looks), options=Options(), strict=True)
        assert {f.requirement for f in violations(alone.findings, True)} == {"MID-C-03/merged"}
    finally:
        pool.close()
    assert pool.kept == {}


def test_a_session_that_fills_half_the_screen_ends_there() -> None:
    """A pty client showing the whole session at each render is let go once it shows half
    a screenful of messages; an adapter (no screen) and an incremental render are not."""
    from conformance.transcript import Transcript

    def pool_for(t: ClientTarget) -> client_persistent.ClientPool:
        return client_persistent.ClientPool(t, Options(), True, None, 50)

    def observed(render: str, count: int) -> Transcript:
        t = Transcript({"role": "client", "protocol": 1})
        t.add(0, "harness", "harness", event="observed", data={
            "render": render, "shown": [{"role": "agent", "text": f"w{i}. "}
                                        for i in range(count)]})
        return t

    pty = pool_for(target(fixture_command(CROSS)))
    half = client_persistent.SCREEN_ROWS // 2
    assert pty._screen_full(observed("cumulative", half))
    assert not pty._screen_full(observed("cumulative", half - 1))
    assert not pty._screen_full(observed("incremental", half * 2))
    adapter = pool_for(ClientTarget("a", adapter="conformance.client.reference:make_client"))
    assert not adapter._screen_full(observed("cumulative", half * 2))
