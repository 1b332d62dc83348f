"""Target-supplied strings are data: shown escaped and shortened, never interpreted."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_SHOWN = 160

# the characters XML 1.0 forbids (all but tab, newline, carriage return, U+0020-U+D7FF,
# U+E000-U+FFFD and U+10000-U+10FFFF)
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# What a terminal would act on or hide: C0/C1 controls and DEL (ANSI escapes start with
# ESC), lone surrogates, line/paragraph separators, and the invisible format characters
# that reorder or hide text (bidi overrides and isolates, zero-width characters, BOM).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u200b-\u200f"
                     "\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def _escape(m: re.Match[str]) -> str:
    cp = ord(m.group())
    return f"\\u{cp:04x}" if cp > 0xFF else f"\\x{cp:02x}"


def safe(value: Any, limit: int = MAX_SHOWN) -> str:
    """One printable line: control characters, ANSI escapes, bidi and zero-width controls
    and lone surrogates escaped; cut at ``limit`` characters (the full length is said)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    s = _UNSAFE.sub(_escape, text[: limit + 1])  # escaping never shortens: cut first
    if len(text) > limit or len(s) > limit:
        s = f"{s[:limit]}... [{len(text)} chars]"
    return s


def xml_safe(value: Any, limit: int = 4000) -> str:
    """Text XML 1.0 can carry: characters it forbids are escaped as \\uXXXX."""
    full = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = full[: limit + 1]  # escaping never shortens: cut first
    s = _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return s if len(full) <= limit and len(s) <= limit else f"{s[:limit]}... [{len(full)} chars]"
