"""Escaping for the HTML report: every target-supplied string becomes inert text.

``text.safe`` shows control characters and lone surrogates, bidi controls are
made visible, then the text is HTML-escaped.
"""

from __future__ import annotations

import html
import re
from typing import Any

from conformance.report.text import safe

_BIDI = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def esc(value: Any, limit: int = 4000) -> str:
    """A target-supplied value as inert HTML text on one line."""
    return html.escape(_BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", safe(value, limit)),
                       quote=True)


def esc_block(text: str, limit: int = 8000) -> str:
    """Multi-line text (stderr) as inert HTML, newlines kept."""
    if len(text) > limit:
        text = f"[... {len(text) - limit} chars before]\n" + text[-limit:]
    return "\n".join(esc(line, limit) for line in text.split("\n"))


def anchor(case: str) -> str:
    """The stable anchor of a case (``ids-across-turns@v1``; its transcript's line 14 is
    ``#ids-across-turns@v1-e14``): the same in every run, whatever else the report holds.
    Characters outside ``[A-Za-z0-9@._:-]`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9@._:-]", "_", case) or "_"
