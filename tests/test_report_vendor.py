"""A report a vendor can hand a customer: headed by the target's name and version (given,
or as ``initialize`` reported them) rather than a command with the machine's paths;
notes and INFO findings that say the same thing said once with a count; no column of
"unknown" on an installed suite; ``report --merge`` columns named by target; the page as
a real browser (headless Chromium) shows it."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, cli_env, v1_only_agent

BROKEN = REPO_ROOT / "fixtures" / "agents" / "per_turn_counter.py"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(cli_env(), SOURCE_DATE_EPOCH="1700000000", NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def vendor(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The broken per-turn counter, run from elsewhere by its absolute path, labelled."""
    tmp = tmp_path_factory.mktemp("vendor")
    proc = run_cli("--agent", f"{sys.executable} {BROKEN}", "--protocol", "1",
                   "--case", "ids-across-turns", "--case", "ids-across-sessions",
                   "--case", "prompt-lifecycle",
                   "--target-name", "Acme Agent", "--target-version", "2.1.0",
                   "--html", str(tmp / "r.html"), "--markdown", str(tmp / "r.md"),
                   "--json", str(tmp / "r.json"), cwd=tmp)
    assert proc.returncode == 1, proc.stderr
    return {"dir": tmp, "out": proc.stdout, "md": (tmp / "r.md").read_text(encoding="utf-8"),
            "html": (tmp / "r.html").read_text(encoding="utf-8"),
            "json": json.loads((tmp / "r.json").read_text(encoding="utf-8"))}


def test_the_given_name_heads_every_report_and_the_reported_one_is_kept(
        vendor: dict[str, Any]) -> None:
    md, page, data = vendor["md"], vendor["html"], vendor["json"]
    assert md.startswith("# acp-conformance: agent Acme Agent\n")
    assert ("| Target | Acme Agent 2.1.0 (as named for this report; initialize reported "
            "acp-conformance-broken-agent-per-turn-counter 0.1.0) |") in md
    assert "<title>acp-conformance: agent Acme Agent</title>" in page
    assert vendor["out"].startswith("acp-conformance 0.1.0: agent Acme Agent 2.1.0\n")
    assert "target reports itself as acp-conformance-broken-agent-per-turn-counter" \
        in vendor["out"]
    assert data["target_info"]["name"] == "Acme Agent"
    assert data["target_info"]["reported"]["name"] == \
        "acp-conformance-broken-agent-per-turn-counter"
    # the command is still named, without the machine's folders
    assert "| Command | python" in md and "per\\_turn\\_counter.py |" in md
    head = page.split('id="cases"', 1)[0]  # the cases' wire transcripts are evidence, as sent
    for text in (md, head):
        assert str(REPO_ROOT) not in text and str(Path(sys.executable).parent) not in text
    rebuilt = vendor["dir"] / "again.md"  # report --from keeps the label
    done = run_cli("report", "--from", str(vendor["dir"] / "r.json"), "--markdown",
                   str(rebuilt), cwd=vendor["dir"])
    assert done.returncode in (0, 1), done.stderr
    assert rebuilt.read_text(encoding="utf-8") == md


def test_identical_info_findings_are_one_bullet_with_a_count(vendor: dict[str, Any]) -> None:
    page = vendor["html"]
    requirements = page.split('id="requirements"', 1)[1].split('id="cases"', 1)[0]
    grouped = re.findall(r"MID-A-06/live-echo</code> in (\d+) cases \(", requirements)
    assert grouped and int(grouped[0]) >= 2, "cases saying the same INFO are one bullet"
    assert requirements.count("MID-A-06/live-echo</code> in") < 3
    cases = page.split('id="cases"', 1)[1]  # each case's own list keeps every finding
    assert not re.search(r"</code> in \d+ cases \(", cases)


def test_cases_not_run_for_one_reason_are_one_note(tmp_path: Path) -> None:
    agent = v1_only_agent(tmp_path)
    proc = run_cli("--agent", f"{sys.executable} {agent}", "--case", "ids-across-turns",
                   "--case", "prompt-lifecycle", "--case", "identical-prompts",
                   "--markdown", str(tmp_path / "r.md"), "--json", str(tmp_path / "r.json"),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    notes = (tmp_path / "r.md").read_text(encoding="utf-8").split("### Notes", 1)[1]
    bullets = [line for line in notes.splitlines() if line.startswith("- ")]
    said = [b for b in bullets if "v2 unsupported" in b]
    assert len(said) == 1 and said[0].startswith("- 3 v2 cases not run: "), bullets


def test_an_installed_suite_shows_no_column_of_unknown_fixtures() -> None:
    from conformance import cases as casemod
    from conformance.report import html, markdown
    from conformance.report.traceability import format_traceability, traceability

    rows = [dataclasses.replace(r, fixtures=None) for r in traceability(casemod.load_dir())]
    text = "\n".join(markdown._traceability(rows))
    page = html._traceability(rows)
    listing = format_traceability(rows)
    for out in (text, page, listing):
        assert "unknown (" not in out and "| unknown |" not in out
        assert "<td>unknown</td>" not in out and "fixtures: unknown" not in out
        assert "not installed" not in out and out.count("not in this install") == 1
    assert "Broken fixtures |" not in text and "<th>Broken fixtures</th>" not in page
    known = traceability(casemod.load_dir())  # the source tree: the column is there
    assert "<th>Broken fixtures</th>" in html._traceability(known)


def test_merge_columns_are_named_by_target(vendor: dict[str, Any], tmp_path: Path) -> None:
    other = tmp_path / "b.json"
    proc = run_cli("--agent", f"{sys.executable} -m conformance.reference.agent",
                   "--protocol", "1", "--case", "ids-across-turns", "--json", str(other),
                   "--target-name", "Beta Agent", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    merged = tmp_path / "m.md"
    done = run_cli("report", "--merge", str(vendor["dir"] / "r.json"), str(other),
                   "--markdown", str(merged), cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    header = next(line for line in merged.read_text(encoding="utf-8").splitlines()
                  if line.startswith("| rule"))
    assert "Acme Agent 2.1.0" in header and "Beta Agent 0.1.0" in header, header
    assert sys.executable not in header


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_browser() is None,
                    reason="no headless browser: install Debian's chromium package")
def test_the_vendor_report_in_a_browser(vendor: dict[str, Any], tmp_path: Path) -> None:
    """Headless Chromium: the page loads with no console message (no script, no request),
    the DOM heads with the vendor's name, and the screenshot is a real picture (kept in
    $ACP_TEST_ARTIFACTS; docs/html-report.png is this page, see CONTRIBUTING.md)."""
    url = (vendor["dir"] / "r.html").as_uri()
    base = [str(_browser()), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
            "--disable-background-networking", "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([*base, f"--user-data-dir={tmp_path / 'p1'}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120, errors="replace",
                         check=False)
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    assert "Acme Agent 2.1.0" in dom.stdout and "Certification statement" in dom.stdout
    assert str(REPO_ROOT) not in dom.stdout.split('id="cases"', 1)[0]
    shots = Path(os.environ.get("ACP_TEST_ARTIFACTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    shot = shots / "vendor-report.png"
    done = subprocess.run([*base, f"--user-data-dir={tmp_path / 'p2'}", f"--screenshot={shot}",
                           "--window-size=1000,1000", "--hide-scrollbars", url],
                          capture_output=True, text=True, timeout=120, errors="replace",
                          check=False)
    assert [line for line in done.stderr.splitlines() if ":CONSOLE" in line] == []
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert int.from_bytes(data[16:20], "big") == 1000  # the width asked for


V2_ERRORS = '''\
import sys
sys.path.insert(0, {root!r})
from conformance.reference.agent import ReferenceAgent, RpcError, main


class V2Errors(ReferenceAgent):
    def handle_initialize(self, request_id, params):
        if params.get("protocolVersion") == 2:
            raise RpcError(-32603, "Internal error: no v2 today")
        return super().handle_initialize(request_id, params)


sys.exit(main(agent_class=V2Errors))
'''


def test_a_failed_case_is_never_shown_as_not_run_too(tmp_path: Path) -> None:
    """The case whose negotiation failed fails; the version's other cases are not run. No
    report shows the failed one as "not run" (its steps were not played, it says)."""
    agent = tmp_path / "v2_errors.py"
    agent.write_text(V2_ERRORS.format(root=str(REPO_ROOT)), encoding="utf-8")
    proc = run_cli("--agent", f"{sys.executable} {agent}", "--protocol", "2",
                   "--case", "ids-across-turns", "--case", "prompt-lifecycle",
                   "--case", "identical-prompts", "--markdown", str(tmp_path / "r.md"),
                   "--html", str(tmp_path / "r.html"), "--json", str(tmp_path / "r.json"),
                   cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    failed = [c for c in data["cases"] if c["outcome"] == "fail"]
    assert len(failed) == 1 and failed[0]["reason"] == "not_run"  # the engine's record
    name = failed[0]["case"]
    shown = [proc.stdout + proc.stderr, (tmp_path / "r.md").read_text(encoding="utf-8"),
             (tmp_path / "r.html").read_text(encoding="utf-8")]
    for text in shown:
        assert f"{name}: not run" not in text
        assert f"{name}: failed before its steps were played: " in text \
            or "failed before its steps were played: " in text
    assert f"(first: {name}: failed before its steps were played: " in data["unfinished"]["2"]
    md = shown[1].split("### Notes", 1)[1]
    assert "- 2 v2 cases not run: the agent answered the v2 initialize with an error" in md
