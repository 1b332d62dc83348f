"""Nothing a fuzz run finds is lost: each failure is kept the moment it is found.

A failing run is written to the regression library (unshrunk, with its
transcript; its header says ``"shrunk": false``) and stored in the example
database as soon as it is recorded; when shrinking ends, the shrunk
counterexample replaces it in both. Shrinking reports each smaller
counterexample here, so what is held is always the smallest so far.

SIGINT and SIGTERM (:func:`interrupts`) raise :class:`Interrupted` where the run
is, once; the engines catch it, stop their processes and return what they hold,
and the command prints each broken rule, saves it and writes the reports.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.fuzz import database, regressions
from conformance.lifecycle import swallowed_quietly


class Interrupted(BaseException):
    """SIGINT or SIGTERM reached a fuzz run. A BaseException: Hypothesis lets it through
    (it never takes it for a failing example)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


@contextmanager
def interrupts(enabled: bool = True) -> Iterator[list[int]]:
    """While the block runs, the first SIGINT or SIGTERM raises :class:`Interrupted` in
    the main thread; later ones are only noted (saving and the reports must not be
    torn). Yields the list of signals received."""
    got: list[int] = []
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield got
        return

    def handle(signum: int, frame: Any) -> None:
        got.append(signum)
        if noted(signum):
            raise Interrupted(signum)

    old = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with swallowed_quietly(Interrupted):  # raise_pending raises it again
            yield got
    finally:
        settled()
        for sig, previous in old.items():
            signal.signal(sig, previous)


_RECEIVED: list[int] = []  # every signal :func:`interrupts` took in this process
_PENDING: list[int] = []  # the signal that interrupts the block running now


def noted(signum: int) -> bool:
    """Note a SIGINT/SIGTERM a fuzz run took (the handler of :func:`interrupts`, or of a
    shell that owns the signal handlers: the pytest plugin). True for the first: its
    handler raises, and :func:`raise_pending` raises again should Python drop that raise
    (in a gc callback), so generation stops at its next run whichever handler took it."""
    _RECEIVED.append(signum)
    if _PENDING:
        return False
    _PENDING.append(signum)
    return True


def settled() -> None:
    """The block that took the signal is over: later runs in this process start clean."""
    _PENDING.clear()


def pending() -> int | None:
    """The signal the running block (a fuzz command, a plugin session) took, or None."""
    return _PENDING[0] if _PENDING else None


def raise_pending() -> None:
    """Raise :class:`Interrupted` again if the running block took its signal: the raise
    in the handler can land in code that swallows it (Python ignores an exception raised
    in a garbage-collector callback), and generation must still stop."""
    if _PENDING:
        raise Interrupted(_PENDING[0])


def received() -> int | None:
    """The first SIGINT/SIGTERM this process's fuzz run took, or None. Where an engine
    cannot see :class:`Interrupted` itself (Hypothesis took it for a failing example and
    then called the run flaky), this says the run was interrupted, not flaky."""
    return _RECEIVED[0] if _RECEIVED else None


@dataclass
class _Kept:
    failure: Any  # the counterexample as first stored
    path: Path | None  # its unshrunk regression file, if this run wrote it


@dataclass
class Keeper:
    """Writes failures as they are found and replaces them when they are shrunk.

    ``header`` makes a regression file's header from a failure; ``directory`` None:
    nothing goes to the library (``--no-save``); ``database`` None: none is used."""

    directory: Path | None
    database: Any = None
    header: Callable[[Any], dict[str, Any]] = dict
    kept: dict[tuple[str, int], list[_Kept]] = field(default_factory=dict)
    written: set[Path] = field(default_factory=set)  # files this run created
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def found(self, failure: Any) -> Path | None:
        """A failing run, unshrunk: into the library and the database at once (the first
        one of each rule and version; later ones only when they are smaller)."""
        with self._lock:
            known = self.kept.get(failure.key)
            if known and failure.size() >= known[-1].failure.size():
                return known[-1].path
            path = self._write(failure, shrunk=False)
            if known:  # a smaller one of the same rule: it replaces the earlier one
                earlier = known.pop()
                if earlier.path is not None and earlier.path != path:
                    earlier.path.unlink(missing_ok=True)
                    self.written.discard(earlier.path)
                database.replace(self.database, earlier.failure, failure)
            else:
                database.save(self.database, failure)
            self.kept.setdefault(failure.key, []).append(_Kept(failure, path))
            return path

    def adopt(self, failure: Any, path: Path | None) -> None:
        """A failure another process (a worker) stored, to be replaced like this run's."""
        with self._lock:
            self.kept.setdefault(failure.key, []).append(_Kept(failure, path))
            if path is not None:
                self.written.add(path)

    def final(self, failure: Any, *, shrunk: bool = True) -> regressions.Saved | None:
        """The counterexample to keep (shrunk, or the smallest held when the run was
        stopped: ``shrunk`` False): it replaces what was stored when it was found."""
        with self._lock:
            earlier = self.kept.pop(failure.key, [])
            fp = regressions.failure_fingerprint(failure)
            target = (Path(self.directory) / f"{fp}.jsonl") if self.directory else None
            for kept in earlier:  # the unshrunk files this run (or its workers) wrote
                if kept.path is not None and kept.path in self.written:
                    kept.path.unlink(missing_ok=True)
                    if kept.path != target:
                        self.written.discard(kept.path)
                database.replace(self.database, kept.failure, failure)
            if not earlier:
                database.save(self.database, failure)
            if self.directory is None:
                return None
            header = self.header(failure) if shrunk else {**self.header(failure),
                                                          "shrunk": False}
            saved = regressions.save(self.directory, fingerprint_=fp,
                                     header=header, entries=failure.transcript
                                     .entries, cwd=regressions.session_cwd(failure.transcript))
            if not saved.existed:
                self.written.add(saved.path)
            elif saved.path in self.written:  # this run wrote it: not "already there"
                saved = regressions.Saved(saved.path, saved.fingerprint, False)
            return saved

    def _write(self, failure: Any, *, shrunk: bool) -> Path | None:
        if self.directory is None:
            return None
        header = {**self.header(failure), "shrunk": shrunk}
        saved = regressions.save(self.directory,
                                 fingerprint_=regressions.failure_fingerprint(failure),
                                 header=header, entries=failure.transcript.entries,
                                 cwd=regressions.session_cwd(failure.transcript))
        if saved.existed:
            return None  # an earlier run's file: never ours to replace
        self.written.add(saved.path)
        return saved.path


__all__ = ["Interrupted", "Keeper", "interrupts", "noted", "pending", "raise_pending",
           "received", "settled"]
