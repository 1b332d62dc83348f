"""The proxy role through the real CLI: every proxy under fixtures/proxies/ gets exactly
the findings its manifest lists, in v1 and v2; the reference agent behind a transparent
proxy scores as it does alone; a fault is reported against whoever made it; a proxy that
crashes or hangs is a TARGET finding on the proxy. The checker's rules that no fixture
breaks (reordering, replay windows, changed content) are proven on recorded traffic.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import cli_report, load_json, run_cli
from helpers import assert_breaks, first_case, first_rule, plugin_agrees_with_check, settled

from conformance import transcript
from conformance.checks.proxy import REQUIREMENTS, grade_proxy
from conformance.results import Outcome
from conformance.transcript import Entry, Transcript

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
PROXIES = REPO / "fixtures" / "proxies"
MANIFEST = yaml.safe_load((PROXIES / "manifest.yaml").read_text(encoding="utf-8"))["fixtures"]
REFERENCE = f"{shlex.quote(sys.executable)} -m conformance.reference.agent"


def proxy(name: str) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(PROXIES / name))}.py {{agent}}"


def graded(report: dict[str, Any], protocol: int) -> dict[str, set[str]]:
    """outcome -> the requirement IDs (base) with a finding of it in this protocol's cases."""
    out: dict[str, set[str]] = {}
    for r in report["results"]:
        if r["case"].endswith(f"@v{protocol}") and r["outcome"] in ("fail", "warn", "info"):
            out.setdefault(r["outcome"], set()).add(r["requirement"].split("/", 1)[0])
    return out


def test_manifest_lists_every_fixture() -> None:
    on_disk = {p.stem for p in PROXIES.glob("*.py") if not p.stem.startswith("_")}
    assert {e["name"] for e in MANIFEST} == on_disk


@pytest.fixture(scope="session")
def fixture_runs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One live run of the whole proxy suite per proxy fixture in this process, with its
    transcripts: (exit code, JSON report, output, transcripts folder). The tests that only
    read such a run (its findings; ``check`` on its transcripts) share it."""
    runs: dict[str, tuple[int, dict[str, Any], str, Path]] = {}

    def run(name: str) -> tuple[int, dict[str, Any], str, Path]:
        if name not in runs:
            entry = next(e for e in MANIFEST if e["name"] == name)
            folder = tmp_path_factory.mktemp(f"proxy-{name}")
            args = ["--proxy", proxy(name), "-j", "2", "--timeout", "20",
                    "--transcripts", str(folder / "t")]
            if entry.get("adapts"):
                args.append("--proxy-adapts")
            runs[name] = (*cli_report(*args, tmp_path=folder, name="live", in_process=True),
                          folder / "t")
        return runs[name]
    return run


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["name"] for e in MANIFEST])
def test_proxy_fixture_gets_exactly_its_findings(entry: dict[str, Any], fixture_runs: Any,
                                                 tmp_path: Path,
                                                 request: pytest.FixtureRequest) -> None:
    """The fixture over the whole proxy suite: exactly the findings its manifest lists. The
    pytest plugin's proxy role then plays the cases of its first fault (a fixture that
    breaks nothing: the first proxy case) and gives the verdict, headline and rows that
    `check` gives those cases' transcripts of this run: one verdict on every road, each
    fixture run live once by the command line."""
    code, report, output, transcripts = fixture_runs(entry["name"])
    assert report, output
    assert report["role"] == "proxy"
    any_fail = False
    for version, expect in entry["expect"].items():
        seen = graded(report, int(version[1:]))
        wanted = {o: set(expect.get(o, [])) for o in ("fail", "warn", "info")}
        assert {o: seen.get(o, set()) for o in wanted} == wanted, (version, seen, output)
        any_fail = any_fail or bool(wanted["fail"])
    # A proxy is graded on the proxy rules and its own liveness, nothing of an agent's.
    for r in report["results"]:
        base = r["requirement"].split("/", 1)[0]
        assert base in REQUIREMENTS or base in ("TARGET", "MID-S-06"), r
    assert code == (1 if any_fail else 0), output
    # Every case ran through the proxy: no case of the plan is not testable.
    cases = {r["case"] for r in report["results"]}
    assert len(cases) >= (7 if entry.get("adapts") else 16)
    protocol, rule = first_rule(entry["expect"], entry["protocols"])
    ran = [c["case"].rpartition("@v")[0] for c in report["cases"]
           if c["case"].endswith(f"@v{protocol}")]
    adapt = ["--acp-proxy-adapts"] if entry.get("adapts") else []
    assert_breaks(plugin_agrees_with_check(
        tmp_path, request.getfixturevalue("pytester"),
        ["--acp-proxy", proxy(entry["name"]), *adapt, "--acp-timeout", "20"],
        rule or first_case(None, protocol, ran), protocol, report, transcripts), rule)


def test_reference_agent_behind_a_transparent_proxy_scores_like_it_does_alone(
        tmp_path: Path) -> None:
    code, alone, output = cli_report("--agent", REFERENCE, "-j", "2", tmp_path=tmp_path,
                                     name="alone")
    assert code == 0, output
    code, through, output = cli_report("--proxy", proxy("transparent"), "--agent", REFERENCE,
                                       "-j", "2", "--transcripts", str(tmp_path / "t"),
                                       tmp_path=tmp_path, name="through")
    assert code == 0, output
    agent = load_json(tmp_path / "through.agent.json")
    assert agent["role"] == "agent"

    def rows(report: dict[str, Any], keep: Any) -> dict[tuple[str, str], str]:
        return {(r["case"], r["requirement"]): settled(r["requirement"], r["outcome"])
                for r in report["results"] if keep(r["requirement"])}

    # The agent's own findings, graded behind the proxy, are the ones it gets alone ...
    not_target = lambda rid: not rid.startswith("TARGET")
    assert rows(agent, not_target) == rows(alone, not_target)
    # ... its liveness (TARGET) is the chain's, reported with the proxy, and the same ...
    target = lambda rid: rid.startswith("TARGET")
    assert rows(through, target) == rows(alone, target)
    # ... and the proxy adds MID-P rows only, none of them a fault.
    proxy_rows = rows(through, lambda rid: rid.split("/")[0] in REQUIREMENTS)
    assert proxy_rows and set(proxy_rows.values()) <= {"pass", "not_applicable"}
    assert "pass" in {proxy_rows[k] for k in proxy_rows if k[1] == "MID-P-01"}
    # Both sides' transcripts are saved and name each other.
    client_side = min((tmp_path / "t").glob("*@v1.jsonl"))
    header = json.loads(client_side.read_text(encoding="utf-8").splitlines()[0])
    agent_side = client_side.with_name(header["agent_side"])
    other = json.loads(agent_side.read_text(encoding="utf-8").splitlines()[0])
    assert other["client_side"] == client_side.name and other["side"] == "agent"


def test_the_agent_behind_a_proxy_is_blamed_for_its_own_fault_only(tmp_path: Path) -> None:
    agent = f"{shlex.quote(sys.executable)} {REPO / 'fixtures' / 'agents' / 'numeric_id.py'}"
    code, report, output = cli_report("--proxy", proxy("transparent"), "--agent", agent,
                                      "--protocol", "1", "-j", "2", tmp_path=tmp_path)
    assert code == 0, output  # the proxy passed numeric IDs on unchanged
    assert "fail" not in {r["outcome"] for r in report["results"]}, output
    behind = load_json(tmp_path / "report.agent.json")
    fails = {r["requirement"] for r in behind["results"] if r["outcome"] == "fail"}
    assert "MID-S-01/type" in fails, output
    assert not any(f.startswith("MID-P") for f in fails)
    assert "The agent behind the proxy" in output


def test_a_proxy_fault_is_never_the_agents(tmp_path: Path) -> None:
    code, report, output = cli_report("--proxy", proxy("drops_ids"), "--agent", REFERENCE,
                                      "--protocol", "2", "-j", "2", tmp_path=tmp_path)
    assert code == 1, output
    fails = {r["requirement"].split("/")[0] for r in report["results"]
             if r["outcome"] == "fail"}
    assert fails == {"MID-P-01"}, output
    behind = load_json(tmp_path / "report.agent.json")
    assert "fail" not in {r["outcome"] for r in behind["results"]}, output


@pytest.mark.parametrize(("command", "rule"), [
    ("sh -c 'exit 3' {agent}", "TARGET/exit"),
    ("sh -c 'exec sleep 30' {agent}", "TARGET/hang"),
    ("sh -c 'yes garbage' {agent}", "MID-S-06/framing"),
])
def test_a_proxy_that_crashes_hangs_or_floods_is_a_finding_on_the_proxy(
        command: str, rule: str, tmp_path: Path) -> None:
    code, report, output = cli_report("--proxy", command, "--case", "proxy-grouping",
                                      "--protocol", "1", "--timeout", "1", "--turn-timeout",
                                      "3", tmp_path=tmp_path, timeout=60)
    assert code == 1, output
    assert "Traceback" not in output
    fails = {r["requirement"] for r in report["results"] if r["outcome"] == "fail"}
    assert rule in fails, (fails, output)


def test_proxy_usage_errors_are_one_line() -> None:
    proc = run_cli("--proxy", "cat")
    assert proc.returncode == 2 and "{agent}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("--proxy", "no-such-proxy-binary {agent}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = run_cli("--proxy", "cat {agent}", "--client", "x {agent}")
    assert proc.returncode == 2


def test_list_shows_the_proxy_rules_under_the_proxy_role() -> None:
    proc = run_cli("list")
    assert proc.returncode == 0
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("MID-P-0")]
    assert len(lines) == 8 and all(" proxy " in ln for ln in lines)  # 5 and 3 sub-rules
    assert any("proxy-grouping" in ln and "proxy" in ln for ln in proc.stdout.splitlines())


# -- the checker on recorded traffic -------------------------------------------------

def _side(lines: list[tuple[str, Any]]) -> Transcript:
    t = Transcript({"role": "proxy"})
    for src, msg in lines:
        t.add(0, src, "stdout" if src == "agent" else "stdin", json.dumps(msg).encode())
    return t


def _chunk(mid: str | None, text: str) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk",
                              "content": {"type": "text", "text": text}}
    if mid is not None:
        update["messageId"] = mid
    return {"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "s", "update": update}}


def _grade(sent: list[Any], received: list[Any], **kw: Any) -> dict[str, set[Outcome]]:
    rows = grade_proxy(_side(sent).entries, _side(received).entries, protocol=1, **kw)
    out: dict[str, set[Outcome]] = {}
    for f in rows:
        out.setdefault(f.requirement, set()).add(f.outcome)
    return out


def test_reordering_one_message_fails_and_two_messages_warns() -> None:
    a1, a2, b1 = _chunk("a", "A1 "), _chunk("a", "A2 "), _chunk("b", "B1 ")
    sent = [("agent", a1), ("agent", a2), ("agent", b1)]
    assert _grade(sent, [("agent", m) for m in (a1, a2, b1)])["MID-P-03"] == {Outcome.PASS}
    assert Outcome.FAIL in _grade(sent, [("agent", m) for m in (a2, a1, b1)])["MID-P-03"]
    other = _grade(sent, [("agent", m) for m in (b1, a1, a2)])
    assert other["MID-P-03/across-messages"] == {Outcome.WARN}
    assert other["MID-P-03"] == {Outcome.PASS}


def test_changed_content_is_one_fault_and_a_late_replay_fails() -> None:
    sent = [("agent", _chunk("a", "Alpha "))]
    got = _grade(sent, [("agent", _chunk("a", "Beta "))])
    assert got["MID-P-03"] == {Outcome.FAIL}
    load = {"jsonrpc": "2.0", "id": 5, "method": "session/load", "params": {"sessionId": "s"}}
    done = {"jsonrpc": "2.0", "id": 5, "result": {}}
    sent = [("client", load), ("agent", _chunk("a", "Replayed ")), ("agent", done)]
    on_time = [("client", load), ("agent", _chunk("a", "Replayed ")), ("agent", done)]
    late = [("client", load), ("agent", done), ("agent", _chunk("a", "Replayed "))]
    assert _grade(sent, on_time)["MID-P-03"] == {Outcome.PASS}
    assert _grade(sent, late)["MID-P-03"] == {Outcome.FAIL}


def test_an_unexercised_proxy_rule_is_not_testable_never_a_pass() -> None:
    got = _grade([], [])
    for rid in ("MID-P-01", "MID-P-02", "MID-P-03", "MID-P-04", "MID-P-05"):
        assert got[rid] == {Outcome.NOT_APPLICABLE}, rid


@pytest.mark.parametrize(("name", "adapts"), [("rewrites_ids", False), ("fans_out_late", True)])
def test_check_regrades_a_proxy_run_offline_to_the_same_verdict(name: str, adapts: bool,
                                                                 tmp_path: Path,
                                                                 fixture_runs: Any) -> None:
    # the fixture's own run (test_proxy_fixture_gets_exactly_its_findings reads it too)
    assert bool(next(e for e in MANIFEST if e["name"] == name).get("adapts")) == adapts
    code, live, output, transcripts = fixture_runs(name)
    assert code == 1, output
    offline_code, offline, output = cli_report("check", str(transcripts), tmp_path=tmp_path,
                                               name="offline")
    assert offline_code == code, output

    def rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
        return sorted((r["case"], r["requirement"], r["outcome"], r["message"])
                      for r in report["results"])

    assert rows(offline) == rows(live)
    lone = next(transcripts.glob("*.agent-side.jsonl"))
    proc = run_cli("check", str(lone))
    assert proc.returncode == 2 and "client side" in proc.stderr


def test_deadline_cuts_a_proxy_run_and_says_so(tmp_path: Path) -> None:
    code, report, output = cli_report("--proxy", "sh -c 'exec sleep 60' {agent}", "--deadline",
                                      "3", "--timeout", "30", "-j", "1", tmp_path=tmp_path,
                                      timeout=60)
    assert code == 1, output
    assert "run cut" in output and "Traceback" not in output
    notes = {c["note"].split(" (")[0] for c in report["cases"]}
    assert "not run: deadline" in notes, notes
    assert all(r["outcome"] != "pass" for r in report["results"]
               if r["case"] in {c["case"] for c in report["cases"]
                                if c["note"] == "not run: deadline"})


def _by_seq(path: Path) -> tuple[dict[str, Any], dict[int, Entry]]:
    header, entries = transcript.load(path)
    return header, {e.seq: e for e in entries}


def _update(entry: Entry) -> dict[str, Any]:
    msg = entry.msg
    assert isinstance(msg, dict) and msg.get("method") == "session/update", entry
    return msg["params"]["update"]


@pytest.mark.parametrize("protocol", [1, 2])
def test_a_proxy_finding_carries_evidence_from_both_sides(protocol: int, tmp_path: Path) -> None:
    """Issue 22: a MID-P finding names the agent-side entry (what the agent wrote, recorded
    by the shim between the proxy and the agent) and the client-side entry (what the proxy
    wrote to the suite's driver), and each points at the line it describes."""
    code, report, output = cli_report("--proxy", proxy("rewrites_ids"), "--protocol",
                                      str(protocol), "--case", "proxy-grouping", "--transcripts",
                                      str(tmp_path / "t"), tmp_path=tmp_path)
    assert code == 1, output
    case = next(c for c in report["cases"] if c["case"] == f"proxy-grouping@v{protocol}")
    client_path = Path(case["transcript"])
    header, client_side = _by_seq(client_path)
    assert header["side"] == "client"
    agent_header, agent_side = _by_seq(client_path.with_name(header["agent_side"]))
    assert agent_header["side"] == "agent"

    findings = [r for r in report["results"] if r["requirement"] == "MID-P-01"
                and r["outcome"] == "fail"]
    assert findings, output
    for finding in findings:
        evidence = finding["evidence"]
        sent = evidence["expected"]["agent_side"]
        got = evidence["actual"]["client_side"]
        assert got["entry"] in evidence["entries"]  # the finding's lines are the client side's
        wrote, came_out = agent_side[sent["entry"]], client_side[got["entry"]]
        # the agent wrote the update, on its side of the proxy; the proxy wrote the other one
        assert wrote.src == "agent" and came_out.src == "agent"
        assert _update(wrote)["sessionUpdate"] == sent["sessionUpdate"] == got["sessionUpdate"]
        assert _update(wrote).get("messageId") == sent["messageId"]
        assert _update(came_out).get("messageId") == got["messageId"]
        assert sent["messageId"] != got["messageId"]  # the rewrite, seen on both sides
        assert str(got["messageId"]).startswith("px-")  # rewrites_ids.py's own IDs
        assert _update(wrote).get("content") == _update(came_out).get("content")


def test_check_grades_a_proxy_run_with_cases_not_run_as_the_run_did(tmp_path: Path) -> None:
    """A proxy run cut by --deadline leaves not-run cases, whose transcripts are a header
    with no agent side: `check` of the run's transcripts reports them as the run did
    (it stopped with an internal error on them). Every proxy case takes a proxy and an
    agent double to start, so no machine plays them all within the deadline."""
    from offline import comparable

    live = tmp_path / "live.json"
    proc = run_cli("--proxy", proxy("transparent"), "--protocol", "1", "--deadline", "0.3",
                   "--transcripts", str(tmp_path / "t"), "--json", str(live), "--no-color",
                   timeout=300)
    report = load_json(live)
    assert any(c.get("reason") == "not_run" for c in report["cases"]), proc.stdout
    assert proc.returncode == 1 and report["summary"]["verdict"] == "fail"  # cut: never a pass
    checked = tmp_path / "check.json"
    offline = run_cli("check", str(tmp_path / "t"), "--json", str(checked), "--no-color")
    assert offline.returncode == 1, offline.stdout + offline.stderr
    assert comparable(load_json(checked)) == comparable(report)
    assert sorted((c["case"], c.get("reason")) for c in load_json(checked)["cases"]) == sorted(
        (c["case"], c.get("reason")) for c in report["cases"])
