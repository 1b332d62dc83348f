"""Target-supplied strings are data: shown escaped and shortened, never interpreted."""

from __future__ import annotations

import json
from typing import Any

MAX_SHOWN = 160


def safe(value: Any, limit: int = MAX_SHOWN) -> str:
    """One printable line: control characters, ANSI escapes and lone surrogates escaped."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    out = []
    for ch in text:
        cp = ord(ch)
        if cp < 0x20 or cp == 0x7F or 0x80 <= cp < 0xA0 or 0xD800 <= cp <= 0xDFFF \
                or cp in (0x2028, 0x2029):
            out.append(f"\\u{cp:04x}" if cp > 0xFF else f"\\x{cp:02x}")
        else:
            out.append(ch)
    s = "".join(out)
    if len(s) > limit:
        s = f"{s[:limit]}... [{len(s)} chars]"
    return s


def xml_safe(value: Any, limit: int = 4000) -> str:
    """Text XML 1.0 can carry: characters it forbids are escaped as \\uXXXX."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    out = []
    for ch in text:
        cp = ord(ch)
        if (cp in (0x9, 0xA, 0xD) or 0x20 <= cp <= 0xD7FF or 0xE000 <= cp <= 0xFFFD
                or 0x10000 <= cp <= 0x10FFFF):
            out.append(ch)
        else:
            out.append(f"\\u{cp:04x}")
    s = "".join(out)
    return s if len(s) <= limit else f"{s[:limit]}... [{len(s)} chars]"
