"""One verdict, offline: ``check`` on a live run's transcripts must give the live run's
findings, summary and exit status, and every grade a report shows must be the one
``list --json`` states. Used by every test that runs a broken fixture live."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import run_cli

_REGISTER: dict[str, Any] = {}


def register() -> dict[str, Any]:
    """``list --json``: the grades the register states, by sub-rule."""
    if not _REGISTER:
        proc = run_cli("list", "--json")
        assert proc.returncode == 0, proc.stderr
        _REGISTER.update({row["rule"]: row for row in json.loads(proc.stdout)})
    return _REGISTER


def assert_graded_as_listed(report: dict[str, Any], args: list[str]) -> None:
    """Every fault row of a report has the grade ``list --json`` states for its sub-rule,
    the report's profile, the case's protocol version and the run's grading options
    (grades are data)."""
    rows = register()
    modifiers = {"strict-ids"} if "--strict-ids" in args else set()
    if "--cross-turn-reuse" in args:
        modifiers.add(f"cross-turn-reuse={args[args.index('--cross-turn-reuse') + 1]}")
    profile = report["profile"]
    checked = 0
    for r in report["results"]:
        if r["outcome"] not in ("fail", "warn", "info"):
            continue
        listed = rows[r["requirement"]]
        by_version = listed["grades"][profile]
        # a case of one version may have been answered in the other (its rules then apply)
        want = by_version.get(r["case"].rpartition("@v")[2]) or next(iter(by_version.values()))
        for option, grade in listed["options"].items():
            if option in modifiers:
                want = grade
        if report["strict"] and want == "warn":
            want = "fail"
        assert r["outcome"] == want, (r["requirement"], r["case"], r["outcome"], want)
        checked += 1
    assert checked or report["summary"]["verdict"] == "pass"


def comparable(report: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The findings (order-free) and the summary of a JSON report."""
    rows = sorted(json.dumps(r, sort_keys=True) for r in report["results"])
    return rows, report["summary"]


def assert_check_agrees(live_json: Path, transcripts: Path, live_status: int,
                        args: list[str]) -> None:
    """``check`` on a live run's transcripts gives the live run's findings, summary, exit
    status and cases; the live grades are the ones ``list --json`` states."""
    check_json = live_json.with_name("check.json")
    offline = run_cli("check", str(transcripts), "--json", str(check_json), "--no-color")
    assert check_json.exists(), offline.stdout + offline.stderr
    live_report = json.loads(live_json.read_text(encoding="utf-8"))
    check_report = json.loads(check_json.read_text(encoding="utf-8"))
    live_rows, live_summary = comparable(live_report)
    check_rows, check_summary = comparable(check_report)
    only_live = sorted(set(live_rows) - set(check_rows))[:5]
    only_check = sorted(set(check_rows) - set(live_rows))[:5]
    assert live_rows == check_rows, (only_live, only_check)
    assert live_summary == check_summary
    assert live_status == offline.returncode, offline.stdout
    assert len(live_report["cases"]) == len(check_report["cases"])  # every case has a file
    assert_graded_as_listed(live_report, args)
