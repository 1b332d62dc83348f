"""Effort profiles, seeds, the time budget and the progress line of a fuzz run.

An *effort* names a set of Hypothesis settings: ``ci`` (seconds, for every
commit), ``dev`` (a minute or two at a desk) and ``deep`` (overnight).
``--max-examples`` and ``--time-budget`` override the named values. The seed is
always chosen up front (from ``--seed`` or the system's random source) and
printed, so any run can be repeated exactly.

Hypothesis is imported only by :func:`hypothesis_settings`, so importing this
module stays cheap.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TextIO

from conformance.progress import wanted

if TYPE_CHECKING:
    from hypothesis import settings as HypothesisSettings


@dataclass(frozen=True)
class Effort:
    name: str
    description: str
    max_examples: int
    steps: int  # most rules per generated session (Hypothesis stateful_step_count)
    time_budget: float | None  # seconds of generation; shrinking is never cut short


EFFORTS: dict[str, Effort] = {
    "ci": Effort("ci", "a few seconds per target, for every commit", max_examples=12, steps=7,
                 time_budget=60.0),
    "dev": Effort("dev", "a minute or two at a desk", max_examples=100, steps=10,
                  time_budget=300.0),
    "deep": Effort("deep", "long runs: many and longer sessions", max_examples=1000, steps=16,
                   time_budget=None),
}
DEFAULT_EFFORT = "dev"


def get_effort(name: str, *, max_examples: int | None = None,
               time_budget: float | None = None) -> Effort:
    """The named effort with overrides; raises ValueError with a one-line reason."""
    try:
        effort = EFFORTS[name]
    except KeyError:
        raise ValueError(f"unknown effort {name!r} (known: {', '.join(EFFORTS)})") from None
    if max_examples is not None:
        if max_examples < 1:
            raise ValueError("--max-examples must be at least 1")
        effort = replace(effort, max_examples=max_examples)
    if time_budget is not None:
        if time_budget <= 0:
            raise ValueError("--time-budget must be a positive number of seconds")
        effort = replace(effort, time_budget=time_budget)
    return effort


def shrink_budget(effort: Effort, given: float | None) -> float:
    """Seconds for all the shrinking of a run: ``--shrink-budget``, or half the time
    budget (at least 30 s), or 600 s where the effort has no time budget."""
    if given is not None:
        return given
    if effort.time_budget is None:
        return 600.0
    return max(30.0, effort.time_budget / 2)


def choose_seed(seed: int | None) -> int:
    """The seed of a run: the given one, or a fresh one to print and reuse."""
    if seed is not None:
        if seed < 0:
            raise ValueError("--seed must be a non-negative integer")
        return seed
    return random.SystemRandom().randrange(2**32)


def hypothesis_settings(effort: Effort, *, shrink: bool,
                        multiple: bool = True) -> HypothesisSettings:
    """Hypothesis settings for a run: no example database (the regression library is
    ours), no deadline (targets are processes), quiet (we print our own report),
    and only the phases that matter here (no explain phase: it reruns targets).
    ``shrink=False`` where the caller shrinks itself; ``multiple=False`` stops at the
    first broken rule."""
    from hypothesis import HealthCheck, Phase, Verbosity, settings

    phases = (Phase.explicit, Phase.generate) + ((Phase.shrink,) if shrink else ())
    return settings(
        max_examples=effort.max_examples,
        stateful_step_count=effort.steps,
        deadline=None,
        database=None,
        derandomize=False,
        verbosity=Verbosity.quiet,
        report_multiple_bugs=multiple,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        phases=phases,
    )


class StopFuzzing(BaseException):
    """Ends a Hypothesis run from inside a test: the budget is spent or enough was found.

    A BaseException, so Hypothesis lets it through instead of taking it for a failure
    (and no generated example is ever judged by the clock).
    """


class Budget:
    """Counts examples, says when the time budget is spent, and prints a progress line
    on long runs: rewritten in place on a terminal every ``every`` seconds, or a plain
    line every 30 s into a log."""

    def __init__(self, effort: Effort, *, label: str, stream: TextIO | None = None,
                 quiet_for: float = 2.0, every: float = 2.0) -> None:
        self.effort = effort
        self.label = label
        self.stream = stream
        self.quiet_for = quiet_for
        self.every = every
        self.started = time.monotonic()
        self.examples = 0
        self.processes = 0
        self.reused = 0  # runs on a process an earlier run left (persistent fuzzing)
        self.failures = 0
        self.first_failure: float | None = None
        self._last_print = 0.0
        self._tty = stream is not None and wanted(stream)  # the suite's terminal policy
        if not self._tty:  # a log (CI): a line now and then, enough to show it is alive
            self.quiet_for, self.every = max(quiet_for, 10.0), max(every, 30.0)
        self._printed = False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def spent(self) -> bool:
        """True once the time budget is used up (generation stops; shrinking goes on), and
        never before the first run started: a budget that a slow start-up used up still
        plays one run, so no fuzz run ends with nothing generated."""
        return (self.examples > 0 and self.effort.time_budget is not None
                and self.elapsed >= self.effort.time_budget)

    def example_started(self) -> None:
        self.examples += 1
        self.tick()

    def failure(self) -> None:
        self.failures += 1
        if self.first_failure is None:
            self.first_failure = self.elapsed

    def tick(self) -> None:
        if self.stream is None:
            return
        now = self.elapsed
        if now < self.quiet_for or now - self._last_print < self.every:
            return
        self._last_print = now
        state = (f"{self.failures} failing run(s) so far" if self.failures
                 else "no failure yet")
        rate = self.examples / now if now > 0 else 0.0
        line = (f"[fuzz {self.label}] {self.examples} runs ({self.effort.max_examples} "
                f"wanted), {rate:.1f} runs/s, {self.processes} processes"
                + (f" ({self.reused} runs on a reused one)" if self.reused else "")
                + f", {now:.0f} s, {state}")
        if self._tty:
            self.stream.write("\r" + line[:120].ljust(120))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._printed = True

    def done(self) -> None:
        if self.stream is not None and self._tty and self._printed:
            self.stream.write("\r" + " " * 120 + "\r")
            self.stream.flush()


def progress_stream(enabled: bool) -> TextIO | None:
    return sys.stderr if enabled else None
