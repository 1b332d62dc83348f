"""``--badge PATH``: the verdict as a self-contained SVG for a README.

Two rows: the protocol versions and the verdict as the statement words it (PASS,
PASS, partial, FAIL) on top; the catalogue revision and the date below. No script, no
link, no font or image from elsewhere: every character is escaped text of our own.

The verdict is the bundle's (:func:`conformance.certify.bundle.bundle_verdict`), given
by the caller: a badge draws a verdict, it does not decide one.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

from conformance.results import RunResult

COLOURS = {"PASS": "#2e7d32", "PASS, partial": "#b26a00", "FAIL": "#c62828"}
CHAR = 6.6  # px per character of the 11px sans-serif text, a generous estimate


def short_verdict(verdict: str) -> str:
    """The badge's word: PASS, PASS, partial or FAIL (the statement's headline, cut)."""
    if verdict.startswith("PASS, partial"):
        return "PASS, partial"
    return "FAIL" if verdict != "PASS" else "PASS"


def badge_svg(result: RunResult, verdict: str) -> str:
    """The badge of ``result`` whose verdict (as the statement words it) is ``verdict``."""
    from conformance.report.catalogue import graded_against

    word = short_verdict(verdict)
    left = "ACP messageId " + " ".join(f"v{p}" for p in result.protocols)
    under = f"catalogue {graded_against(result)['catalogue']} · {result.date or 'undated'}"
    lw = int(len(left) * CHAR) + 12
    rw = int(len(word) * CHAR) + 12
    width = max(lw + rw, int(len(under) * 5.6) + 12)
    rw = width - lw
    title = f"{left}: {verdict} ({under})"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="34" '
        f'role="img" aria-label="{escape(title, {chr(34): "&quot;"})}">\n'
        f"  <title>{escape(title)}</title>\n"
        f'  <rect width="{width}" height="34" rx="3" fill="#f6f8fa" stroke="#d0d7de"/>\n'
        f'  <rect width="{lw}" height="20" rx="3" fill="#555"/>\n'
        f'  <rect x="{lw}" width="{rw}" height="20" rx="3" fill="{COLOURS[word]}"/>\n'
        '  <g font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">\n'
        f'    <text x="6" y="14" fill="#fff">{escape(left)}</text>\n'
        f'    <text x="{lw + 6}" y="14" fill="#fff">{escape(word)}</text>\n'
        f'    <text x="6" y="30" font-size="9" fill="#333">{escape(under)}</text>\n'
        "  </g>\n"
        "</svg>\n")


def write_badge(result: RunResult, path: Path, verdict: str) -> None:
    from conformance.transcript import write_atomic

    write_atomic(Path(path), badge_svg(result, verdict))
