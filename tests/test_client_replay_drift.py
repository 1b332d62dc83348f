"""Live versus replay on the client's screen (MID-C-03/live-replay-parity) and replays cut
short (MID-V2-14/truncated), end to end through the real CLI: the reference client passes
both on the pty and in-process roads, each broken client is caught with exactly its rule
and the evidence that shows it, ``check`` on the saved transcripts gives the live verdict,
the truncated case is gated by profile, and a client that cannot be told its agent hung
up is not testable, never failed.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from conftest import cli_report as cli
from helpers import alive, pids_in
from offline import assert_check_agrees

from conformance.client.runner import reference_client
from conformance.client.script import build_reload, build_turn, new_ids

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "fixtures" / "clients"
PARITY = ["client-live-replay-parity", "client-live-replay-parity-v2",
          "client-live-replay-parity-idless", "client-split-at-updates"]
TRUNCATED = "client-truncated-replay"


def cases(*ids: str) -> list[str]:
    return [w for c in ids for w in ("--case", c)]


def rows(report: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["requirement"] == rule]


def test_reference_client_passes_both_rules_on_both_roads(tmp_path: Path) -> None:
    command, _ = reference_client()
    roads = {"pty": ["--client", command, "--client-profile",
                     str(CLIENTS / "reference-reload.yaml")],
             "adapter": ["--client-adapter", "conformance.client.reference:make_client"]}
    for road, target in roads.items():
        args = [*target, "--profile", "acp-schema-1.21", *cases(*PARITY, TRUNCATED), "-j", "1"]
        code, report, out = cli(*args, "--transcripts", str(tmp_path / road),
                                tmp_path=tmp_path, name=road)
        assert code == 0 and report["summary"]["verdict"] == "pass", (road, out)
        parity = {(r["case"], r["outcome"]) for r in rows(report, "MID-C-03/live-replay-parity")}
        assert {("client-live-replay-parity@v1", "pass"),
                ("client-live-replay-parity-v2@v2", "pass"),
                ("client-live-replay-parity-idless@v1", "pass")} <= parity, (road, parity)
        truncated = {r["outcome"] for r in rows(report, "MID-V2-14/truncated")
                     if r["case"] == f"{TRUNCATED}@v2"}
        assert truncated == {"pass"}, (road, truncated)
        assert_check_agrees(tmp_path / f"{road}.json", tmp_path / road, code, args)
    # Every process of the pty road is gone: the client, the double that hung up and the
    # fresh one the client started to resume again.
    pids = pids_in(tmp_path / "pty")
    assert pids and not any(alive(p) for p in pids)
    lines = (tmp_path / "pty" / f"{TRUNCATED}@v2.jsonl").read_text(encoding="utf-8")
    doubles = [e for e in map(json.loads, lines.splitlines()[1:]) if e.get("event") == "start"
               and (e.get("data") or {}).get("pid_role") == "agent-double"]
    assert len(doubles) == 2 and len({e["conn"] for e in doubles}) == 2


def test_a_one_shot_clients_answer_after_the_reload_is_no_history(tmp_path: Path) -> None:
    """A one-shot client resumes and prompts in one process: its screen after the reload
    holds the history and the new prompt's answer, which the double sends live after the
    replay. Only the texts sent live before the reload began are history: the answer is
    not a fifth message of the replay (what the interop matrix's one-shot v2 clients were
    failed for), while a history message missing from the replay still fails."""
    from conformance import transcript as tmod
    from conformance.grading import grade_recorded

    command, _ = reference_client()
    code, _, out = cli("--client", command, "--client-profile",
                       str(CLIENTS / "reference-reload.yaml"), *cases(PARITY[1]), "-j", "1",
                       "--protocol", "2", "--transcripts", str(tmp_path / "t"),
                       tmp_path=tmp_path, name="ref")
    assert code == 0, out
    header, entries = tmod.load(tmp_path / "t" / f"{PARITY[1]}@v2.jsonl")
    [reload] = [e for e in entries if e.event == "observed" and e.data.get("reload")]
    at = entries.index(reload)
    conn, sid = entries[at - 2].conn, "sess-1"
    answer = "After the reload, a new answer. "
    lines = [("client", "stdin", {"jsonrpc": "2.0", "id": 90, "method": "session/prompt",
                                  "params": {"sessionId": sid, "prompt": [
                                      {"type": "text", "text": "Go on."}]}}),
             ("agent", "stdout", {"jsonrpc": "2.0", "id": 90, "result": {"messageId": "u-90"}}),
             ("agent", "stdout", {"jsonrpc": "2.0", "method": "session/update", "params": {
                 "sessionId": sid, "update": {"sessionUpdate": "agent_message_chunk",
                                              "messageId": "a-90",
                                              "content": {"type": "text", "text": answer}}}}),
             ("agent", "stdout", {"jsonrpc": "2.0", "method": "session/update", "params": {
                 "sessionId": sid, "update": {"sessionUpdate": "state_update", "state": "idle",
                                              "stopReason": "end_turn"}}})]
    added = [tmod.Entry(0, reload.t, conn, src, stream, json.dumps(m), None, m)
             for src, stream, m in lines]

    def graded(shown: list[dict[str, str]]) -> str:
        edited = [*entries[:at], *added, tmod.Entry(
            0, reload.t, reload.conn, reload.src, reload.stream, event="observed",
            data={**reload.data, "shown": shown}), *entries[at + 1:]]
        for n, e in enumerate(edited):
            e.seq = n
        [row] = [f for f in grade_recorded(header, edited, protocol=2)
                 if f.requirement == "MID-C-03/live-replay-parity"]
        return row.outcome.value

    history = reload.data["shown"]
    assert graded([*history, {"role": "agent", "text": answer}]) == "pass"
    assert graded([*history[:-1], {"role": "agent", "text": answer}]) == "fail"


def test_splitting_client_differs_live_and_in_replay(tmp_path: Path) -> None:
    """v2 fail, v1 warn, with the two displays as evidence; the ID-less stream, grouped
    alike live and in replay by this client, passes."""
    adapter = f"{CLIENTS / 'splits_live_at_updates.py'}:make_client"
    code, report, out = cli("--client-adapter", adapter, *cases(*PARITY[:3]), "-j", "1",
                            tmp_path=tmp_path)
    assert code == 1, out
    found = {r["case"]: r for r in rows(report, "MID-C-03/live-replay-parity")
             if r["outcome"] in ("fail", "warn")}
    assert set(found) == {"client-live-replay-parity@v1", "client-live-replay-parity-v2@v2"}
    assert found["client-live-replay-parity@v1"]["outcome"] == "warn"
    v2 = found["client-live-replay-parity-v2@v2"]
    assert v2["outcome"] == "fail" and "with message IDs" in v2["message"]
    live, replayed = v2["evidence"]["expected"], v2["evidence"]["actual"]
    assert len(replayed) < len(live)  # split live, whole in the replay
    assert any(e.startswith("agent: Parity v2 one. Parity v2 two.") for e in replayed)
    assert "agent: Parity v2 one. " in live and "agent: Parity v2 six. " in live
    assert len(v2["evidence"]["entries"]) == 2  # the live and the replayed observations
    assert {r["outcome"] for r in rows(report, "MID-C-03/live-replay-parity")
            if r["case"] == "client-live-replay-parity-idless@v1"} == {"pass"}
    assert not [r for r in report["results"] if r["outcome"] == "fail"
                and r["requirement"] != "MID-C-03/live-replay-parity"], out


def test_client_keeping_a_truncated_replay_shows_it_twice(tmp_path: Path) -> None:
    """In-process too (the manifest drives it through the pty): each message the cut replay
    got through is shown twice after the full one: three warnings, nothing else."""
    adapter = f"{CLIENTS / 'keeps_truncated_replay.py'}:make_client"
    args = ["--client-adapter", adapter, "--profile", "acp-schema-1.21", *cases(TRUNCATED)]
    code, report, out = cli(*args, "--transcripts", str(tmp_path / "t"), tmp_path=tmp_path)
    assert code == 0, out  # warn only
    warned = [r for r in rows(report, "MID-V2-14/truncated") if r["outcome"] == "warn"]
    assert len(warned) == 3, warned  # one per message shown twice
    assert "after a truncated replay and a full one" in warned[0]["message"]
    assert not [r for r in report["results"] if r["outcome"] in ("fail", "warn")
                and r["requirement"] != "MID-V2-14/truncated"], out
    assert {r["outcome"] for r in rows(report, "MID-C-07")} <= {"not_applicable"}
    assert_check_agrees(tmp_path / "report.json", tmp_path / "t", code, args)
    # The transcript: three replayed messages, the double's exit, a fresh agent that is
    # initialized and resumed, five messages, the marker, the response.
    (path,) = (tmp_path / "t").glob("*.jsonl")
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    hangup = next(i for i, e in enumerate(entries) if (e.get("data") or {}).get("note") == "hangup")
    old = entries[hangup]["conn"]
    assert entries[hangup + 1]["event"] == "exit"
    updates = [e["msg"]["params"]["update"] for e in entries
               if (e.get("msg") or {}).get("method") == "session/update"]
    kinds = [u["sessionUpdate"] for u in updates]
    assert kinds.count("replay_complete") == 1
    fresh = [e for e in entries[hangup:] if e["conn"] == old + 1 and e.get("msg")]
    assert [e["msg"].get("method") for e in fresh[:3:2]] == ["initialize", "session/resume"]
    resumed = [e for e in fresh if (e["msg"].get("method") == "session/update")]
    assert len(resumed) == 6  # five messages and the marker, then the response
    assert "result" in fresh[-1]["msg"]


def test_truncated_case_is_gated_by_profile(tmp_path: Path) -> None:
    """Under the older profiles the case is not run and its rule says why (allowed by
    profile); asking for the case alone there is a usage error that names what would run."""
    adapter = "conformance.client.reference:make_client"
    for profile in ("acp-sdk-2.4.0", "acp-repo-2026-08-22"):
        code, report, out = cli("--client-adapter", adapter, "--profile", profile,
                                *cases("client-split-at-updates"), "--protocol", "2",
                                tmp_path=tmp_path, name=profile)
        assert code == 0, out
        (row,) = rows(report, "MID-V2-14/truncated")
        assert row["outcome"] == "not_applicable" and row["reason"] == "allowed_by_profile", row
        assert profile in row["message"]
        code, _, out = cli("--client-adapter", adapter, "--profile", profile,
                           *cases(TRUNCATED), tmp_path=tmp_path, name=f"{profile}-alone")
        assert code == 2 and "nothing to run" in out, out


NO_DISCONNECT = """\
import sys
sys.path.insert(0, {root!r})
from conformance.client.reference import ReferenceAdapter

class Adapter(ReferenceAdapter):
    disconnected = None  # cannot be told that its agent hung up

def make_client():
    return Adapter()
"""


def test_client_that_cannot_be_told_of_a_hangup_is_not_testable(tmp_path: Path) -> None:
    fixture = tmp_path / "no_disconnect.py"
    fixture.write_text(NO_DISCONNECT.format(root=str(REPO)), encoding="utf-8")
    command, _ = reference_client()
    one_shot = ["--client", f"{command} --prompt {{prompt}}", "--client-profile",
                str(write_one_shot_profile(tmp_path, command))]
    for name, target in {"adapter": ["--client-adapter", f"{fixture}:make_client"],
                         "one-shot": one_shot}.items():
        code, report, out = cli(*target, "--profile", "acp-schema-1.21", *cases(TRUNCATED),
                                tmp_path=tmp_path, name=name)
        assert code == 0, (name, out)
        (case,) = report["cases"]
        assert case["reason"] == "no_capability", (name, case)
        assert "hanging up" in case["note"], (name, case)
        (row,) = rows(report, "MID-V2-14")
        assert row["outcome"] == "not_applicable", (name, row)
        assert "hanging up" in row["message"], (name, row)


def write_one_shot_profile(tmp_path: Path, command: str) -> Path:
    from conformance.client.reference import PROFILE_YAML

    load = shlex.join([*shlex.split(command), "--resume", "{session}", "--prompt", "{prompt}"])
    path = tmp_path / "one-shot.yaml"
    path.write_text(PROFILE_YAML.replace('load: "/load {session}\\r"', f"load: {json.dumps(load)}"),
                    encoding="utf-8")
    return path


def test_reload_modes_of_a_truncated_replay() -> None:
    """The first resume replays three of five messages and hangs up; the next replays all
    five: the user message under the ID the prompt response named (MID-V2-11), agent and
    thought messages under IDs new to each replay (MID-A-08)."""
    from conformance.cases import load_dir

    case = next(c for c in load_dir() if c.id == TRUNCATED)
    played = [build_turn(case, "five-messages", 2, new_ids())]
    cut, full = build_reload("truncated", played, 2), build_reload("after-truncated", played, 2)
    assert cut.hangup and not full.hangup and full.after_truncated
    ids = [[u["messageId"] for u in r.replay] for r in (cut, full)]
    assert len(ids[0]) == 3 and len(ids[1]) == 5
    assert ids[0][0] == ids[1][0] == "five-messages-user"
    assert not set(ids[0][1:]) & set(ids[1][1:])
    assert not {"tr-t1", "tr-a1", "tr-a2", "tr-a3"} & set(ids[0] + ids[1])
    assert cut.observed_fields()["hangup"] and full.observed_fields()["after_truncated"]


EXITS_ON_HANGUP = """\
import sys
sys.path.insert(0, {root!r})
from conformance.client.reference import ReferenceAdapter, ReferenceClient, main

class ExitsOnHangup(ReferenceClient):
    def connection_lost(self):
        raise SystemExit("exits-on-hangup: my agent is gone, so am I")

class Adapter(ReferenceAdapter):
    client_class = ExitsOnHangup

def make_client():
    return Adapter()

if __name__ == "__main__":
    sys.exit(main(client_class=ExitsOnHangup))
"""


def test_client_that_exits_when_its_agent_hangs_up_is_not_testable_not_failed(
        tmp_path: Path) -> None:
    """The hang-up is the suite's doing: a client that ends with its agent breaks no rule of
    message identity (MID-C-08 is about message-ID input, and a closed connection is none),
    so the case is not testable for MID-V2-14/truncated and says why, on the pty and the
    in-process road alike, and `check` agrees."""
    import sys

    fixture = tmp_path / "exits_on_hangup.py"
    fixture.write_text(EXITS_ON_HANGUP.format(root=str(REPO)), encoding="utf-8")
    roads = {"pty": ["--client", f"{shlex.quote(sys.executable)} {shlex.quote(str(fixture))} "
                     "--agent-cmd {agent}", "--client-profile",
                     str(CLIENTS / "reference-reload.yaml")],
             "adapter": ["--client-adapter", f"{fixture}:make_client"]}
    for road, target in roads.items():
        args = [*target, "--profile", "acp-schema-1.21", *cases(TRUNCATED, PARITY[1])]
        code, report, out = cli(*args, "--transcripts", str(tmp_path / road),
                                tmp_path=tmp_path, name=road)
        assert code == 0, (road, out)
        assert not [r for r in report["results"] if r["outcome"] in ("fail", "warn")], (road, out)
        case = next(c for c in report["cases"] if c["case"] == f"{TRUNCATED}@v2")
        assert case["reason"] == "no_capability", (road, case)
        assert "exited when its agent hung up" in case["note"], (road, case)
        (row,) = rows(report, "MID-V2-14")
        assert row["outcome"] == "not_applicable", (road, row)
        assert_check_agrees(tmp_path / f"{road}.json", tmp_path / road, code, args)
