"""A typo'd rule is an input error, never a run that grades nothing and passes.

A case with ``checks: [MID-A-99]`` (well formed, unknown) is refused before any target
starts: exit 2 from the command line (suite and fuzz-free ``list`` alike), a usage error
from the pytest plugin, one line naming the file and the line the ID is written on.
``lint-cases --cases DIR`` lints a vendor's folder of extra cases for what they name,
without 44 catalogue-coverage complaints that are not theirs.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from conftest import run_cli

pytest_plugins = ["pytester"]

REFERENCE = shlex.join([sys.executable, "-m", "conformance.reference.agent"])

CASE = """area: vendor
cases:
  - id: vendor-ids
    description: IDs across turns, as the vendor wants them
    requirements: [MID-A-02]
    applies: {protocols: [1], role: agent}
    drive: [start, new_session, {prompt: {text: hi}}, {prompt: {text: again}}]
    checks:
      - MID-A-02
      - MID-A-99
"""


def vendor_folder(tmp_path: Path, body: str = CASE) -> Path:
    folder = tmp_path / "extra"
    folder.mkdir(parents=True)
    (folder / "vendor.yaml").write_text(body, encoding="utf-8")
    return folder


def test_an_unknown_rule_is_refused_before_the_run(tmp_path: Path) -> None:
    folder = vendor_folder(tmp_path)
    proc = run_cli("--agent", REFERENCE, "--cases", str(folder), "--protocol", "1",
                   "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"{folder / 'vendor.yaml'}:10:" in proc.stderr  # the line MID-A-99 is on
    assert "MID-A-99" in proc.stderr and "no registered rule" in proc.stderr
    assert not (tmp_path / "r.json").exists()  # nothing ran


def test_lint_cases_on_extra_cases_lints_what_they_name(tmp_path: Path) -> None:
    folder = vendor_folder(tmp_path)
    proc = run_cli("lint-cases", "--cases", str(folder))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{folder / 'vendor.yaml'}:10: case vendor-ids checks MID-A-99")
    assert "neither covered" not in proc.stdout  # no catalogue coverage claimed of them
    assert lines[-1].startswith("1 cases, 1 problem(s) (extra cases")
    fixed = vendor_folder(tmp_path / "fixed", CASE.replace("      - MID-A-99\n", ""))
    proc = run_cli("lint-cases", "--cases", str(fixed))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_plugin_refuses_an_unknown_rule(plugin_pytest: object, tmp_path: Path) -> None:
    folder = vendor_folder(tmp_path)
    result = plugin_pytest("--acp-agent", REFERENCE, "--acp-cases", str(folder))  # type: ignore[operator]
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "vendor.yaml:10:" in err and "MID-A-99" in err and "Traceback" not in err
