"""Shrinking a failing run of steps to a minimal counterexample.

Agent runs are replays of whole client sessions against live processes, so
every shrink attempt costs process starts, and cancellation races make single
attempts unreliable. Shrinking therefore works on the recorded *steps*, not on
Hypothesis's choice sequence: delete blocks of steps (halving, from the end),
then simplify each remaining step (see :func:`conformance.agent.steps.simplifications`),
and repeat until nothing changes. Every attempt is a real replay, so the result is
by construction a counterexample that ``replay`` reproduces. A bounded number of
attempts and a deadline keep the cost predictable (the smallest counterexample found so
far is kept, and reported as it is found); identical candidates are never replayed twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from conformance.agent.steps import Step, simplifications

R = TypeVar("R")


@dataclass
class Shrunk(Generic[R]):
    steps: list[Step]
    result: R  # what the predicate returned for ``steps``
    attempts: int


def shrink_steps(steps: Sequence[Step], result: R, fails: Callable[[list[Step]], R | None], *,
                 keep: int = 2, max_attempts: int = 60,
                 variants: Callable[[Step], list[Step]] = simplifications,
                 deadline: float | None = None,
                 on_smaller: Callable[[list[Step], R, int], None] | None = None) -> Shrunk[R]:
    """The smallest step list found that ``fails`` (which returns None when the candidate
    no longer fails). The first ``keep`` steps (start, new_session) stay. No attempt
    starts after ``deadline`` (``time.monotonic()``); ``on_smaller`` hears of each smaller
    counterexample (steps, result, attempts so far)."""
    current = list(steps)
    best = result
    tried: set[str] = {_key(current)}
    attempts = 0

    def over() -> bool:
        return attempts >= max_attempts or (deadline is not None
                                            and time.monotonic() >= deadline)

    def attempt(candidate: list[Step]) -> bool:
        nonlocal attempts, best, current
        key = _key(candidate)
        if key in tried or over():
            return False
        tried.add(key)
        attempts += 1
        outcome = fails(candidate)
        if outcome is None:
            return False
        current, best = candidate, outcome
        if on_smaller is not None:
            on_smaller(current, best, attempts)
        return True

    for _round in range(4):
        before = _key(current)
        # Deletion: blocks of steps, halving the block size, from the end backwards.
        size = max(1, (len(current) - keep) // 2)
        while size >= 1 and not over():
            i = len(current) - size
            while i >= keep and not over():
                if not attempt(current[:i] + current[i + size:]):
                    i -= size
                i = min(i, len(current) - size)
            size //= 2
        # Simplification: each step towards its plainest form.
        i = keep
        while i < len(current) and not over():
            for variant in variants(current[i]):
                if attempt(current[:i] + [variant] + current[i + 1:]):
                    break
            else:
                i += 1
        if _key(current) == before or over():
            break
    return Shrunk(current, best, attempts)


def _key(steps: Sequence[Step]) -> str:
    return json.dumps(steps, sort_keys=True, ensure_ascii=True)
