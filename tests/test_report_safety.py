"""Target-supplied strings are data in every output.

The nasty_strings agent (fixtures/hostile/agents/) puts ANSI escapes, C0/C1
controls, a bidi override, HTML and script, a lone surrogate and 64 KiB runs
into everything it controls: its name and version, every message ID, stray
stdout lines and stderr. One real CLI run writes every report format; the
tests then prove the console shows those strings escaped and shortened, the
JSON and JUnit reports are valid, the transcript loads back with the same
strings, and neither the Markdown nor the HTML report carries markup or script
from the target.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile" / "agents"))

from harness import Run, group_alive, run_agent
from nasty_strings import HUGE, NASTY

from conformance import transcript as tmod
from conformance.report.text import safe, xml_safe

PAYLOADS = ("<script>alert(1)</script>", "<img src=x onerror=alert(2)>")
RAW_CONTROLS = [chr(c) for c in range(0x20) if chr(c) != "\n"] + [
    "\x7f", "\x85", "\u2028", "\u202e", "\ud800"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    workdir = tmp_path_factory.mktemp("nasty")
    result = run_agent("nasty_strings", workdir, timeout=2.0, protocol="both",
                       case="ids-across-turns",
                       extra=["--html", str(workdir / "report.html"),
                              "--markdown", str(workdir / "report.md")])
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result


def test_findings_quote_the_target_strings(run: Run) -> None:
    """The run is meaningful: the nasty ID and lines really reached the findings."""
    reuse = run.findings("MID-A-02/cross-turn-reuse", "fail")
    assert reuse and any("<script>" in f["message"] for f in reuse)
    long_id = run.findings("MID-S-01/long-id", "warn")
    assert long_id and "65" in long_id[0]["message"]  # a 65,6xx-character messageId
    assert run.findings("MID-S-06/framing", "fail")
    for pgid in run.pgids():
        assert not group_alive(pgid)


def test_console_shows_target_strings_escaped_and_shortened(run: Run) -> None:
    raw = (run.workdir / "stdout.txt").read_bytes()
    text = raw.decode("utf-8")  # strict: nothing undecodable reached the terminal
    for ch in RAW_CONTROLS:
        assert ch not in text, f"raw {ch!r} on the console"
    assert "\\x1b[2J" in text and "\\u202e" in text and "\\ud800" in text  # shown, escaped
    assert max(len(line) for line in text.splitlines()) < 400  # 64 KiB strings are cut
    assert "[65536 chars]" in text  # ... and say how long they were


def test_json_report_is_valid(run: Run) -> None:
    raw = (run.workdir / "report.json").read_bytes()
    text = raw.decode("utf-8")
    assert all(ord(ch) < 0x80 for ch in text)  # ASCII: controls and surrogates escaped
    report = json.loads(text)
    assert report["target_info"]["name"] == NASTY  # kept exactly, as data
    assert report["target_info"]["version"] == HUGE


def test_junit_report_is_well_formed(run: Run) -> None:
    root = ET.parse(run.workdir / "report.xml").getroot()
    assert root.tag == "testsuites"
    failures = [el for el in root.iter("failure")]
    assert failures and any("<script>" in (el.text or "") for el in failures)
    text = (run.workdir / "report.xml").read_text("utf-8")
    assert "\x1b" not in text and "\x00" not in text


def test_transcript_keeps_target_strings_exactly(run: Run) -> None:
    ids = set()
    for path in run.transcripts:
        raw = path.read_bytes()
        raw.decode("utf-8")  # valid UTF-8 although the target sent a lone surrogate
        _, entries = tmod.load(path)
        for e in entries:
            if isinstance(e.msg, dict) and isinstance(e.msg.get("params"), dict):
                update = e.msg["params"].get("update")
                if isinstance(update, dict) and "messageId" in update:
                    ids.add(update["messageId"])
    assert ids == {NASTY + HUGE}


def test_markdown_report_carries_no_markup_from_the_target(run: Run) -> None:
    text = (run.workdir / "report.md").read_text("utf-8")
    for payload in PAYLOADS:
        assert payload not in text
    assert "\x1b" not in text and "\u202e" not in text


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.handlers: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.handlers += [(tag, name) for name, _ in attrs if name.startswith("on")]


def test_html_report_runs_no_script_from_the_target(run: Run) -> None:
    text = (run.workdir / "report.html").read_text("utf-8")
    for payload in PAYLOADS:
        assert payload not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text  # shown, as text
    markup = _Markup()
    markup.feed(text)
    assert "script" not in markup.tags and "img" not in markup.tags
    assert not markup.handlers, markup.handlers
    # And the page's Content-Security-Policy forbids scripts should anything slip through.
    assert "Content-Security-Policy\" content=\"default-src 'none'" in text
    assert "script-src" not in text


@pytest.mark.parametrize("value,shown", [
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("a\x00b\x07c\rd\x85e", "a\\x00b\\x07c\\x0dd\\x85e"),
    ("evil\u202etxt.exe\u200b", "evil\\u202etxt.exe\\u200b"),
    ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
    ("<b>html stays text</b>", "<b>html stays text</b>"),
])
def test_safe_escapes_what_a_terminal_would_act_on(value: str, shown: str) -> None:
    assert safe(value) == shown


def test_safe_and_xml_safe_cut_long_strings_and_say_their_length() -> None:
    assert safe("A" * 65536) == "A" * 160 + "... [65536 chars]"
    assert safe("\x1b" * 1000, limit=10) == "\\x1b\\x1b\\x" + "... [1000 chars]"
    cut = xml_safe("\ud800" + "B" * 65536, limit=100)
    assert cut.startswith("\\ud800B") and cut.endswith("... [65537 chars]")
    ET.fromstring(f"<a>{cut}</a>")
