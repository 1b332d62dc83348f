"""One fault, one finding: an agent's fault that other rules see again is reported once.

A fault can show under rules other than its own: a v2 agent that drops a prompt's
``idempotencyKey`` turns a retry into a second prompt, and that second insert and turn
then break the pairing of echoes with prompt responses (``MID-V2-05/response-id``,
``MID-V2-05/echo-content``) and push a replay behind its response
(``MID-V2-06/after-response``). Each :class:`Fault` says which rules grade the fault
itself (its *causes*), which rules may see it again (its *consequences*), where in a
transcript it starts acting (its *onset*) and how to build the *control*: the same
transcript without the fault.

A consequence's finding is folded into the cause's finding (listed in its
``consequences``, as a client's crash lists its exit and unanswered probe,
:func:`conformance.grading.fold_consequences`) only when all three hold:

* the cause's rule failed in the same transcript;
* the consequence's evidence reaches the fault (an entry at or after its onset);
* the control rules the other causes out: graded on the control transcript, the
  consequence's rule is exercised and passes, so the target meets it without the fault.

Otherwise the consequence stands as a finding of its own: precedence alone names no
cause. A fixture that breaks the consequence's rule by itself fails it in the control
too, and keeps its row.

Pure: a function of the findings and the entries of one transcript (``check`` on a
saved transcript folds exactly as the live run did).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.results import Finding, Outcome, Reason
from conformance.transcript import Entry

#: A transcript and the entry at which the fault starts acting -> the control transcript.
Control = Callable[[Sequence[Entry], int], list[Entry]]
#: Entries and rules -> those rules graded on those entries, as the case was graded
#: (the one grading of a recorded case, :func:`conformance.grading.grade_recorded`).
Regrade = Callable[[list[Entry], list[str]], list[Finding]]


@dataclass(frozen=True)
class Fault:
    """A fault that other rules see again, as data."""

    name: str  # what the fault is, as a report says it
    causes: tuple[str, ...]  # the rules whose fail is the fault itself
    consequences: tuple[str, ...]  # rules that may see it again (fail or warn)
    onset: Callable[[Sequence[Entry]], int | None]  # the entry where it starts acting
    control: Control  # the transcript without the fault
    control_says: str  # what the control is, said after "the control (...)"


def _messages(entry: Entry) -> list[dict[str, Any]]:
    if not entry.is_message:
        return []
    msg = entry.msg
    return [m for m in (msg if isinstance(msg, list) else [msg]) if isinstance(m, dict)]


def _prompt(m: dict[str, Any]) -> dict[str, Any] | None:
    params = m.get("params")
    if m.get("method") == "session/prompt" and "id" in m and isinstance(params, dict):
        return params
    return None


def first_key_retry(entries: Sequence[Entry]) -> int | None:
    """The entry of the first ``session/prompt`` that repeats an ``idempotencyKey`` sent
    before in its session: where an agent that drops the key first acts on it."""
    sent: set[tuple[Any, str]] = set()
    for e in entries:
        if e.src != "client":
            continue
        for m in _messages(e):
            params = _prompt(m)
            key = params.get("idempotencyKey") if params else None
            if not isinstance(key, str) or params is None:
                continue
            at = (str(params.get("sessionId")), key)
            if at in sent:
                return e.seq
            sent.add(at)
    return None


def _is_idle(m: dict[str, Any]) -> bool:
    params = m.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    return (m.get("method") == "session/update" and isinstance(update, dict)
            and update.get("sessionUpdate") == "state_update" and update.get("state") == "idle")


def _session(m: dict[str, Any]) -> str | None:
    params = m.get("params")
    sid = params.get("sessionId") if isinstance(params, dict) else None
    return sid if isinstance(sid, str) else None


def without_the_retries(entries: Sequence[Entry], onset: int) -> list[Entry]:
    """The transcript as it would be had the agent honoured the key: without each retry
    (a ``session/prompt`` that repeats a key of its session), the agent's answer to it
    and the turn it ran for it. An agent takes a session's prompts in order, so the
    retry's turn is the turn of the same rank (prompts answered with an error run none;
    a replay while a resume or load is pending belongs to no turn). Where the turns do
    not line up with the prompts: the transcript before the first retry."""
    drop: set[int] = set()
    retries: dict[tuple[int, str], set[str]] = {}  # (conn, session) -> retried request IDs
    sent: set[tuple[str, str]] = set()
    for e in entries:
        for m in _messages(e) if e.src == "client" else ():
            params = _prompt(m)
            key = params.get("idempotencyKey") if params else None
            if params is None or not isinstance(key, str):
                continue
            at = (str(params.get("sessionId")), key)
            if at in sent:
                retries.setdefault((e.conn, at[0]), set()).add(repr(m["id"]))
                drop.add(e.seq)
            sent.add(at)
    for (conn, sid), retried in retries.items():
        turn = _turn_entries(entries, conn, sid, retried)
        if turn is None:
            return [e for e in entries if e.seq < onset]
        drop |= turn
    return [e for e in entries if e.seq not in drop]


def _turn_entries(entries: Sequence[Entry], conn: int, sid: str,
                  retried: set[str]) -> set[int] | None:
    """The entries of the turns an agent ran for the ``retried`` prompts of one session
    on one connection, and its answers to them; None when turns and prompts do not line
    up."""
    mine = [e for e in entries if e.conn == conn]
    errors = {repr(m.get("id")) for e in mine if e.src == "agent" for m in _messages(e)
              if "method" not in m and "error" in m}
    prompts = [repr(m["id"]) for e in mine if e.src == "client" for m in _messages(e)
               if _prompt(m) and _session(m) == sid]
    ranks = [i for i, rid in enumerate(r for r in prompts if r not in errors) if rid in retried]
    turns: list[list[int]] = [[]]
    asked: set[str] = set()  # the agent's requests in a turn of the session
    restoring: set[str] = set()  # the session's resume or load requests not yet answered
    drop: set[int] = set()
    for e in mine:
        for m in _messages(e):
            rid = repr(m.get("id"))
            if e.src == "client":
                if m.get("method") in ("session/resume", "session/load") and _session(m) == sid:
                    restoring.add(rid)
                elif "method" not in m and rid in asked:
                    turns[-1].append(e.seq)  # an answer to the agent's request in the turn
                continue
            if "method" not in m:
                restoring.discard(rid)
                if rid in retried:
                    drop.add(e.seq)
                continue
            if _session(m) != sid or restoring:
                continue
            if "id" in m:
                asked.add(rid)
            turns[-1].append(e.seq)
            if _is_idle(m):
                turns.append([])
    if ranks and max(ranks) >= len(turns) - 1:
        return None
    for r in ranks:
        drop.update(turns[r])
    return drop


#: The faults this folds, as data (a client's crash: grading.fold_consequences).
FAULTS = (
    Fault(
        name="a dropped idempotencyKey",
        causes=("MID-V2-15/one-insert", "MID-V2-15/same-id", "MID-V2-15/one-replay"),
        consequences=("MID-V2-05/response-id", "MID-V2-05/echo-content",
                      "MID-V2-05/unmatched-echo", "MID-V2-05/no-echo",
                      "MID-V2-06/after-response"),
        onset=first_key_retry,
        control=without_the_retries,
        control_says="the transcript without the retry at #{onset}, its answer and its turn"),
)


def fold_faults(findings: list[Finding], entries: Sequence[Entry], *, role: str,
                regrade: Regrade) -> list[Finding]:
    """Fold each consequence of a fault in :data:`FAULTS` into the fault's finding, when
    its control (graded by ``regrade``) rules the other causes out (the module's
    docstring)."""
    if role != "agent":
        return findings
    for fault in FAULTS:
        findings = _fold(fault, findings, entries, regrade)
    return findings


def _fold(fault: Fault, findings: list[Finding], entries: Sequence[Entry],
          regrade: Regrade) -> list[Finding]:
    cause = next((f for rule in fault.causes for f in findings
                  if f.requirement == rule and f.outcome is Outcome.FAIL), None)
    seen = [f for f in findings if f.requirement in fault.consequences
            and f.outcome in (Outcome.FAIL, Outcome.WARN) and f.entries]
    if cause is None or not seen:
        return findings
    onset = fault.onset(entries)
    reached = [f for f in seen if onset is not None and max(f.entries) >= onset]
    if onset is None or not reached:
        return findings
    controlled = _controls(regrade(fault.control(entries, onset),
                                   sorted({f.requirement for f in reached})))
    folded: dict[int, Finding] = {id(f): f for f in reached if f.requirement in controlled}
    if not folded:
        return findings
    out: list[Finding] = []
    listed: list[str] = []
    for f in findings:
        if id(f) not in folded:
            out.append(f)
            continue
        listed.append(f"{f.requirement}: {f.message}")
        out.append(Finding(f.requirement, Outcome.NOT_APPLICABLE,
                           f"not testable: a consequence of {fault.name} "
                           f"({cause.requirement}), reported with it; its control, "
                           f"{fault.control_says.format(onset=onset)}, meets the rule",
                           expected=f.expected, actual=f.actual, entries=f.entries,
                           reason=Reason.NOT_TESTABLE))
    return [dataclasses.replace(f, consequences=f.consequences + tuple(listed))
            if f is cause else f for f in out]


def _controls(rows: list[Finding]) -> set[str]:
    """The rules the control transcript exercises and passes (its ``rows``): for those the
    target meets the rule without the fault."""
    failed = {f.requirement for f in rows if f.outcome in (Outcome.FAIL, Outcome.WARN)}
    return {f.requirement for f in rows if f.outcome is Outcome.PASS} - failed
