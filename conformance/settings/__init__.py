"""A run's settings, once for every role and every shell.

:class:`RunSettings` holds what every role's run shares (protocol versions, grading,
timeouts, the run's bounds, where transcripts go, secrets masking); each role's run
(``AgentRun``, ``ClientRun``, ``ProxyRun``) adds only its own extras, and the engine
(:mod:`conformance.engine`) reads a run through this record alone.
:mod:`conformance.settings.table` is the one table of run options (name, type,
default, help, check, roles, shells) that the command line, the pytest plugin, the
GitHub Action and ``docs/options.md`` are rendered from, with the one check of each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conformance.checks import Options
    from conformance.masking import Masker

__all__ = ["RunSettings"]


@dataclass(kw_only=True)
class RunSettings:
    """What every role's run shares; the engine reads nothing else of a run."""

    protocols: Sequence[int]
    options: Options
    timeout: float = 10.0  # --timeout: longest silence while waiting for the target
    strict: bool = False  # --strict: every warn is a fail
    transcripts: Path | None = None  # where each case's transcript is saved (None: not kept)
    env: Mapping[str, str] = field(default_factory=dict)  # --agent-env
    progress: Callable[[int, int, str], None] | None = None  # (done, total, what) while running
    turn_timeout: float | None = None  # longest single wait; None: 6 x timeout
    handle_signals: bool = False  # SIGINT/SIGTERM end the run cleanly (RunInterrupted)
    jobs: int = 1  # cases run at the same time (--jobs)
    deadline: float | None = None  # seconds the whole run may last (--deadline)
    keep_going: bool = False  # --keep-going: run every case even after a repeated fault
    repeat: int = 1  # --repeat N: each case played N times (conformance.repetition)
    masker: Masker | None = None  # masks secrets where transcripts record them (None: off)
