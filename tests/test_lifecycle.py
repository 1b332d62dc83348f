"""One case lifecycle for every role (conformance/lifecycle.py), through the real CLI.

Both roles record the same header (scope and how the case ended), keep scratch
transcripts for the HTML report alike, and end cases early the same way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
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
                   "--json", str(tmp_path / "r.json"), "--no-transcripts")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "transcripts").exists()  # kept beside the reports unless told not
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


@pytest.mark.parametrize("fixture,cause,fails", [
    # the control (ordinary IDs) kills it too: the crash itself is the fault
    ("exit_on_second_message", "MID-C-08/crash", 1),
    # the control is shown: the null ID killed it (graded under both of its names)
    ("exit_on_null_id", "MID-C-04", 2)])
def test_a_crash_graded_as_a_fault_carries_its_consequences(tmp_path: Path, fixture: str,
                                                            cause: str, fails: int) -> None:
    out = tmp_path / "r.json"
    proc = run_cli(*_missing_and_null(fixture), "--json", str(out))
    assert proc.returncode == 1
    _assert_one_crash_fault(json.loads(out.read_text(encoding="utf-8")), cause, fails)


def test_a_crash_is_graded_alike_when_the_doubles_reports_arrive_late(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client dies on the chunk its agent double just wrote; the double reported that
    chunk on its own channel first, but the suite may read the client's exit before it
    reads that report (a busy machine). The rows do not depend on which comes first:
    here every report is read late, and the null ID is still the cause."""
    import time

    from conformance.client.channel import SuiteSide

    class LateReader:
        def __init__(self, f: Any) -> None:
            self._f = f

        def readline(self, limit: int = -1) -> bytes:
            time.sleep(0.05)
            return bytes(self._f.readline(limit))

        def close(self) -> None:
            self._f.close()

    class LateSocket:
        def __init__(self, sock: Any) -> None:
            self._sock = sock

        def makefile(self, mode: str) -> LateReader:
            return LateReader(self._sock.makefile(mode))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._sock, name)

    serve = SuiteSide._serve
    monkeypatch.setattr(SuiteSide, "_serve", lambda self, sock: serve(self, LateSocket(sock)))
    out = tmp_path / "r.json"
    proc = run_cli(*_missing_and_null("exit_on_null_id"), "--json", str(out), in_process=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _assert_one_crash_fault(json.loads(out.read_text(encoding="utf-8")), "MID-C-04", 2)


def _missing_and_null(fixture: str) -> tuple[str, ...]:
    client = REPO_ROOT / "fixtures" / "clients" / f"{fixture}.py"
    return ("--client", f"{sys.executable} {client} --agent-cmd {{agent}}", "--client-profile",
            CLIENT_PROFILE, "--protocol", "1", "--case", "client-missing-and-null")


def _assert_one_crash_fault(report: dict[str, Any], cause: str, fails: int) -> None:
    by_rule: dict[str, list[dict[str, object]]] = {}
    for r in report["results"]:
        by_rule.setdefault(r["requirement"], []).append(r)
    found = [r for r in by_rule[cause] if r["outcome"] == "fail"]
    assert len(found) == 1, by_rule[cause]
    assert "MID-C-04" in str(found[0]["message"])  # it names the rules the stream tested
    assert any("MID-C-08/exit" in c for c in found[0]["consequences"])  # type: ignore[union-attr]
    for rule in ("MID-C-08/exit", "MID-C-08/probe"):  # each exit (probe, control) folded
        assert {r["outcome"] for r in by_rule[rule]} == {"not_applicable"}, by_rule[rule]
        assert all(f"consequence of the {cause} fault" in str(r["message"])
                   for r in by_rule[rule])
    if cause != "MID-C-08/crash":  # the crash row says where the fault went, never "pass"
        assert [r["outcome"] for r in by_rule["MID-C-08/crash"]] == ["not_applicable"]
        assert "the fault is graded there" in str(by_rule["MID-C-08/crash"][0]["message"])
    assert report["summary"]["fail"] == fails  # one fault: no exit, no probe


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


EXCLUDING_CASE = """\
area: A case file that excludes rules, with its reasons
cases:
  - id: two-turns-excluding
    description: Two turns of ids-across-turns, less the rules its file excludes
    requirements: [MID-A-02, MID-A-03, MID-A-05]
    applies: {protocols: [1], role: agent}
    drive:
      - start
      - new_session
      - prompt: {text: "Reply with two separate messages about the weather."}
      - prompt: {text: "Now list the files in the working directory, then summarise them."}
    checks: [MID-A-02, MID-A-03]
"""
GAP_WHY = "this case does not grade a chunk left without its ID"
NO_IDS_WHY = "this case is not about agents that send no IDs at all"
EXCLUDE = f"""\
    exclude:
      MID-A-03/gap: "{GAP_WHY}"
      MID-A-05: "{NO_IDS_WHY}"
"""


def cases_dir(folder: Path, exclude: bool) -> Path:
    folder.mkdir()
    (folder / "excluding.yaml").write_text(EXCLUDING_CASE + (EXCLUDE if exclude else ""),
                                           encoding="utf-8")
    return folder


def rows_of(report: dict[str, object], prefix: str) -> dict[str, dict[str, object]]:
    return {str(r["requirement"]): r for r in report["results"]  # type: ignore[attr-defined]
            if str(r["requirement"]).startswith(prefix)}


def test_a_case_file_exclusion_is_not_applicable_with_its_reason(tmp_path: Path) -> None:
    # The reference agent passes MID-A-03/gap and MID-A-05 in this case; excluded by the
    # case file, each is not_applicable / excluded_by_case with the file's sentence.
    out, md, saved = tmp_path / "r.json", tmp_path / "r.md", tmp_path / "t"
    proc = run_cli("--agent", REFERENCE_AGENT, "--cases", str(cases_dir(tmp_path / "x", True)),
                   "--protocol", "1", "--json", str(out), "--markdown", str(md),
                   "--transcripts", str(saved), "--no-color")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    gap = rows_of(report, "MID-A-03/gap")["MID-A-03/gap"]
    assert gap["outcome"] == "not_applicable" and gap["reason"] == "excluded_by_case", gap
    assert GAP_WHY in str(gap["message"])
    no_ids = rows_of(report, "MID-A-05/")
    assert set(no_ids) == {"MID-A-05/no-ids", "MID-A-05/partial-kinds",  # a whole requirement
                           "MID-A-05/replay-without-ids"}
    for row in no_ids.values():
        assert row["outcome"] == "not_applicable" and row["reason"] == "excluded_by_case", row
        assert NO_IDS_WHY in str(row["message"])
    siblings = rows_of(report, "MID-A-03/")  # the exclusion is of one sub-rule only
    assert siblings["MID-A-03/id-per-chunk"]["outcome"] == "pass"
    excluded = {r for r, row in rows_of(report, "").items() if row.get("reason") == "excluded_by_case"}
    assert excluded == {"MID-A-03/gap", "MID-A-05/no-ids", "MID-A-05/partial-kinds",
                        "MID-A-05/replay-without-ids"}
    assert GAP_WHY in md.read_text(encoding="utf-8")  # every report shows the sentence
    scope = header(saved / "two-turns-excluding@v1.jsonl")["scope"]
    assert scope["exclude"] == {"MID-A-03/gap": GAP_WHY, "MID-A-05": NO_IDS_WHY}  # type: ignore[index]
    offline = tmp_path / "check.json"  # check on the transcripts excludes the same rows
    again = run_cli("check", str(saved), "--json", str(offline), "--no-color")
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(offline.read_text(encoding="utf-8"))["results"] == report["results"]


def test_an_excluded_rule_the_traffic_breaks_is_not_graded(tmp_path: Path) -> None:
    # id_gap leaves the middle chunk of a message without its ID: MID-A-03/gap, a warn
    # (a fail under --strict). Excluded by the case file it is neither warn nor fail.
    agent = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'id_gap.py'}"
    runs = {}
    for exclude in (False, True):
        out = tmp_path / f"r{exclude}.json"
        proc = run_cli("--agent", agent, "--cases", str(cases_dir(tmp_path / f"c{exclude}",
                                                                    exclude)),
                       "--protocol", "1", "--strict", "--json", str(out), "--no-color")
        runs[exclude] = proc.returncode, json.loads(out.read_text(encoding="utf-8"))
    code, report = runs[False]  # the control: without the exclusion the fault is graded
    assert code == 1 and rows_of(report, "MID-A-03/gap")["MID-A-03/gap"]["outcome"] == "fail"
    code, report = runs[True]
    gap = rows_of(report, "MID-A-03/gap")["MID-A-03/gap"]
    assert gap["outcome"] == "not_applicable" and gap["reason"] == "excluded_by_case", gap
    assert code == 0 and report["summary"]["fail"] == 0, report["summary"]


REFUSES = REPO_ROOT / "fixtures" / "harness" / "refuses_request.py"
REFUSAL = "error -32603: Internal error: refused by the fixture"


def test_a_refused_session_new_ends_the_case_as_not_run(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = run_cli("--agent", f"{sys.executable} {REFUSES} --refuse session/new",
                   "--case", "ids-across-turns", "--protocol", "1", "--json", str(out),
                   "--no-color")
    report = json.loads(out.read_text(encoding="utf-8"))
    [case] = report["cases"]
    assert case["reason"] == "not_run" and case["outcome"] == "not_applicable", case
    assert "refused session/new" in case["note"] and REFUSAL in case["note"], case["note"]
    rows = [r for r in report["results"] if r["case"] == case["case"]]
    assert {r["requirement"] for r in rows} == set(case["requirements"])  # nothing else graded
    assert all(r["outcome"] == "not_applicable" and r["reason"] == "not_run"
               and REFUSAL in r["message"] for r in rows), rows
    assert report["summary"]["pass"] == 0 and report["summary"]["fail"] == 0
    assert proc.returncode == 1  # the only v1 case did not run: the run is not a pass
    assert "1" in report["unfinished"]


def test_a_version_where_no_case_ran_to_its_end_fails_the_run(tmp_path: Path) -> None:
    # docs/grading.md, "No credit without traffic": a version in which cases were played
    # but none ran to its end fails the run (exit 1), and its summary line says `not
    # tested` and why instead of counting passes. Here every v1 session/prompt is refused
    # (no fail finding, no TARGET/exit: the exit code is the run's own verdict) and v2
    # behaves, so only v1 is unfinished.
    out = tmp_path / "r.json"
    proc = run_cli("--agent", f"{sys.executable} {REFUSES} --refuse session/prompt --in 1",
                   "--case", "ids-across-turns", "--case", "prompt-lifecycle",
                   "--protocol", "both", "--json", str(out), "--no-color")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["summary"]["fail"] == 0 and report["summary"]["warn"] == 0
    assert not [r for r in report["results"] if r["outcome"] == "fail"]
    v1 = [c for c in report["cases"] if c["protocol"] == 1]
    assert len(v1) == 2 and all(c["reason"] == "not_run" and "refused session/prompt"
                                in c["note"] for c in v1), v1
    refused = {c["case"] for c in v1}
    from_refused = [r for r in report["results"] if r["case"] in refused]
    assert from_refused and all(r["outcome"] == "not_applicable" and r["reason"] == "not_run"
                                for r in from_refused)
    assert set(report["unfinished"]) == {"1"}  # v2 ran to its end: it is not unfinished
    assert report["unfinished"]["1"].startswith("no v1 case ran to its end")
    summary = proc.stdout[proc.stdout.index("summary:"):].splitlines()
    v1_line = next(x for x in summary if " v1 " in f" {x} ")
    assert "v1 not tested: no v1 case ran to its end" in v1_line and " pass" not in v1_line
    assert any("v2 " in x and " pass" in x for x in summary)  # v2 counts its passes
    assert "acp-conformance: not tested: no v1 case ran to its end" in proc.stderr
    assert "verdict: FAIL" in proc.stdout
    assert {c["outcome"] for c in report["cases"] if c["protocol"] == 2} == {"pass"}


def test_quiet_drops_hides_only_its_types_from_start_to_stop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytest session's span (its start hook to its end hook): a dropped raise of the
    given types is not printed, any other is; a stop without a start (a session that never
    started) or a second stop changes nothing, and the stop puts the hook back."""
    from types import SimpleNamespace

    from conformance.lifecycle import QuietDrops

    printed: list[type] = []

    def recorder(unraisable: Any) -> None:
        printed.append(type(unraisable.exc_value))

    monkeypatch.setattr(sys, "unraisablehook", recorder)
    quiet = QuietDrops(KeyboardInterrupt)
    quiet.stop()
    assert sys.unraisablehook is recorder
    quiet.start()
    quiet.start()  # once only: its stop restores the hook it found
    sys.unraisablehook(SimpleNamespace(exc_value=KeyboardInterrupt()))
    sys.unraisablehook(SimpleNamespace(exc_value=ValueError("other")))
    assert printed == [ValueError]
    quiet.stop()
    quiet.stop()
    assert sys.unraisablehook is recorder
    sys.unraisablehook(SimpleNamespace(exc_value=KeyboardInterrupt()))
    assert printed == [ValueError, KeyboardInterrupt]
