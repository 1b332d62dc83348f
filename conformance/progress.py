"""Progress of a long run on a terminal: cases done / total and the case running.

One line on stderr, rewritten in place, only when stderr is a terminal and
the run is not under CI (``CI`` set) or a dumb terminal. Nothing of it reaches
a report, so reports stay deterministic.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO


def wanted(stream: TextIO) -> bool:
    """Show progress on ``stream``? Only on an interactive terminal, never in CI."""
    if os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A callable for ``AgentRun.progress``; ``close()`` clears the line."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = wanted(self.stream) if enabled is None else enabled
        self._width = 0

    def __call__(self, done: int, total: int, current: str) -> None:
        if not self.enabled:
            return
        columns = shutil.get_terminal_size((80, 24)).columns
        text = f"[{done}/{total} done] running {current}"
        text = "".join(ch if ch.isprintable() else "?" for ch in text)[:max(columns - 1, 20)]
        self.stream.write("\r" + text.ljust(self._width))
        self._width = len(text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
