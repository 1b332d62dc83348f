"""Hostile clients through the real CLI (the client suite, driven through a pty).

Each client in fixtures/hostile/clients/ misbehaves in one way: it never shows
``ready`` (silently, or while printing forever), exits early, floods the
screen, or spawns its agent (the suite's double) and abandons it. For each,
the run must exit 1 with the MID-C-08 finding and its evidence, write the
report and transcript, end within its timeouts plus a margin, and leave
neither the client's process group nor any double running.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import Run, group_alive, process_alive, run_client

from conformance import transcript as tmod

TIMEOUT = 4.0  # long enough for a well-behaved start on a busy machine
SLACK = 20.0  # start-up, the client's polite quit (2 s), ending doubles (2 s), a loaded machine


def assert_contained(run: Run, *, waited: float) -> None:
    limit = waited + SLACK
    assert run.elapsed < limit, f"run took {run.elapsed:.1f} s (bound {limit:.1f} s)"
    assert "Traceback" not in run.stderr, run.stderr
    assert run.report is not None, run.stderr
    ET.parse(run.workdir / "report.xml")
    assert run.transcripts, "no transcript written"
    for path in run.transcripts:
        tmod.load(path)
    starts = run.harness_events("start")
    clients = [e["data"]["pgid"] for e in starts if e["data"].get("pid_role") == "client"]
    assert clients, "the transcript's start event lacks the client's process group"
    for pgid in clients:
        assert not group_alive(pgid), f"client process group {pgid} survived the run"
    for e in starts:
        if e["data"].get("pid_role") == "agent-double":
            assert not process_alive(e["data"]["pid"]), "an agent double survived the run"


def only(run: Run, requirement: str) -> dict:
    found = run.findings(requirement, "fail")
    assert found, [(r["requirement"], r["outcome"]) for r in run.report["results"]]
    return found[0]


def test_never_shows_ready(tmp_path: Path) -> None:
    run = run_client("never_ready", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "MID-C-08/hang")
    assert "show ready" in f["message"]
    assert "Loading workspace" in f["evidence"]["actual"]["output_tail"]
    assert_contained(run, waited=TIMEOUT)


def test_never_shows_ready_but_keeps_printing(tmp_path: Path) -> None:
    turn = 5.0
    run = run_client("chatty_never_ready", tmp_path, timeout=TIMEOUT,
                     extra=["--turn-timeout", str(turn)])
    assert run.returncode == 1, run.stderr
    f = only(run, "MID-C-08/hang")
    assert "--turn-timeout 5" in f["message"] and "output kept coming" in f["message"]
    assert "Indexing...." in f["evidence"]["actual"]["output_tail"]
    assert_contained(run, waited=turn)


def test_exits_early(tmp_path: Path) -> None:
    run = run_client("exits_early", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "MID-C-08/exit")
    assert f["evidence"]["actual"]["returncode"] == 4
    assert "lost connection" in f["evidence"]["actual"]["output_tail"]
    assert_contained(run, waited=0)


def test_floods_the_screen(tmp_path: Path) -> None:
    run = run_client("floods_screen", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "MID-C-08/flood")
    assert "8388608 bytes" in f["message"]
    assert len(f["evidence"]["actual"]["output_tail"]) <= 2000  # the evidence is a tail
    assert run.max_rss_mb < 200, f"peak memory {run.max_rss_mb:.0f} MB"
    assert_contained(run, waited=0)


def test_spawns_and_abandons_the_agent_double(tmp_path: Path) -> None:
    run = run_client("abandons_double", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    f = only(run, "MID-C-08/exit")
    assert f["evidence"]["actual"]["returncode"] == 0
    doubles = [e for e in run.harness_events("start")
               if e["data"].get("pid_role") == "agent-double"]
    assert doubles, "the double never reported to the suite"
    assert_contained(run, waited=0)  # ... including: the abandoned double is gone


def test_a_double_still_starting_when_the_client_exits_is_recorded_and_ended(
        tmp_path: Path) -> None:
    """The cause of "the double never reported to the suite" on a busy machine: the client
    exits before its double's Python has started. The double's start script notes its PID
    first, so the suite waits (up to --timeout) for it to report, records it, then ends
    it. Provoked deterministically: the double takes 2 s to start."""
    run = run_client("abandons_slow_double", tmp_path, timeout=TIMEOUT)
    assert run.returncode == 1, run.stderr
    only(run, "MID-C-08/exit")
    doubles = [e for e in run.harness_events("start")
               if e["data"].get("pid_role") == "agent-double"]
    assert doubles, "the double never reported to the suite"
    assert_contained(run, waited=TIMEOUT)


def test_fixture_table_lists_every_hostile_client() -> None:
    readme = Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "README.md"
    table = readme.read_text("utf-8")
    tested = Path(__file__).read_text("utf-8")
    for path in (readme.parent / "clients").glob("[a-z]*.py"):
        assert f"`{path.stem}`" in table, f"{path.stem} is missing from the README table"
        assert f'"{path.stem}"' in tested, f"{path.stem} has no test"


def _notes(run: Run) -> dict[str, str]:
    assert run.report is not None, run.stderr
    return {c["case"]: c.get("note", "") for c in run.report["cases"]}


def test_a_client_that_never_starts_costs_two_timeouts_not_one_per_case(tmp_path: Path) -> None:
    """The same fault at the same step in two cases in a row settles the version: the
    rest are "not run" with the reason, never counted as passed (runner.Shortcut)."""
    run = run_client("never_ready", tmp_path, timeout=TIMEOUT, case="client-*",
                     extra=["-j", "1"])
    assert run.returncode == 1, run.stderr
    notes = _notes(run)
    ran = [c for c, note in notes.items() if note.startswith("aborted: timeout")]
    assert ran == ["client-grouping@v1", "client-missing-and-null@v1"], notes
    why = ("not run: the target went silent at start in client-grouping@v1 and "
           "client-missing-and-null@v1")
    assert len(notes) > 4 and all(n == why for c, n in notes.items() if c not in ran), notes
    assert [f["case"] for f in run.findings("MID-C-08/hang", "fail")] == ran
    assert_contained(run, waited=2 * TIMEOUT)


def test_keep_going_runs_every_client_case(tmp_path: Path) -> None:
    cases = ["client-grouping", "client-missing-and-null", "client-empty-id"]
    run = run_client("never_ready", tmp_path, timeout=TIMEOUT, case=cases[0],
                     extra=["--case", cases[1], "--case", cases[2], "--keep-going", "-j", "3"])
    assert run.returncode == 1, run.stderr
    notes = _notes(run)
    assert sorted(notes) == sorted(f"{c}@v1" for c in cases)
    assert all(n.startswith("aborted: timeout") for n in notes.values()), notes


def test_a_client_that_exits_at_its_first_turn_is_stopped_after_two_cases(
        tmp_path: Path) -> None:
    run = run_client("exits_early", tmp_path, timeout=TIMEOUT, case="client-*",
                     extra=["-j", "1"])
    assert run.returncode == 1, run.stderr
    not_run = {n for n in _notes(run).values() if n.startswith("not run")}
    why = ("not run: the target exited at turn 1 in client-grouping@v1 and "
           "client-missing-and-null@v1")
    assert not_run == {why}, _notes(run)


def test_deadline_cuts_the_client_case_in_progress(tmp_path: Path) -> None:
    """--deadline bounds a client run too: the case waiting on a client that never shows
    ready is cut and graded (not a hang: the cut is not the client's fault), the rest
    are "not run: deadline", and the run exits 1."""
    deadline = 3.0
    run = run_client("never_ready", tmp_path, timeout=60.0, case="client-*",
                     extra=["-j", "1", "--deadline", str(deadline)])
    assert run.returncode == 1, run.stderr
    notes = list(_notes(run).values())
    assert notes[0] == f"aborted: cut by --deadline ({deadline:g} s); graded what was recorded"
    assert len(notes) > 2 and set(notes[1:]) == {"not run: deadline"}, notes
    assert not run.findings("MID-C-08/hang", "fail")
    assert run.report is not None and "deadline" in run.report["cut"]
    assert "run cut:" in run.stderr
    assert_contained(run, waited=deadline)


def test_a_cut_mid_turn_is_not_the_clients_fault(tmp_path: Path) -> None:
    """The one-shot ignores_ids never answers the liveness probe, so each turn waits out
    the probe timeout; a deadline inside that wait cuts the case. What the cut left
    unanswered or unobserved is not graded: no MID-C-08 fail, no crash finding."""
    from conftest import REPO_ROOT, cli_report

    clients = REPO_ROOT / "fixtures" / "clients"
    code, report, out = cli_report(
        "--client", f"{sys.executable} {clients / 'ignores_ids.py'} --agent-cmd {{agent}} "
        "--prompt {prompt}", "--client-profile", str(clients / "ignores-ids.yaml"),
        "--protocol", "1", "--case", "client-grouping", "--timeout", "30", "--deadline", "2",
        tmp_path=tmp_path)
    assert code == 1, out
    [case] = report["cases"]
    assert case["note"] == "aborted: cut by --deadline (2 s); graded what was recorded"
    assert not [r for r in report["results"] if r["outcome"] in ("fail", "warn")], out
