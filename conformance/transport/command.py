"""The target command: parsed and checked before anything is started."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence


class TargetCommandError(Exception):
    """The target command cannot be started (not found, not executable, empty)."""


def split_command(command: str | Sequence[str]) -> list[str]:
    try:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError as exc:  # an unclosed quote
        raise TargetCommandError(f"cannot parse the target command {command!r}: {exc}") from None
    if not argv:
        raise TargetCommandError("the target command is empty")
    exe = argv[0]
    if os.sep in exe:
        if not os.path.exists(exe):
            raise TargetCommandError(f"target command not found: {exe}")
        if not os.access(exe, os.X_OK):
            raise TargetCommandError(f"target command is not executable: {exe}")
    elif shutil.which(exe) is None:
        raise TargetCommandError(f"target command not found on PATH: {exe}")
    return argv
