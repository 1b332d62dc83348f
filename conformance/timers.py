"""Timers that decide a verdict, made visible: every wait that ends on a clock is recorded
with its length, and a finding that depended on one says which and how to lengthen it.

Most of the suite's waits end on a message (a response, an idle). A few end on a clock:

* the grace window (``--grace``, default 0.25 s of silence) after a cancelled turn, a
  replay, a retry or an echo that came late: what the target writes after it closes is
  read as part of the next step;
* the cancel timer (half of ``--timeout``): a turn cancelled "at its first output" that
  shows none by then is cancelled on the clock;
* the stream wait (0.8 of ``--timeout``): a case that sends a load or resume while a
  prompt streams, whose turn writes no agent message chunk by then, is not testable;
* the silence of ``--timeout`` and the whole wait of ``--turn-timeout``: a target that
  says nothing for that long is graded as hung (the ``timeout`` event already records it).

The client role has its own: the agent double's wait for the client's answer to a probe
or a request (``--timeout``, at most 5 s), the silence and turn timeouts of the pty and
adapter drivers, and the wait for a double the client started to report (``--timeout``).

The driver records each clock-ended wait in the transcript header's optional ``timers``
list (:func:`record`): ``{"timer", "seconds", "option", "why", "at"}``, ``at`` being the
sequence number of the last entry recorded when the clock ran out (for the client role's
waits, the harness event that records the end: a finding that cites that event rests on
that timer). A transcript without
the field (one recorded before it existed) is read as before: no finding is annotated.

:func:`annotate` (called by :func:`conformance.grading.grade_recorded`, so ``check``
says the same as the live run) gives every fail or warn finding that rests on such a
wait a ``timer`` text: a finding that points at a ``timeout`` event, or at target output
written after a grace window or a cancel timer ran out and before the target answered
the suite's next request (output a longer wait would have read as part of the step
before). On a slow machine a slow answer is then never turned into a missing or
misplaced one without the report saying so, and which option to lengthen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from conformance.results import Finding, Outcome
from conformance.transcript import Entry

__all__ = ["annotate", "late_notes", "record"]

HEADER = "timers"  # the transcript header field


def record(header: MutableMapping[str, Any], timer: str, seconds: float, option: str,
           why: str, at: int, live: bool = False) -> None:
    """Note in ``header`` that a wait ended on its clock (see the module's text); ``live``:
    a turn was still running when it ended, so output after it is that turn's, expected."""
    item = {"timer": timer, "seconds": round(seconds, 3), "option": option, "why": why,
            "at": at}
    if live:
        item["live"] = True
    header.setdefault(HEADER, []).append(item)


def _windows(header: Mapping[str, Any], entries: Sequence[Entry]) -> list[tuple[int, int, dict[str, Any]]]:
    """(first seq, last seq, timer) of the output that a clock-ended wait let pass to the
    next step: from just after the wait ended to the target's next response."""
    timers = header.get(HEADER)
    if not isinstance(timers, list) or header.get("role") == "client":
        return []  # a client's transcript: stdout is the suite's agent double, not the target
    out = []
    for t in timers:
        if not isinstance(t, dict) or not isinstance(t.get("at"), int) or t.get("live"):
            continue
        at = end = t["at"]
        for e in entries:
            if e.seq <= at or e.stream != "stdout":
                continue
            if _read_next(e.msg):
                break  # the target answered or echoed the suite's next request: it read it
            end = e.seq
        if end > at:
            out.append((at + 1, end, t))
    return out


def _read_next(msg: Any) -> bool:
    """A line that shows the target had read the suite's next request: a response, or the
    echo of a prompt (a user message)."""
    if not isinstance(msg, dict):
        return False
    if "id" in msg and "method" not in msg:
        return True
    update = (msg.get("params") or {}).get("update") if isinstance(msg.get("params"),
                                                                    dict) else None
    return isinstance(update, dict) and update.get("sessionUpdate") in (
        "user_message_chunk", "user_message")


def late_notes(header: Mapping[str, Any], entries: Iterable[Entry]) -> list[str]:
    """One line per clock-ended wait after which the target wrote before it had read the
    suite's next request: output a longer wait would have graded with the step before
    (a slow answer, or a fault such as an update after a cancelled turn), said even when
    no finding points at it."""
    entries = list(entries)
    out = []
    for lo, hi, t in _windows(header, entries):
        seqs = [e.seq for e in entries if lo <= e.seq <= hi and e.stream == "stdout"]
        if not seqs:
            continue
        shown = ", ".join(f"#{s}" for s in seqs[:4]) + (", ..." if len(seqs) > 4 else "")
        why = f", {t['why']}" if t.get("why") else ""
        out.append(f"output {shown} came after the {t.get('timer')} ({t.get('seconds')} s{why})"
                   f" ran out at #{t.get('at')}: read as the next step's (slow? lengthen it "
                   f"with {t.get('option') or '--timeout'} SECONDS)")
    return out


def _text(t: Mapping[str, Any], late: bool) -> str:
    seconds, option = t.get("seconds"), t.get("option") or "--timeout"
    what = f"the {t.get('timer')} ({seconds} s{', ' + str(t['why']) if t.get('why') else ''})"
    if late:
        return (f"rests on {what}: the target's output after it ran out (at #{t.get('at')}) "
                f"was read as part of the next step; on a slow machine, lengthen it with "
                f"{option} SECONDS")
    return f"rests on {what}; on a slow machine, lengthen it with {option} SECONDS"


def annotate(findings: Iterable[Finding], header: Mapping[str, Any],
             entries: Iterable[Entry]) -> list[Finding]:
    """Each fail or warn finding with the timer it rests on (see the module's text)."""
    found = list(findings)
    if not any(f.outcome in (Outcome.FAIL, Outcome.WARN) for f in found):
        return found
    # a file's entries (transcript.EntryFile) are read again, not all held at once
    entries = entries if isinstance(entries, Sequence) else list(entries)
    cited = {s for f in found for s in f.entries}
    by_seq = {e.seq: e for e in entries if e.seq in cited}
    windows = _windows(header, entries)
    timers = header.get(HEADER)
    at_event = {t["at"]: t for t in (timers if isinstance(timers, list) else [])
                if isinstance(t, dict) and isinstance(t.get("at"), int)
                and getattr(by_seq.get(t["at"]), "stream", "") == "harness"}
    out = []
    for f in found:
        text = ""
        if f.outcome in (Outcome.FAIL, Outcome.WARN) and f.entries:
            named = next((at_event[s] for s in f.entries if s in at_event), None)
            if named is not None:  # the wait recorded itself at the event the finding cites
                text = _text(named, False)
            for s in () if text else f.entries:
                e = by_seq.get(s)
                if e is not None and e.event == "timeout" and isinstance(e.data, dict):
                    overall = bool(e.data.get("deadline"))
                    text = _text({"timer": "turn timeout" if overall else "silence timeout",
                                  "seconds": e.data.get("deadline") if overall
                                  else e.data.get("timeout"),
                                  "option": "--turn-timeout" if overall else "--timeout",
                                  "why": f"waiting for {e.data.get('waiting_for')}"}, False)
                    break
            if not text:
                hit = next((t for lo, hi, t in windows for s in f.entries if lo <= s <= hi),
                           None)
                if hit is not None:
                    text = _text(hit, True)
        out.append(dataclasses.replace(f, timer=text) if text else f)
    return out
