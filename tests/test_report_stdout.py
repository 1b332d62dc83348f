"""``report`` names standard output ``-`` as every run does: ``report --merge A.json --json -``
prints the matrix's JSON on stdout (no file named ``-``), ``--markdown -`` its Markdown;
the one-line summary then goes to stderr; ``--html -`` and two reports on stdout are
refused. ``report --from`` does the same with ``--junit -`` and ``--markdown -``.

Each through the real command line in a fresh interpreter, on a JSON report that ``check``
writes of a recorded transcript.
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli_process

TRANSCRIPT = REPO_ROOT / "fixtures" / "regressions" / "mid-a-09-after-cancel-3f04d29577.jsonl"


@pytest.fixture
def run_json(tmp_path: Path) -> Path:
    """A run's JSON report (a failing one: the transcript breaks MID-A-09)."""
    path = tmp_path / "run.json"
    proc = run_cli_process("check", str(TRANSCRIPT), "--json", str(path), "--no-color",
                           cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    return path


def _merge_to_stdout(tmp_path: Path, run_json: Path,
                     option: str) -> subprocess.CompletedProcess[str]:
    """``report --merge RUN OPTION -``: the run failed, so the matrix says so (exit 1), and
    no file named ``-`` is written."""
    proc = run_cli_process("report", "--merge", str(run_json), option, "-", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert not (tmp_path / "-").exists()
    return proc


def test_merge_json_dash_prints_the_matrix_on_stdout(tmp_path: Path, run_json: Path) -> None:
    proc = _merge_to_stdout(tmp_path, run_json, "--json")
    matrix = json.loads(proc.stdout)  # stdout is the matrix, whole
    [run] = matrix["runs"]
    assert run["verdict"] == "fail"
    assert any(r["rule"].startswith("MID-A-09") for r in matrix["rules"]), matrix["rules"][:3]
    assert proc.stderr.startswith("matrix: 1 run(s)")  # the summary line, out of the way


def test_merge_markdown_dash_prints_the_matrix_on_stdout(tmp_path: Path,
                                                        run_json: Path) -> None:
    proc = _merge_to_stdout(tmp_path, run_json, "--markdown")
    assert proc.stdout.startswith("# acp-conformance matrix")
    assert "matrix:" not in proc.stdout


def test_merge_writes_files_and_prints_the_summary_as_before(tmp_path: Path,
                                                             run_json: Path) -> None:
    proc = run_cli_process("report", "--merge", str(run_json), "--json", "m.json",
                           cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("matrix: 1 run(s)")
    assert json.loads((tmp_path / "m.json").read_text("utf-8"))["runs"][0]["verdict"] == "fail"


@pytest.mark.parametrize("args,message", [
    (("--html", "-"), "--html -: this output is a file"),
    (("--json", "-", "--markdown", "-"), "only one report can go to standard output"),
])
def test_merge_refuses_what_stdout_cannot_hold(tmp_path: Path, run_json: Path,
                                               args: tuple[str, ...], message: str) -> None:
    proc = run_cli_process("report", "--merge", str(run_json), *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("option", ["--junit", "--markdown"])
def test_report_from_dash_prints_the_report_on_stdout(tmp_path: Path, run_json: Path,
                                                      option: str) -> None:
    proc = run_cli_process("report", "--from", str(run_json), option, "-", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    if option == "--junit":
        root = ET.fromstring(proc.stdout)
        assert root.tag == "testsuites" and "MID-A-09" in proc.stdout
    else:
        assert proc.stdout.startswith("# acp-conformance:")
        assert "FAIL" in proc.stdout
    assert not (tmp_path / "-").exists()
