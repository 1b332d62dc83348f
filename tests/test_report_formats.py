"""A report format is one module of ``report/`` plus one row of ``report/formats.py``.

The row makes the option in the one option table (so every shell has it), and the
command line and the pytest plugin write reports through ``write_reports`` alone: no
shell names a format. Held here: every row is an option as the table renders options; no
shell's report code spells a format; and a row added to the table (here a test's own
format) is written by ``check`` with nothing else changed.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from conformance.report import formats
from conformance.report.formats import FORMATS, Format, Inputs, write_reports
from conformance.settings.table import option

TRANSCRIPT = REPO_ROOT / "fixtures" / "regressions" / "mid-a-09-after-cancel-3f04d29577.jsonl"
SHELLS = [REPO_ROOT / "conformance" / "cli" / "output.py",
          REPO_ROOT / "conformance" / "pytest_plugin" / "reports.py"]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_format_is_one_option_of_the_table(fmt: Format) -> None:
    row = option(fmt.name)
    assert (row.help, row.shells, row.kind, row.group) == (fmt.help, fmt.shells, "path",
                                                           "output")


@pytest.mark.parametrize("shell", SHELLS, ids=lambda p: p.name)
def test_no_shell_names_a_format(shell: Path) -> None:
    source = shell.read_text(encoding="utf-8")
    for fmt in FORMATS:
        spelled = re.findall(rf"\bns\.{fmt.name}\b|[\"']acp_{fmt.name}[\"']|"
                             rf"\bwrite_{fmt.name}\b", source)
        assert not spelled, f"{shell.name} names the {fmt.name} report: {spelled}"


def test_write_reports_writes_each_named_format_and_routes_dash_to_stdout(
        tmp_path: Path) -> None:
    from conformance.grading import grade_recorded, recorded_case
    from conformance.results import RunResult
    from conformance.transcript import load

    header, entries = load(TRANSCRIPT)
    case = recorded_case(header, grade_recorded(header, entries), name="c", description="",
                         protocol=1)
    result = RunResult("0", "t", "agent", [1], str(header.get("profile") or ""), False,
                       cases=[case])
    out = io.StringIO()
    paths = {"json": tmp_path / "r.json", "junit": "-", "html": tmp_path / "r.html",
             "markdown": None}
    built = []
    written = write_reports(result, paths, Inputs(trace=lambda: built.append(1) or []),
                            stdout=out.write)
    assert written == [str(tmp_path / "r.json"), str(tmp_path / "r.html")]  # table order
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["verdict"] == "fail"
    assert out.getvalue().startswith("<?xml") and out.getvalue().endswith("\n")
    assert "<html" in (tmp_path / "r.html").read_text()
    assert built == [1]  # the traceability rows are built once, and only when asked for
    assert not (tmp_path / "-").exists()


def test_one_row_is_a_new_format_for_check(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A format the shells have never heard of, added as a row, is written by ``check``."""
    from conformance.cli.check import build_check_parser, cmd_check

    def render(result: object, inputs: Inputs) -> str:
        return "cases: " + ",".join(c.case for c in result.cases)  # type: ignore[attr-defined]

    row = Format("plain", "write a plain list here", render, frozenset({"cli"}))
    monkeypatch.setattr(formats, "FORMATS", (*FORMATS, row))
    ns = build_check_parser().parse_args([str(TRANSCRIPT), "--no-color", "-q"])
    ns.plain = tmp_path / "cases.txt"  # what argparse would set from the row's option
    monkeypatch.chdir(tmp_path)
    assert cmd_check(ns) == 1  # the transcript breaks MID-A-09
    assert (tmp_path / "cases.txt").read_text().startswith("cases: ")
