"""The driver that plays the client: authentication and answers to agent requests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, load_json, outcomes, run_cli

HARNESS = REPO_ROOT / "fixtures" / "harness"


@pytest.mark.parametrize("protocol", ["1", "2"])
def test_agent_auth_method_is_used(tmp_path: Path, protocol: str) -> None:
    proc = run_cli("--agent", f"{sys.executable} {HARNESS / 'auth_required.py'}", "--protocol",
                   protocol, "--case", "ids-across-turns", "--json", str(tmp_path / "r.json"),
                   "--transcripts", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pass" in outcomes(load_json(tmp_path / "r.json"))
    sent = [json.loads(line) for line in next((tmp_path / "t").glob("*.jsonl")).open()][1:]
    methods = [e["msg"]["method"] for e in sent if e["src"] == "client" and "method" in e["msg"]]
    login = "auth/login" if protocol == "2" else "authenticate"
    # session/new was refused, the agent method used, session/new retried.
    assert methods[:4] == ["initialize", "session/new", login, "session/new"]


def test_terminal_only_auth_needs_a_person(tmp_path: Path) -> None:
    proc = run_cli("--agent", f"{sys.executable} {HARNESS / 'auth_required.py'}", "--agent-env",
                   "AUTH_TERMINAL_ONLY=1", "--protocol", "1", "--case", "ids-across-turns",
                   "--json", str(tmp_path / "r.json"))
    report = load_json(tmp_path / "r.json")
    assert proc.returncode == 0  # not the agent's fault: nothing graded, nothing failed
    assert any("needs manual auth" in c["note"] for c in report["cases"])
    assert set(outcomes(report)) == {"not_applicable"}


def test_every_agent_request_is_answered_once(tmp_path: Path) -> None:
    proc = run_cli("--agent", f"{sys.executable} {HARNESS / 'asks_client.py'}", "--protocol", "1",
                   "--case", "ids-across-turns", "--transcripts", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entries = [json.loads(line) for line in next(tmp_path.glob("*.jsonl")).open()][1:]
    asked = {e["msg"]["id"]: e["msg"]["method"] for e in entries
             if e["src"] == "agent" and isinstance(e.get("msg"), dict) and "method" in e["msg"]
             and "id" in e["msg"]}
    answers: dict[object, list[dict]] = {}
    for e in entries:
        m = e.get("msg")
        if e["src"] == "client" and isinstance(m, dict) and "method" not in m:
            answers.setdefault(m["id"], []).append(m)
    assert set(answers) == set(asked)
    assert all(len(a) == 1 for a in answers.values())
    for rid, method in asked.items():
        answer = answers[rid][0]
        if method in ("fs/read_text_file", "terminal/create", "_vendor/ping"):
            assert answer["error"]["code"] == -32601, (method, answer)
        elif method == "elicitation/create":
            assert answer["result"] == {"action": "cancel"}
        elif method == "session/request_permission":
            assert answer["result"]["outcome"]["outcome"] == "selected"
    assert {"fs/read_text_file", "terminal/create", "elicitation/create", "_vendor/ping",
            "session/request_permission"} <= set(asked.values())


def test_a_v2_turn_ends_at_the_idle_after_its_acceptance(tmp_path: Path) -> None:
    """A real v2 agent reports idle as a prompt arrives (before accepting it) and after a
    resume's response, then thinks 0.6 s before its first chunk: the suite sends the
    resume and the next prompt only after the idle that follows the turn's acceptance."""
    agent = REPO_ROOT / "fixtures" / "agents" / "v2_idle_before_accepting.py"
    proc = run_cli("--agent", f"{sys.executable} {agent}", "--protocol", "2", "--case",
                   "resume-replay-same-connection", "--json", str(tmp_path / "r.json"),
                   "--transcripts", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(outcomes(load_json(tmp_path / "r.json"))) <= {"pass", "info", "not_applicable"}
    entries = [json.loads(line) for line in next((tmp_path / "t").glob("*.jsonl")).open()][1:]
    running = False  # a prompt was sent and its turn has not ended at an idle after acceptance
    accepted = False
    idles_before_acceptance = 0
    for e in entries:
        m = e.get("msg")
        if not isinstance(m, dict):
            continue
        if e["src"] == "client" and m.get("method") in ("session/prompt", "session/resume"):
            assert not running, f"{m['method']} sent at entry {e['seq']} while a turn runs"
            running, accepted = m["method"] == "session/prompt", False
        elif e["src"] == "agent" and m.get("method") == "session/update":
            update = m["params"]["update"]
            if update.get("state") == "idle":
                if running and not accepted:
                    idles_before_acceptance += 1
                running = running and not accepted
            elif update.get("state") == "running" or str(
                    update.get("sessionUpdate")).startswith("user_message"):
                accepted = True
        elif e["src"] == "agent" and "result" in m and running:
            accepted = True
    assert idles_before_acceptance == 2  # one per prompt: state reports, not turn ends


@pytest.mark.parametrize("protocol", [1, 2])
@pytest.mark.parametrize("spec", [{"cancel": True}, {"cancel_after": 2}],
                         ids=["at-first-output", "after-two-updates"])
def test_one_cancel_mechanism_for_every_prompt_step(tmp_path: Path, protocol: int,
                                                    spec: dict[str, object]) -> None:
    """A case's ``cancel`` and the fuzzer's ``cancel_after`` go through the driver's one
    way of cancelling a turn: one session/cancel, when the step says, and the agent's
    cancelled answer."""
    from conformance.agent.player import StepDriver, perform
    from conformance.agent.steps import LONG_TEXT
    from conformance.transcript import Transcript

    transcript = Transcript({"role": "agent", "protocol": protocol, "case": "cancel"})
    driver = StepDriver([sys.executable, "-m", "conformance.reference.agent"], transcript,
                        protocol=protocol, timeout=10, cwd=str(tmp_path),
                        env={"PYTHONPATH": str(REPO_ROOT)})
    try:
        for step in ("start", "new_session", {"prompt": {"text": LONG_TEXT, **spec}}):
            perform(driver, step)
    finally:
        driver.stop()
    msgs = [(e.src, e.msg) for e in transcript.entries if isinstance(e.msg, dict)]
    cancels = [i for i, (src, m) in enumerate(msgs) if m.get("method") == "session/cancel"]
    assert len(cancels) == 1
    prompt = next(i for i, (src, m) in enumerate(msgs) if m.get("method") == "session/prompt")
    updates = [i for i, (src, m) in enumerate(msgs)
               if src == "agent" and m.get("method") == "session/update" and prompt < i]
    before = [i for i in updates if i < cancels[0]]
    if "cancel_after" in spec:  # never earlier (lines the agent wrote meanwhile may precede it)
        assert len(before) >= spec["cancel_after"]
    else:
        assert before and msgs[before[-1]][1]["params"]["update"]["sessionUpdate"] in (
            "agent_message_chunk", "agent_thought_chunk", "agent_message", "agent_thought")
    if protocol == 1:
        answer = next(m for src, m in msgs if src == "agent" and "result" in m
                      and isinstance(m["result"], dict) and "stopReason" in m["result"])
        assert answer["result"]["stopReason"] == "cancelled"


@pytest.mark.parametrize("profile", ["acp-schema-1.21", "acp-sdk-2.4.0"])
def test_the_driver_takes_the_profile_it_is_given_not_the_header(tmp_path: Path,
                                                                  profile: str) -> None:
    """The run's profile is passed in: a v2 prompt carries an idempotencyKey exactly when
    that profile has keys, whatever the transcript header names (here the other one)."""
    from conformance import profiles
    from conformance.agent.player import StepDriver, perform
    from conformance.transcript import Transcript

    other = "acp-sdk-2.4.0" if profile == "acp-schema-1.21" else "acp-schema-1.21"
    transcript = Transcript({"role": "agent", "protocol": 2, "profile": other, "case": "keys"})
    driver = StepDriver([sys.executable, "-m", "conformance.reference.agent"], transcript,
                        protocol=2, timeout=10, cwd=str(tmp_path),
                        env={"PYTHONPATH": str(REPO_ROOT)}, profile=profiles.get(profile))
    try:
        for step in ("start", "new_session", {"prompt": {"text": "Hello."}}):
            perform(driver, step)
    finally:
        driver.stop()
    prompts = [e.msg for e in transcript.entries if e.src == "client"
               and isinstance(e.msg, dict) and e.msg.get("method") == "session/prompt"]
    assert len(prompts) == 1
    key = prompts[0]["params"].get("idempotencyKey")
    if profiles.get(profile).idempotency_keys:
        assert isinstance(key, str) and key.startswith("key-") and len(key) == 28
    else:
        assert key is None
