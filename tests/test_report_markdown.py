"""The Markdown summary and certification statement, and the expected-failures baseline.

One real run of the reference agent and one of the per-turn-counter fixture
(fails MID-A-02) give JSON reports; the statement and the baseline verdicts
are then checked through the CLI, rebuilding from those reports
(``report --from``), which is how CI reuses a run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.baseline import BaselineError, Entry, load
from conformance.cli import main
from conformance.report.markdown import md, to_markdown
from conformance.results import CaseResult, Finding, Outcome, RunResult

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000", NO_COLOR="1")
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``acp-conformance report ARGS`` in this process: pure data, no target."""
    code = main(["report", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("md")
    good = run_cli("demo", "--case", "wire-shapes", "--json", str(tmp / "good.json"),
                   "--markdown", str(tmp / "good.md"))
    assert good.returncode == 0, good.stdout + good.stderr
    bad = run_cli("--agent", f"{sys.executable} fixtures/agents/per_turn_counter.py",
                  "--case", "ids-across-turns", "--protocol", "1", "--json", str(tmp / "bad.json"))
    assert bad.returncode == 1, bad.stderr
    return {"dir": tmp, "good": tmp / "good.json", "good_md": tmp / "good.md",
            "bad": tmp / "bad.json"}


def test_statement_of_a_conformant_agent(runs: dict[str, Path]) -> None:
    text = runs["good_md"].read_text(encoding="utf-8")
    assert "## Certification statement" in text
    # one case exercises only some MUST requirements: the headline says so
    assert "| Verdict | **PASS, partial: " in text
    assert "| Target | acp-conformance-reference-agent 0.1.0 (as reported in `initialize`) |" in text
    assert "| Protocol | v1, v2 |" in text
    assert "| Profile | acp-sdk-2.4.0 |" in text
    assert "| Tool | acp-conformance 0.1.0 |" in text
    assert "| MUST requirements | **PASS, partial: " in text
    assert "| SHOULD requirements |" in text
    assert "| Date | 2023-11-14 |" in text
    assert "| `MID-S-01` | MUST | pass |" in text
    assert "<details><summary>Traceability" in text


def test_statement_of_a_broken_agent(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    dest = runs["dir"] / "bad.md"
    code, _, _ = report(capsys, "--from", str(runs["bad"]), "--markdown", str(dest))
    assert code == 1
    text = dest.read_text(encoding="utf-8")
    assert "| Verdict | **FAIL** |" in text
    assert "| MUST requirements | **FAIL**:" in text
    assert "| `MID-A-02` | MUST | FAIL |" in text
    assert "| FAIL | `MID-A-02/cross-turn-reuse` | ids-across-turns@v1 |" in text
    assert "actual msg\\_2" in text  # evidence, escaped for Markdown


def test_statement_is_reproducible_from_json(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    dest = runs["dir"] / "again.md"
    code, _, err = report(capsys, "--from", str(runs["good"]), "--markdown", str(dest))
    assert code == 0, err
    assert dest.read_bytes() == runs["good_md"].read_bytes()


def test_hostile_strings_stay_text() -> None:
    evil = "<script>alert(1)</script> | `code` *b* [x](javascript:alert(1)) \u202e"
    escaped = md(evil)
    assert "<" not in escaped and "&lt;script&gt;" in escaped
    assert "\\|" in escaped and "\\`code\\`" in escaped and "\\[x\\]" in escaped
    assert "\u202e" not in escaped
    result = RunResult("0.1.0", evil, "agent", [1], "p", False,
                       target_info={"name": evil, "version": "1\n2"}, date="2023-11-14")
    text = to_markdown(result)
    assert "<script>" not in text
    assert all(line.count("|") % 2 == 0 or not line.startswith("|")
               for line in text.splitlines() if "alert" in line)  # no cell broken open


# -- baseline ---------------------------------------------------------------------------


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return path


def test_listed_failures_do_not_fail_the_run(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    b = write(runs["dir"], "all.yaml", "expected_failures:\n"
              "  - ids-across-turns@v1:MID-A-02/cross-turn-reuse  # ticket 1\n"
              "  - ids-across-turns:MID-A-02/user-message-reuse   # every version\n")
    code, out, err = report(capsys, "--from", str(runs["bad"]), "--baseline", str(b))
    assert code == 0, out + err
    assert "baseline: 4 expected failure(s), 0 unexpected, 0 stale" in out
    assert "verdict with baseline: PASS" in out


def test_unlisted_failure_fails_the_run(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    b = write(runs["dir"], "one.yaml", "- ids-across-turns@v1:MID-A-02/cross-turn-reuse\n")
    code, out, _ = report(capsys, "--from", str(runs["bad"]), "--baseline", str(b))
    assert code == 1
    assert "unexpected: ids-across-turns@v1:MID-A-02/user-message-reuse" in out


def test_stale_entry_fails_the_run(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    b = write(runs["dir"], "stale.yaml", "- ids-across-turns@v1:MID-A-02\n"
              "- ids-across-turns@v1:MID-A-03\n"   # passes now: stale
              "- load-fresh-process:MID-A-07\n")   # not in this run: reported only
    code, out, _ = report(capsys, "--from", str(runs["bad"]), "--baseline", str(b))
    assert code == 1
    assert f"stale: ids-across-turns@v1:MID-A-03 ({b}:2) now passes" in out
    assert f"not run: load-fresh-process:MID-A-07 ({b}:3)" in out
    md_out = runs["dir"] / "stale.md"
    report(capsys, "--from", str(runs["bad"]), "--baseline", str(b), "--markdown", str(md_out))
    assert "## Expected-failures baseline" in md_out.read_text(encoding="utf-8")


@pytest.mark.parametrize("text,message", [
    ("- no-such-case:MID-A-02\n", "unknown case 'no-such-case'"),
    ("- ids-across-turns MID-A-02\n", "expected 'case:requirement'"),
    ("expected: []\n", "unknown key 'expected'"),
    ("- [unclosed\n", "invalid YAML"),
])
def test_bad_baseline_is_a_usage_error(runs: dict[str, Path], text: str, message: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    b = write(runs["dir"], "bad.yaml", text)
    code, _, err = report(capsys, "--from", str(runs["bad"]), "--baseline", str(b))
    assert code == 2
    assert message in err and str(b) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_baseline_matching_rules(tmp_path: Path) -> None:
    """Pure: which entries match which findings, and not-exercised entries."""
    b = load(write(tmp_path, "b.yaml", "- a@v1:MID-A-02\n- b:MID-A-07/replay-duplicate\n"
                   "- c:TARGET\n"), known_cases=["a", "b", "c"])
    assert [str(e) for e in b.entries] == ["a@v1:MID-A-02", "b:MID-A-07/replay-duplicate",
                                          "c:TARGET"]
    e: Entry = b.entries[0]
    assert e.matches(Finding("MID-A-02/cross-turn-reuse", Outcome.FAIL, "", case="a@v1"))
    assert not e.matches(Finding("MID-A-02/cross-turn-reuse", Outcome.FAIL, "", case="a@v2"))
    assert not e.matches(Finding("MID-A-020", Outcome.FAIL, "", case="a@v1"))
    cases = [CaseResult("a@v1", "", [], 1, [Finding("MID-A-02/x", Outcome.FAIL, "", case="a@v1")]),
             CaseResult("b@v2", "", [], 2, [Finding("MID-A-07/replay-duplicate",
                                                    Outcome.NOT_APPLICABLE, "", case="b@v2")])]
    v = b.evaluate(cases)
    assert len(v.expected) == 1 and not v.unexpected and not v.stale
    assert [str(x) for x in v.not_exercised] == ["b:MID-A-07/replay-duplicate"]
    assert [str(x) for x in v.not_run] == ["c:TARGET"]
    assert not v.failed
    with pytest.raises(BaselineError):
        load(write(tmp_path, "u.yaml", "- z:MID-A-02\n"), known_cases=["a"])


def test_failing_requirements_come_first_and_anchors_are_stable(tmp_path: Path) -> None:
    """HTML and Markdown list the failing requirements first; the HTML's anchors are made
    from case and entry (#ids-across-turns@v1-e7), the same in every run."""
    proc = run_cli("--agent", f"{sys.executable} fixtures/agents/per_turn_counter.py",
                   "--case", "ids-across-turns", "--protocol", "1", "--no-color",
                   "--html", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md"),
                   "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 1, proc.stderr
    markdown = (tmp_path / "r.md").read_text(encoding="utf-8")
    first_row = next(line for line in markdown.splitlines() if line.startswith("| `MID-"))
    assert first_row.startswith("| `MID-A-02` | MUST | FAIL |"), first_row
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    rows = re.findall(r'<tr id="req-([^"]+)"', html)
    assert rows[0] == "MID-A-02", rows[:3]
    assert '<details id="ids-across-turns@v1" class="case"' in html
    assert re.search(r'<tr id="ids-across-turns@v1-e\d+"', html)
    assert re.search(r'href="#ids-across-turns@v1-e\d+"', html)
