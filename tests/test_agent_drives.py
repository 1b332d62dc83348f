"""The agent suite's drives reach the behaviour their rules grade (issue 21).

The cancel drive: ``cancel-mid-turn`` sends ``session/cancel`` at the turn's first agent
output or, when none comes, ``CANCEL_SHARE`` of ``--timeout`` after the prompt. An agent
whose long turn stays silent until it is cancelled (fixtures/agents/waits_for_cancel.py)
must be cancelled and graded through the real CLI, not failed ``TARGET/hang``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, cli_report, outcomes

from conformance import transcript
from conformance.agent.turns import CANCEL_SHARE
from conformance.transcript import Entry

WAITS_FOR_CANCEL = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'waits_for_cancel.py'}"
CANCEL_CASE = "cancel-mid-turn"  # cases/turns.yaml: the case that grades MID-A-09
TIMEOUT = 2.0  # --timeout: the cancel goes out CANCEL_SHARE * TIMEOUT after a silent prompt
CANCEL_NOTE = "cancel sent before any agent output"  # the harness note driver.prompt writes
AGENT_OUTPUT = {"agent_message_chunk", "agent_thought_chunk", "agent_message", "agent_thought"}


def method(entry: Entry) -> str | None:
    msg = entry.msg
    return msg.get("method") if isinstance(msg, dict) else None


def update_kind(entry: Entry) -> str | None:
    msg = entry.msg
    if not isinstance(msg, dict) or msg.get("method") != "session/update":
        return None
    update = (msg.get("params") or {}).get("update") or {}
    return update.get("sessionUpdate")


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_turn_that_waits_for_the_cancel_is_cancelled_and_graded(tmp_path: Path,
                                                                  protocol: int) -> None:
    code, report, output = cli_report(
        "--agent", WAITS_FOR_CANCEL, "--protocol", str(protocol), "--case", CANCEL_CASE,
        "--timeout", str(TIMEOUT), "--transcripts", str(tmp_path / "t"), tmp_path=tmp_path)
    assert report, output
    assert code == 0, output
    rows = [r for r in report["results"] if r["case"] == f"{CANCEL_CASE}@v{protocol}"]
    assert rows, report["results"]
    found = outcomes({"results": rows})
    assert "fail" not in found, found.get("fail")
    assert "warn" not in found, found.get("warn")
    # no hang: the drive did not wait out --timeout for output that never comes
    assert {r["outcome"] for r in rows if r["requirement"] == "TARGET/hang"} == {"pass"}, rows
    # the rule the case grades was graded on a cancelled turn, not skipped as not testable
    graded = {r["requirement"]: r["outcome"] for r in rows
              if r["requirement"].startswith("MID-A-09")}
    assert graded.get("MID-A-09/after-cancel") == "pass", graded
    assert "not_applicable" not in graded.values(), graded

    case = next(c for c in report["cases"] if c["case"] == f"{CANCEL_CASE}@v{protocol}")
    _, entries = transcript.load(Path(case["transcript"]))
    prompt_at = next(i for i, e in enumerate(entries)
                     if e.src == "client" and method(e) == "session/prompt")
    cancels = [i for i, e in enumerate(entries)
               if e.src == "client" and method(e) == "session/cancel"]
    assert len(cancels) == 1, cancels
    cancel_at = cancels[0]
    notes = [i for i, e in enumerate(entries)
             if e.event == "note" and (e.data or {}).get("note") == CANCEL_NOTE]
    assert len(notes) == 1, "the driver did not note a cancel sent before any agent output"
    note = entries[notes[0]]
    assert note.data["after_seconds"] == pytest.approx(CANCEL_SHARE * TIMEOUT)
    assert prompt_at < notes[0] < cancel_at
    # the cancel really came before any agent output, and after the bounded delay
    assert not any(update_kind(e) in AGENT_OUTPUT for e in entries[prompt_at:cancel_at]
                   if e.src == "agent"), entries[prompt_at:cancel_at]
    waited = entries[cancel_at].t - entries[prompt_at].t
    assert CANCEL_SHARE * TIMEOUT * 0.9 <= waited < TIMEOUT, waited
    # and the agent ended that turn as cancelled
    stop_reasons = []
    for e in entries[cancel_at:]:
        msg = e.msg if e.src == "agent" else None
        if not isinstance(msg, dict):
            continue
        result = msg.get("result")
        if isinstance(result, dict) and "stopReason" in result:
            stop_reasons.append(result["stopReason"])
        if update_kind(e) == "state_update":
            update = msg["params"]["update"]
            if "stopReason" in update:
                stop_reasons.append(update["stopReason"])
    assert stop_reasons and stop_reasons[0] == "cancelled", stop_reasons
