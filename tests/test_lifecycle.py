"""One case lifecycle for every role (conformance/lifecycle.py), through the real CLI.

Both roles record the same header (scope and how the case ended), keep scratch
transcripts for the HTML report alike, and end cases early the same way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO_ROOT, run_cli

REFERENCE_AGENT = f"{sys.executable} -m conformance.reference.agent"
REFERENCE_CLIENT = f"{sys.executable} -m conformance.client.reference --agent-cmd {{agent}}"
CLIENT_PROFILE = str(REPO_ROOT / "fixtures" / "clients" / "reference.yaml")


def header(path: Path) -> dict[str, object]:
    return dict(json.loads(path.read_text(encoding="utf-8").splitlines()[0]))


def test_client_html_without_transcripts_shows_the_wire(tmp_path: Path) -> None:
    # The agent side kept its transcripts in a scratch folder for the HTML report; the
    # client side did not, and its page pointed at transcripts it never kept.
    html = tmp_path / "report.html"
    proc = run_cli("--client", REFERENCE_CLIENT, "--client-profile", CLIENT_PROFILE,
                   "--case", "client-grouping", "--protocol", "1", "--html", str(html),
                   "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = html.read_text(encoding="utf-8")
    assert "no transcript was saved for this case" not in page
    assert "session/prompt" in page  # the wire lines are on the page
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert all(c["transcript"] is None for c in report["cases"])  # scratch: not pointed at


def test_both_roles_record_scope_and_ending(tmp_path: Path) -> None:
    agent = run_cli("--agent", REFERENCE_AGENT, "--case", "ids-across-turns", "--protocol", "1",
                    "--strict", "--transcripts", str(tmp_path / "a"))
    client = run_cli("--client", REFERENCE_CLIENT, "--client-profile", CLIENT_PROFILE,
                     "--case", "client-grouping", "--protocol", "1",
                     "--cross-turn-reuse", "warn", "--transcripts", str(tmp_path / "c"))
    assert agent.returncode == 0 and client.returncode == 0, agent.stdout + client.stdout
    a = header(tmp_path / "a" / "ids-across-turns@v1.jsonl")
    c = header(tmp_path / "c" / "client-grouping@v1.jsonl")
    for h, role in ((a, "agent"), (c, "client")):
        scope = h["scope"]
        assert isinstance(scope, dict) and scope["role"] == role
        assert set(scope) >= {"profile", "strict", "strict_ids", "cross_turn_reuse", "exclude",
                              "rules"}
        assert h["ended"] == {"note": ""}  # ran to its end
        assert h["requirements"]
    assert a["scope"]["strict"] is True  # type: ignore[index]
    assert c["scope"]["cross_turn_reuse"] == "warn"  # type: ignore[index]


def test_a_refused_prompt_ends_the_case_as_not_run(tmp_path: Path) -> None:
    agent = tmp_path / "refuses.py"
    agent.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(REPO_ROOT)!r})\n"
        "from conformance.reference.agent import ReferenceAgent, main\n"
        "from conformance.reference.wire import RpcError\n\n"
        "class Refuses(ReferenceAgent):\n"
        "    def handle_session_prompt(self, request_id, params):\n"
        "        raise RpcError(-32602, 'Invalid params')\n\n"
        "if __name__ == '__main__':\n"
        "    sys.exit(main(agent_class=Refuses))\n", encoding="utf-8")
    out = tmp_path / "r.json"
    proc = run_cli("--agent", f"{sys.executable} {agent}", "--case", "ids-across-turns",
                   "--protocol", "1", "--json", str(out))
    report = json.loads(out.read_text(encoding="utf-8"))
    case = report["cases"][0]
    assert case["reason"] == "not_run", case
    assert "refused session/prompt" in case["note"] and "-32602" in case["note"]
    rows = [r for r in report["results"] if r["requirement"] in case["requirements"]]
    assert rows and all(r["outcome"] == "not_applicable" and r["reason"] == "not_run"
                        for r in rows)
    assert "pass" not in {r["outcome"] for r in report["results"]
                          if r["requirement"].startswith("MID-")}, proc.stdout


def test_a_dead_target_collects_no_pass(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = run_cli("--agent", f"{sys.executable} -c 'import sys; sys.exit(3)'", "--json",
                   str(out), "--markdown", str(tmp_path / "r.md"), "--no-color")
    assert proc.returncode == 1
    report = json.loads(out.read_text(encoding="utf-8"))
    statement = (tmp_path / "r.md").read_text(encoding="utf-8")
    for p in (1, 2):  # the statement says, per version, that no MUST was exercised
        line = next(x for x in statement.splitlines()
                    if x.startswith(f"| MUST requirements exercised, v{p} |"))
        assert " 0 of " in line and "not exercised: MID-S-01" in line, line
    assert report["summary"]["pass"] == 0, [r for r in report["results"]
                                            if r["outcome"] == "pass"][:3]
    assert {r["requirement"] for r in report["results"] if r["outcome"] == "fail"} == {
        "TARGET/exit"}
    spoke = [r for r in report["results"] if r["requirement"] == "TARGET/shutdown"]
    assert spoke and all(r["reason"] == "not_testable" and "never spoke" in r["message"]
                         for r in spoke)
    assert set(report["unfinished"]) == {"1", "2"}
    assert "v1 not tested: no v1 case ran to its end" in proc.stdout
    assert all(r.get("reason") for r in report["results"] if r["outcome"] == "not_applicable")


def test_a_crash_graded_as_a_fault_carries_its_consequences(tmp_path: Path) -> None:
    client = REPO_ROOT / "fixtures" / "clients" / "exit_on_null_id.py"
    out = tmp_path / "r.json"
    proc = run_cli("--client", f"{sys.executable} {client} --agent-cmd {{agent}}",
                   "--client-profile", CLIENT_PROFILE, "--protocol", "1",
                   "--case", "client-missing-and-null", "--json", str(out))
    assert proc.returncode == 1
    report = json.loads(out.read_text(encoding="utf-8"))
    by_rule: dict[str, list[dict[str, object]]] = {}
    for r in report["results"]:
        by_rule.setdefault(r["requirement"], []).append(r)
    cause = [r for r in by_rule["MID-C-08/crash"] if r["outcome"] == "fail"]
    assert len(cause) == 1, by_rule["MID-C-08/crash"]
    assert "MID-C-04" in str(cause[0]["message"])  # it names the rules the stream tested
    assert any("MID-C-08/exit" in c for c in cause[0]["consequences"])  # type: ignore[union-attr]
    for rule in ("MID-C-08/exit", "MID-C-08/probe"):
        assert [r["outcome"] for r in by_rule[rule]] == ["not_applicable"], by_rule[rule]
        assert "consequence of the MID-C-08/crash fault" in str(by_rule[rule][0]["message"])
    assert report["summary"]["fail"] == 1  # the crash, once: no MID-C-04, no exit, no probe


def test_reasons_and_what_was_graded_against_reach_every_report(tmp_path: Path) -> None:
    from conftest import v1_only_agent

    agent = v1_only_agent(tmp_path)
    files = {k: tmp_path / f"r.{k}" for k in ("json", "xml", "md", "html")}
    proc = run_cli("--agent", f"{sys.executable} {agent}", "--protocol", "2",
                   "--case", "ids-across-turns", "--json", str(files["json"]),
                   "--junit", str(files["xml"]), "--markdown", str(files["md"]),
                   "--html", str(files["html"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(files["json"].read_text(encoding="utf-8"))
    assert report["cases"][0]["reason"] == "version_unsupported"
    assert {r["reason"] for r in report["results"]} == {"version_unsupported"}
    against = report["graded_against"]
    assert against["catalogue"].startswith("sha256:") and against["suite"]
    assert "sdk 2.4.0" in against["spec_source"]
    assert '<property name="reason" value="version_unsupported"' in files["xml"].read_text(
        encoding="utf-8")
    for kind in ("md", "html"):
        text = files[kind].read_text(encoding="utf-8")
        assert "Not graded, by reason" in text and "version_unsupported" in text, kind
        assert against["catalogue"] in text, kind
    again = tmp_path / "again.md"  # rebuilt from the JSON: what it was graded against is kept
    run_cli("report", "--from", str(files["json"]), "--markdown", str(again))
    assert again.read_text(encoding="utf-8") == files["md"].read_text(encoding="utf-8")
    from conformance.report.jsonreport import from_json, to_json

    rebuilt = to_json(from_json(report))
    assert rebuilt["graded_against"] == against and rebuilt["results"] == report["results"]


def test_no_code_reads_state_from_message_wording() -> None:
    import re

    pattern = re.compile(r"(note|message)\.(startswith|endswith)\(")
    offenders = [f"{p.relative_to(REPO_ROOT)}:{i}" for p in (REPO_ROOT / "conformance").rglob(
        "*.py") for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)]
    assert not offenders, offenders


def test_the_statement_lists_the_musts_exercised_and_not_per_version(tmp_path: Path) -> None:
    md = tmp_path / "r.md"
    proc = run_cli("--agent", REFERENCE_AGENT, "--case", "wire-shapes", "--markdown", str(md),
                   "--no-color")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {x.split("|")[1].strip(): x.split("|")[2] for x in md.read_text("utf-8").splitlines()
             if x.startswith("| MUST requirements exercised, v")}
    assert set(lines) == {"MUST requirements exercised, v1", "MUST requirements exercised, v2"}
    v1, v2 = lines["MUST requirements exercised, v1"], lines["MUST requirements exercised, v2"]
    exercised, _, missing = v1.partition("; not exercised: ")
    assert not exercised.strip().startswith("0 of")
    assert "MID-S-01" not in missing  # framed and typed IDs: wire-shapes grades it
    assert "MID-A-07" in missing  # no v1 load in this case: said, not passed
    assert "MID-V2-01" not in v1 and "MID-V2-01" not in v2.partition("not exercised")[2]
