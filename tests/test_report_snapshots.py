"""Snapshot tests: the console text, JSON, JUnit XML and Markdown of one real run.

The run drives the per-turn-counter fixture agent (fails MID-A-02) through two
cases over protocol v1. Outputs are deterministic (no wall-clock time; the
statement's date comes from SOURCE_DATE_EPOCH), so they are compared byte for
byte with ``tests/snapshots/``, except the Markdown's traceability section:
it follows every new case and fixture, and test_report_traceability.py checks
it against its sources. To accept a deliberate change, run with
``ACP_UPDATE_SNAPSHOTS=1`` and review the diff.

The same files rebuilt from the JSON report (``report --from``) must be
identical: the JSON report is enough to reproduce every other report.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
AGENT = "python3 fixtures/agents/per_turn_counter.py"
UPDATE = bool(os.environ.get("ACP_UPDATE_SNAPSHOTS"))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000", NO_COLOR="1")
    env.pop("CI", None)
    # "python3" in the target command is this interpreter, so the label stays portable.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("snap")
    proc = run_cli("--agent", AGENT, "--case", "ids-across-turns", "--case", "ids-across-sessions",
                   "--protocol", "1", "--json", str(tmp / "out.json"),
                   "--junit", str(tmp / "out.xml"), "--markdown", str(tmp / "out.md"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    again = run_cli("report", "--from", str(tmp / "out.json"), "--junit", str(tmp / "re.xml"),
                    "--markdown", str(tmp / "re.md"), "--show", "failures")
    assert again.returncode == 1, again.stderr
    # the wire lines a finding carries hold the target's random session IDs, and the kept
    # transcripts are beside the reports, in this test's folder: both made stable here
    read = lambda name: re.sub(r"sess_[0-9a-f]{32}", "sess_ID", (tmp / name).read_text(
        encoding="utf-8").replace(str(tmp), "TMP"))
    stable = lambda text: re.sub(r"sess_[0-9a-f]{32}", "sess_ID", text.replace(str(tmp), "TMP"))
    return {"text": stable(proc.stdout), "json": read("out.json"), "junit": read("out.xml"),
            "markdown": without_traceability(read("out.md")), "full-markdown": read("out.md"),
            "re-text": stable(again.stdout), "re-junit": read("re.xml"), "re-markdown": read("re.md")}


def without_traceability(markdown: str) -> str:
    start = markdown.index("<details><summary>Traceability")
    end = markdown.index("</details>", start) + len("</details>")
    return markdown[:start] + "(traceability section)" + markdown[end:]


@pytest.mark.parametrize("kind,name", [("text", "per_turn_counter.txt"),
                                       ("json", "per_turn_counter.json"),
                                       ("junit", "per_turn_counter.junit.xml"),
                                       ("markdown", "per_turn_counter.md")])
def test_output_matches_snapshot(outputs: dict[str, str], kind: str, name: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(outputs[kind], encoding="utf-8")
    assert path.exists(), f"no snapshot {name}: run with ACP_UPDATE_SNAPSHOTS=1"
    assert outputs[kind] == path.read_text(encoding="utf-8")


def test_reports_rebuilt_from_json_are_identical(outputs: dict[str, str]) -> None:
    assert outputs["re-markdown"] == outputs["full-markdown"]
    assert outputs["re-junit"] == outputs["junit"]
    assert outputs["re-text"] == outputs["text"]


def test_outputs_hold_no_machine_paths_or_times(outputs: dict[str, str]) -> None:
    for kind in ("text", "json", "junit", "markdown"):
        text = outputs[kind]
        assert str(REPO_ROOT) not in text
        assert "T0" not in text and "time=" not in text  # no timestamps, no durations
    assert '"date": "2023-11-14"' in outputs["json"]
    assert outputs["json"].count("2023-11-14") == 1  # the date is outside "results"


def test_the_json_report_names_the_official_tck_requirement_as_the_register_does(
        outputs: dict[str, str]) -> None:
    """``tck`` maps every requirement the results name that the register gives TCK IDs
    (issue 27 item 7) to those IDs, and nothing else."""
    import json

    from conformance.requirements import load_register

    report = json.loads(outputs["json"])
    named = {r["requirement"].split("/", 1)[0] for r in report["results"]}
    expected = {rid: list(meta.tck) for rid, meta in load_register().items()
                if rid in named and meta.tck}
    assert report["tck"] == expected
    assert report["tck"]["MID-A-02"] == ["ACP-PATCH-203"]
    assert "MID-A-03" in named and "MID-A-03" not in report["tck"]  # the TCK has none for it
