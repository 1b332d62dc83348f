"""Client verdicts name the right cause, the right version, and cost a probe timeout once.

Through the real CLI: a client that ignores messageId altogether (one process per prompt,
v1 only, the turn's agent text as one line, no answer to requests it does not know) gets
MID-C-03 (warn in v1) and MID-C-08/probe, nothing under the cause-specific rules (its
control streams are shown the same way), no v2 row, (bench/silent_client.py measures the time: about a reference run plus one probe timeout
per case, under a minute with --protocol both at --timeout 10).
A v1-only pty client is "v2 unsupported by the client"; reloads are tested where the
client can reload and "not testable" where it cannot.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from conftest import cli_report

from conformance.client import profile as profmod
from conformance.client.profile import ProfileError

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "fixtures" / "clients"
CAUSES = ("MID-C-02", "MID-C-04", "MID-C-05", "MID-C-06", "MID-S-02", "MID-S-03")


def command(*words: str) -> str:
    return " ".join(shlex.quote(w) for w in (sys.executable, *words))


def rows(report: dict[str, Any], protocol: int) -> list[dict[str, Any]]:
    return [r for r in report["results"] if r["case"].endswith(f"@v{protocol}")]


def test_client_that_ignores_ids_is_graded_on_what_it_does(tmp_path: Path) -> None:
    code, report, out = cli_report(
        "--client", command(str(CLIENTS / "ignores_ids.py"), "--agent-cmd", "{agent}",
                            "--prompt", "{prompt}"),
        "--client-profile", str(CLIENTS / "ignores-ids.yaml"), "--protocol", "both",
        "--timeout", "10", "--transcripts", str(tmp_path / "tr"), tmp_path=tmp_path)
    assert code == 1 and report, out
    v1 = rows(report, 1)
    graded = {(r["requirement"], r["outcome"]) for r in v1}
    assert ("MID-C-03/merged", "warn") in graded and ("MID-C-03/merged", "fail") not in graded
    # Nothing names a cause the client does not have: each of those rows is pass, or
    # "not attributable" because the control stream was shown the same way.
    named = [r for r in v1 if r["requirement"].startswith(CAUSES)
             and r["outcome"] in ("fail", "warn")]
    assert not named, named
    unattributable = {r["requirement"] for r in v1 if r["message"].startswith(
        "not attributable: the control was shown the same way")}
    assert {"MID-C-02/merged", "MID-C-04", "MID-S-02/client", "MID-C-05",
            "MID-C-06"} <= unattributable, unattributable
    # Liveness fails once per case, in the first turn, with evidence; later turns (and the
    # control streams) do not wait out the probe timeout again.
    probe = [r for r in v1 if r["requirement"] == "MID-C-08/probe"]
    played = {c["case"] for c in report["cases"] if c["case"].endswith("@v1")
              and not c.get("note")}
    assert {r["case"] for r in probe if r["outcome"] == "fail"} == played
    assert all(r["outcome"] in ("fail", "not_applicable") for r in probe)
    assert sum(r["outcome"] == "fail" for r in probe) == len(played)
    assert all("probe-1" in r["message"] for r in probe if r["outcome"] == "fail")
    for path in (tmp_path / "tr").glob("*@v1.jsonl"):
        events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
        waits = [e for e in events if e.get("event") == "timeout"]
        skipped = [e for e in events if (e.get("data") or {}).get("note") == "probe-unawaited"]
        turns = [e for e in events if e.get("event") == "observed"]
        if turns:  # one probe timeout waited for; every later turn's probe not waited for
            assert len(waits) == 1 and len(skipped) == len(turns) - 1, path.name
    # No reload: MID-C-07 is not testable, and says why.
    reload = [r for r in v1 if r["requirement"] == "MID-C-07"]
    assert reload and all(r["outcome"] == "not_applicable" for r in reload)
    in_reload_cases = [r for r in reload if "reload" in r["case"]]
    assert in_reload_cases and all("the client has no reload" in r["message"]
                                   and r["reason"] == "no_capability" for r in in_reload_cases)
    # v2: never graded on v2 rules; one info row about the version negotiation.
    v2 = rows(report, 2)
    assert all(r["outcome"] == "not_applicable" for r in v2
               if r["requirement"] != "TARGET/negotiation"), [
        r for r in v2 if r["outcome"] != "not_applicable"]
    negotiation = [r for r in v2 if r["requirement"] == "TARGET/negotiation"]
    assert [r["outcome"] for r in negotiation] == ["info"]
    notes = {c["note"] for c in report["cases"] if c["case"].endswith("@v2")}
    assert notes == {"v2 unsupported by the client (it asked for 1)"}


def test_v1_only_pty_client_is_not_graded_on_v2(tmp_path: Path) -> None:
    code, report, out = cli_report(
        "--client", command(str(CLIENTS / "v1_only.py"), "--agent-cmd", "{agent}"),
        "--client-profile", str(CLIENTS / "reference.yaml"), "--protocol", "both",
        "--case", "client-grouping", "--case", "client-v2-upserts", "--case", "client-opacity",
        tmp_path=tmp_path)
    assert code == 0, out
    assert all(r["outcome"] in ("pass", "not_applicable") for r in rows(report, 1))
    v2 = rows(report, 2)
    info = [r for r in v2 if r["outcome"] != "not_applicable"]
    assert [(r["requirement"], r["outcome"]) for r in info] == [("TARGET/negotiation", "info")]
    assert "asked for protocolVersion 1, was answered 2" in info[0]["message"]
    cases = {c["case"]: c["note"] for c in report["cases"] if c["case"].endswith("@v2")}
    assert set(cases.values()) == {"v2 unsupported by the client (it asked for 1)"}
    assert all(r["message"].startswith("not testable: v2 unsupported by the client")
               for r in v2 if r["requirement"].startswith("MID-"))


def test_v1_only_client_that_closes_passes_the_negotiation(tmp_path: Path) -> None:
    # The reference client limited to v1 closes the connection when answered 2.
    code, report, out = cli_report(
        "--client", command("-m", "conformance.client.reference", "--agent-cmd", "{agent}",
                            "--protocol", "1"),
        "--client-profile", str(CLIENTS / "reference.yaml"), "--protocol", "2",
        "--case", "client-grouping", tmp_path=tmp_path)
    assert code == 0, out
    graded = [(r["requirement"], r["outcome"]) for r in report["results"]
              if r["outcome"] != "not_applicable"]
    assert graded == [("TARGET/negotiation", "pass")], graded
    assert report["cases"][0]["note"] == "v2 unsupported by the client (it asked for 1)"


def test_cause_not_attributable_when_the_control_merges_too(tmp_path: Path) -> None:
    # A client that groups only by a change of update type merges "" with the ID-less chunk
    # after it, and the control (an ordinary ID instead of "") the same way: the fault is
    # MID-C-03/merged (warn in v1), not MID-C-06.
    code, report, out = cli_report(
        "--client-adapter", f"{CLIENTS / 'type_change_only.py'}:make_client",
        "--protocol", "1", "--case", "client-empty-id", "--markdown", str(tmp_path / "r.md"),
        "--html", str(tmp_path / "r.html"), tmp_path=tmp_path)
    assert code == 0, out
    # Reports say "not attributable" (not "not testable") for the requirement.
    row = next(line for line in (tmp_path / "r.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `MID-C-06` |"))
    assert "| not attributable |" in row, row
    assert ">not attributable</span>" in (tmp_path / "r.html").read_text(encoding="utf-8")
    by = {r["requirement"]: r for r in report["results"]}
    assert by["MID-C-06"]["outcome"] == "not_applicable"
    assert by["MID-C-06"]["message"].startswith("not attributable: the control was shown "
                                                "the same way"), by["MID-C-06"]
    assert by["MID-C-03/merged"]["outcome"] == "warn"
    assert "so were the same two in the control stream" in by["MID-C-03/merged"]["message"]


def test_v2_chunk_attached_like_its_control_is_not_attributable(tmp_path: Path) -> None:
    # The same client in v2 also attaches the chunk without an ID to the message before
    # it, and its control, which has an ID of its own: MID-C-03/merged (fail in v2).
    # attaches_idless_v2.py keeps the control apart and fails MID-V2-07 (manifest).
    code, report, out = cli_report(
        "--client-adapter", f"{CLIENTS / 'type_change_only.py'}:make_client",
        "--protocol", "2", "--case", "client-v2-chunk-without-id", tmp_path=tmp_path)
    assert code == 1, out
    by: dict[str, set[str]] = {}
    for r in report["results"]:
        by.setdefault(r["requirement"], set()).add(r["outcome"])
    assert by["MID-V2-07"] == {"not_applicable"} and by["MID-C-03/merged"] == {"fail"}, by


def test_a_real_cause_is_named_with_its_control(tmp_path: Path) -> None:
    code, report, out = cli_report(
        "--client-adapter", f"{CLIENTS / 'case_insensitive.py'}:make_client",
        "--protocol", "1", "--case", "client-opacity", tmp_path=tmp_path)
    assert code == 1, out
    merged = [r for r in report["results"] if r["requirement"] == "MID-C-02/merged"]
    assert merged and all(r["outcome"] == "fail" for r in merged)
    assert "equal only after case" in merged[0]["message"]
    assert "its control (the same arrangement with ordinary IDs) was shown as expected" in \
        merged[0]["message"]


def test_reload_is_compared_with_the_replayed_history(tmp_path: Path) -> None:
    cases = ["--case", "client-reload-fresh-ids", "--case", "client-reload-same-ids"]
    code, report, out = cli_report("--client-adapter", "conformance.client.reference:make_client",
                                   *cases, tmp_path=tmp_path, name="reference")
    assert code == 0, out
    assert {r["outcome"] for r in report["results"] if r["requirement"] == "MID-C-07"} == {
        "pass"}
    code, report, out = cli_report(
        "--client-adapter", f"{CLIENTS / 'keeps_display_on_reload.py'}:make_client", *cases,
        tmp_path=tmp_path, name="keeps")
    assert code == 0, out  # MID-C-07 is informative: warn
    warned = [r for r in report["results"] if r["requirement"] == "MID-C-07"]
    # v2 replays whole-message updates: under the same IDs they replace what is shown, so
    # only regenerated IDs show the history twice.
    assert {r["case"] for r in warned if r["outcome"] == "warn"} == {
        "client-reload-fresh-ids@v1", "client-reload-same-ids@v1", "client-reload-fresh-ids@v2"}
    passed = {r["case"] for r in warned if r["outcome"] == "pass"}
    assert "client-reload-same-ids@v2" in passed
    assert any("after the reload" in r["message"] and "shown 2 times" in r["message"]
               for r in warned)


def test_one_shot_client_reloads_with_its_load_command(tmp_path: Path) -> None:
    reference = command("-m", "conformance.client.reference", "--agent-cmd", "{agent}")
    profile = tmp_path / "one-shot.yaml"
    profile.write_text("message: '^(?P<role>user|agent|thought): (?P<text>.*)$'\n"
                       "load: " + repr(reference + " --resume {session} --prompt {prompt}")
                       + "\n", encoding="utf-8")
    code, report, out = cli_report("--client", reference + " --prompt {prompt}",
                                   "--client-profile", str(profile), "--protocol", "1",
                                   "--case", "client-reload-fresh-ids", tmp_path=tmp_path)
    assert code == 0, out
    assert {r["outcome"] for r in report["results"] if r["requirement"] == "MID-C-07"} == {
        "pass"}
    started = [r for r in report["results"] if r["requirement"] == "MID-C-08/exit"]
    assert started and started[0]["outcome"] == "pass"


def test_one_shot_client_with_a_typed_load_has_no_reload(tmp_path: Path) -> None:
    # A profile written for a pty client (load is what to type) says nothing about how a
    # one-shot client resumes a session: the reload cases say so and start nothing.
    profile = tmp_path / "one-shot.yaml"
    profile.write_text("message: '^(?P<role>agent): (?P<text>.*)$'\n"
                       "load: '/load {session}\\r'\n", encoding="utf-8")
    code, report, out = cli_report(
        "--client", command(str(CLIENTS / "ignores_ids.py"), "--agent-cmd", "{agent}",
                            "--prompt", "{prompt}"),
        "--client-profile", str(profile), "--protocol", "1", "--case",
        "client-reload-fresh-ids", tmp_path=tmp_path)
    assert code == 0, out
    rows = [r for r in report["results"] if r["requirement"].startswith("MID-")]
    assert rows and all(r["outcome"] == "not_applicable" and "the client has no reload" in
                        r["message"] and "with {agent}" in r["message"] for r in rows), rows


def test_profile_load_needs_the_session_placeholder(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("message: '^(?P<role>agent): (?P<text>.*)$'\nload: /resume\n",
                    encoding="utf-8")
    try:
        profmod.load(path)
    except ProfileError as exc:
        assert f"{path}:2" in str(exc) and "{session}" in str(exc)
    else:
        raise AssertionError("a load without {session} was accepted")
