"""One finding per fault: a fault seen on many chunks is one row with its occurrence count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_report

from conformance.checks import Options, grade
from conformance.results import CaseResult, Finding, Outcome, RunResult
from conformance.transcript import Transcript


def _update(kind: str, mid: str, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": kind, "messageId": mid,
                                     "content": {"type": "text", "text": text}}}}


def _turns(chunks: list[tuple[str, int]]) -> Transcript:
    """One v1 turn per (ID, n): a thought under the ID, then n agent chunks under it too."""
    t = Transcript({"protocol": 1})
    lines: list[tuple[str, dict[str, Any]]] = [
        ("client", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": 1}}),
        ("agent", {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1}}),
        ("client", {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}),
        ("agent", {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}),
    ]
    for i, (mid, n) in enumerate(chunks, start=2):
        lines.append(("client", {"jsonrpc": "2.0", "id": i, "method": "session/prompt",
                                 "params": {"sessionId": "s",
                                            "prompt": [{"type": "text", "text": "Hi"}]}}))
        lines.append(("agent", _update("agent_thought_chunk", mid, "thinking")))
        lines += [("agent", _update("agent_message_chunk", mid, f"tok{j} ")) for j in range(n)]
        lines.append(("agent", {"jsonrpc": "2.0", "id": i, "result": {"stopReason": "end_turn"}}))
    for src, msg in lines:
        t.add(0, src, "stdin" if src == "client" else "stdout", json.dumps(msg).encode())
    return t


@pytest.mark.parametrize("repeats", [True, False])
def test_one_reused_id_over_many_chunks_is_one_finding(repeats: bool) -> None:
    """The real agent seen in the wild: thought and text of one provider message share an
    ID, 31 text chunks. One fault, 31 occurrences, the first few entries as evidence."""
    t = _turns([("resp-1", 31)])
    findings = grade(t.entries, protocol=1, options=Options(),
                     select=["MID-A-02/cross-kind-reuse"], repeats=repeats)
    [f] = findings
    assert f.outcome is Outcome.WARN and f.occurrences == 31, f
    thought = next(e.seq for e in t.entries if "agent_thought_chunk" in (e.raw or ""))
    assert f.entries[0] == thought and len(f.entries) == 8, f
    assert f.shown_message.endswith("(x 31 occurrences)"), f


@pytest.mark.parametrize("repeats", [True, False])
def test_two_faulty_ids_are_two_findings(repeats: bool) -> None:
    findings = grade(_turns([("resp-1", 5), ("resp-2", 12)]).entries, protocol=1,
                     options=Options(), select=["MID-A-02/cross-kind-reuse"], repeats=repeats)
    assert [(f.actual, f.occurrences) for f in findings] == [("resp-1", 5), ("resp-2", 12)]


def test_faults_past_the_few_listed_are_counted_as_faults() -> None:
    """Seven faulty IDs: five listed in full, one row counting the other two faults and
    their occurrences; the run's summary counts seven faults."""
    plan = [(f"resp-{i}", i + 1) for i in range(7)]
    findings = grade(_turns(plan).entries, protocol=1, options=Options(),
                     select=["MID-A-02/cross-kind-reuse"])
    assert [f.occurrences for f in findings[:5]] == [1, 2, 3, 4, 5]
    rest = findings[5]
    assert (rest.faults, rest.occurrences, len(findings)) == (2, 6 + 7, 6), findings
    run = RunResult("0", "t", "agent", [1], "p", False)
    run.cases = [CaseResult("c", "", [], 1, [f.with_case("c") for f in findings])]
    assert run.counts()["warn"] == 7


def test_json_round_trip_keeps_counts() -> None:
    from conformance.report.jsonreport import from_json, to_json

    f = Finding("MID-A-02/cross-kind-reuse", Outcome.WARN, "m", entries=(1, 2), case="c",
                occurrences=9, faults=3)
    run = RunResult("0", "t", "agent", [1], "p", False)
    run.cases = [CaseResult("c", "", [], 1, [f])]
    data = to_json(run)
    assert data["results"][0]["occurrences"] == 9 and data["results"][0]["faults"] == 3
    assert data["summary"]["warn"] == 3
    assert from_json(json.loads(json.dumps(data))).cases[0].findings == [f]


def test_broken_agent_gets_one_finding_per_reused_id(tmp_path: Path) -> None:
    """Through the real CLI: the agent gives each thought and the agent message after it
    one ID. Each turn's ID is one finding whose count is the number of agent chunks
    carrying it in the transcript; every report counts faults and shows the count."""
    out = tmp_path / "t"
    code, report, output = cli_report(
        "--agent", "python fixtures/agents/cross_kind_reuse.py", "--protocol", "1",
        "--case", "ids-across-turns", "--transcripts", str(out),
        "--markdown", str(tmp_path / "r.md"), "--junit", str(tmp_path / "r.xml"),
        "--html", str(tmp_path / "r.html"), tmp_path=tmp_path)
    assert code == 0, output
    rows = [r for r in report["results"] if r["requirement"] == "MID-A-02/cross-kind-reuse"]
    chunks: dict[str, int] = {}
    [path] = out.glob("ids-across-turns@v1*.jsonl")
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        msg = json.loads(line).get("msg") or {}
        u = (msg.get("params") or {}).get("update") or {}
        if u.get("sessionUpdate") == "agent_message_chunk":
            chunks[u["messageId"]] = chunks.get(u["messageId"], 0) + 1
    reused = {r["evidence"]["actual"]: r.get("occurrences", 1) for r in rows}
    assert len(rows) == len(reused) >= 2, rows  # one row per reused ID, one ID per turn
    assert all(reused[mid] == chunks[mid] > 1 for mid in reused), (reused, chunks)
    assert report["summary"]["warn"] == sum(1 for r in report["results"]
                                            if r["outcome"] == "warn")
    n = next(iter(reused.values()))
    shown = f"(x {n} occurrences)"
    assert f"{len(rows)} warn" in output and shown in output, output
    for name in ("r.md", "r.xml", "r.html"):
        assert shown in (tmp_path / name).read_text(encoding="utf-8"), name


def test_fault_bookkeeping_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Faults past the few listed are told apart by their keys' hashes, up to a bound;
    a fault without a key is never remembered. Memory does not grow with the faults."""
    from conformance.checks import base

    monkeypatch.setattr(base, "MAX_FAULT_KEYS", 10)
    rule = "MID-A-02/cross-kind-reuse"
    sink = base.Sink(base.all_rules())
    for i in range(1000):
        sink.add(rule, "m", (i,), None, None)  # no key: each a fault of its own
    assert not sink.more_keys[rule]
    for _ in range(3):  # the same 20 keyed faults, three times each
        for i in range(20):
            sink.add("MID-A-02/interleave", "m", (i,), None, None, key=("id", i))
    listed, rest = sink.rows("MID-A-02/interleave")[:5], sink.rows("MID-A-02/interleave")[5]
    assert [f.occurrences for f in listed] == [3] * 5
    assert len(sink.more_keys["MID-A-02/interleave"]) == 10
    # 15 more faults; the 5 past the bound are counted again on each repeat
    assert (rest.faults, rest.occurrences) == (15 + 2 * 5, 45)
    assert sink.rows(rule)[5].faults == 995
