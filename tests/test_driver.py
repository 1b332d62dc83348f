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
