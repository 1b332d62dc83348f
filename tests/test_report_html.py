"""The HTML report, from a real run against a hostile agent, checked as markup
and in a real headless browser.

The hostile agent (written into the test's temp dir) subclasses the reference
agent, reports a name full of markup in ``initialize``, writes markup to
stderr, and gives messages IDs that are themselves markup and that a per-turn
counter reuses, so the report has fail findings with offending wire lines.

The browser check runs Chromium headless (``chromium`` on Debian); it is
skipped with the reason when no browser is installed. It proves the page
renders, logs nothing to the console (a blocked script or network load would
log a Content-Security-Policy violation), contains no element the target
injected, and leaves a screenshot (in ``$ACP_TEST_ARTIFACTS`` if set, else
the test's temp dir).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from conformance.report.catalogue import requirements

REPO_ROOT = Path(__file__).resolve().parents[1]
EVIL = "<script>document.title='PWNED'</script><img src=x onerror=\"document.title='PWNED'\">"

HOSTILE_AGENT = '''
import sys
sys.path.insert(0, {root!r})
from conformance.reference.agent import ReferenceAgent, main

EVIL = {evil!r}


class HostileAgent(ReferenceAgent):
    counter = 0

    def handle_initialize(self, request_id, params):
        result = super().handle_initialize(request_id, params)
        for key in ("info", "agentInfo"):
            if key in result:
                result[key] = {{"name": EVIL + "\\u202eevil", "version": "1.0\\"><b>bold</b>"}}
        sys.stderr.write("stderr says " + EVIL + "\\n")
        sys.stderr.flush()
        return result

    def user_message_id(self, params):
        self.counter = 0  # reused every turn: MID-A-02 fails
        return super().user_message_id(params)

    def new_message_id(self, kind):
        self.counter += 1
        return "</td></tr>" + EVIL + "-" + str(self.counter)


if __name__ == "__main__":
    sys.exit(main(agent_class=HostileAgent))
'''


def run_cli(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000", NO_COLOR="1")
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("html")
    agent = tmp / "hostile_agent.py"
    agent.write_text(HOSTILE_AGENT.format(root=str(REPO_ROOT), evil=EVIL), encoding="utf-8")
    out = tmp / "report.html"
    proc = run_cli("--agent", f"{sys.executable} {agent}", "--case", "ids-across-turns",
                   "--protocol", "1", "--html", str(out), "--json", str(tmp / "report.json"))
    assert proc.returncode == 1, proc.stderr  # the per-turn counter fails MID-A-02
    return {"dir": tmp, "html": out.read_text(encoding="utf-8"),
            "json": json.loads((tmp / "report.json").read_text(encoding="utf-8")), "path": out}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data


def parse(html: str) -> _Tags:
    p = _Tags()
    p.feed(html)
    return p


SOURCE_URLS = {s.url for m in requirements().values() for s in m.sources}


def test_page_is_self_contained_and_scriptless(hostile_report: dict[str, Any]) -> None:
    html = hostile_report["html"]
    tags = parse(html).tags
    names = {t for t, _ in tags}
    assert not names & {"script", "img", "iframe", "object", "embed", "link", "base", "form"}
    for tag, attrs in tags:
        assert not any(a.startswith("on") for a in attrs), (tag, attrs)
        href = attrs.get("href")
        if href is not None:  # the page's own anchors, or the register's upstream sources
            assert href.startswith("#") or href in SOURCE_URLS, href
        assert "src" not in attrs
    csp = [a for t, a in tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")
    assert "script-src" not in (csp[0]["content"] or "")  # default-src 'none' covers scripts


def test_target_strings_are_text(hostile_report: dict[str, Any]) -> None:
    html = hostile_report["html"]
    assert "<script" not in html.lower()
    assert "&lt;script&gt;document.title=&#x27;PWNED&#x27;&lt;/script&gt;" in html
    assert "\u202e" not in html and "\\u202eevil" in html  # bidi override made visible
    assert "&lt;/td&gt;&lt;/tr&gt;" in html  # an ID that tries to close the table cell
    assert "stderr says &lt;script&gt;" in html  # the stderr tail, escaped


def test_statement_requirements_and_traceability(hostile_report: dict[str, Any]) -> None:
    html = hostile_report["html"]
    assert 'id="statement"' in html and "Certification statement" in html
    assert '<span class="verdict fail">FAIL</span>' in html
    assert "1970" not in html and "2023-11-14" in html  # the date of SOURCE_DATE_EPOCH
    row = re.search(r'<tr id="req-MID-A-02"[^>]*>(.*?)</tr>', html, re.DOTALL)
    assert row is not None
    assert ">MUST<" in row.group(1) and 'badge fail' in row.group(1)
    assert ('href="https://github.com/agentclientprotocol/agent-client-protocol/blob/'
            'b7f0005493b98de32fabee3e9540e2b64da68535/docs/rfds/message-id.mdx"') in row.group(1)
    assert 'id="traceability"' in html and "identity.Uniqueness" in html


def test_offending_lines_are_highlighted_and_linked(hostile_report: dict[str, Any]) -> None:
    html = hostile_report["html"]
    fails = [r for r in hostile_report["json"]["results"] if r["outcome"] == "fail"]
    assert fails
    (case,) = {r["case"] for r in fails}
    for r in fails:
        for seq in r["evidence"]["entries"]:
            m = re.search(rf'<tr id="{re.escape(case)}-e{seq}" class="([^"]*)"', html)
            assert m is not None, seq
            assert "hit-fail" in m.group(1).split()
            assert f'href="#{case}-e{seq}"' in html  # the finding links to its line (stable)
    rows = re.findall(rf'<tr id="{re.escape(case)}-e(\d+)" class="([^"]*)"', html)
    hits = {int(s) for s, cls in rows if "hit-fail" in cls.split()}
    assert hits == {e for r in fails for e in r["evidence"]["entries"]}


def test_message_ids_are_coloured_by_identity(hostile_report: dict[str, Any]) -> None:
    html = hostile_report["html"]
    # the chip's title carries the whole (escaped) ID; the label may be shortened
    chips = re.findall(r'<span class="chip (g\d+)[^"]*" title="message \d+: ([^"]*)">', html)
    assert chips
    by_id: dict[str, set[str]] = {}
    for colour, full in chips:
        by_id.setdefault(full, set()).add(colour)
    assert len(by_id) > 3
    assert all(len(c) == 1 for c in by_id.values())  # one ID, one colour, on every chunk
    assert len({next(iter(c)) for c in by_id.values()}) == len(by_id)  # distinct IDs differ
    assert any(sum(1 for _, full in chips if full == i) > 1 for i in by_id)  # chunks grouped


def test_missing_transcripts_are_said_not_hidden(hostile_report: dict[str, Any]) -> None:
    tmp: Path = hostile_report["dir"]
    out = tmp / "again.html"
    data = json.loads((tmp / "report.json").read_text(encoding="utf-8"))
    for case in data["cases"]:  # a run with --no-transcripts (a report names them by default)
        case["transcript"] = None
    (tmp / "none.json").write_text(json.dumps(data), encoding="utf-8")
    proc = run_cli("report", "--from", str(tmp / "none.json"), "--html", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "no transcript was saved for this case (run with --transcripts DIR)" in \
        out.read_text(encoding="utf-8")


# -- a real browser -------------------------------------------------------------------


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


BROWSER = _browser()
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no headless browser: install Debian's chromium package")


def _chromium(url: str, profile: Path, *extra: str) -> tuple[str, list[str]]:
    """Load ``url`` headless: the DOM after load and the page's console messages."""
    assert BROWSER is not None
    proc = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
         *extra, url],
        capture_output=True, text=True, timeout=120, errors="replace", check=False)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


@needs_browser
def test_console_detection_works(tmp_path: Path) -> None:
    """The check below can fail: a page that logs is seen logging."""
    page = tmp_path / "control.html"
    page.write_text("<html><body><script>console.error('control-marker')</script></body></html>",
                    encoding="utf-8")
    dom, console = _chromium(page.as_uri(), tmp_path / "profile", "--dump-dom")
    assert "<script>" in dom
    assert any("control-marker" in line for line in console)


@needs_browser
def test_report_renders_in_a_browser(hostile_report: dict[str, Any], tmp_path: Path) -> None:
    url = hostile_report["path"].as_uri()
    dom, console = _chromium(url, tmp_path / "profile", "--dump-dom")
    assert console == []  # no error, no blocked script or network load
    tags = parse(dom)
    assert tags.title != "PWNED"  # what the injected script would have set
    assert tags.title.startswith("acp-conformance: agent <script>")  # shown as text
    assert not {t for t, _ in tags.tags} & {"script", "img", "iframe"}
    assert "Certification statement" in dom and "Wire transcript" in dom
    shots = Path(os.environ.get("ACP_TEST_ARTIFACTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    shot = shots / "html-report.png"
    _, console = _chromium(url, tmp_path / "profile2", f"--screenshot={shot}",
                           "--window-size=1400,2400", "--hide-scrollbars")
    assert console == []
    assert shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"screenshot: {shot}")
