"""One fault, one finding: an agent's fault that other rules see again is reported once.

A fault can show under rules other than its own: a v2 agent that drops a prompt's
``idempotencyKey`` turns a retry into a second prompt, and that second insert and turn
then break the pairing of echoes with prompt responses (``MID-V2-05/response-id``,
``MID-V2-05/echo-content``) and push a replay behind its response
(``MID-V2-06/after-response``). An agent that exits on its own mid-case (``TARGET/exit``)
leaves what it was given unfinished: a prompt it accepted is never echoed
(``MID-V2-05/no-echo``), a resume never answered; its control is the transcript without
the work the exit cut short. Each :class:`Fault` says which rules grade the fault
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


def _early_exits(entries: Sequence[Entry]) -> list[Entry]:
    """The harness's ``early-exit`` events: an agent that exited (or closed its output) on
    its own, mid-case (``TARGET/exit``)."""
    return [e for e in entries if e.stream == "harness" and e.event == "early-exit"]


def _update(m: dict[str, Any]) -> dict[str, Any]:
    params = m.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    return update if isinstance(update, dict) and m.get("method") == "session/update" else {}


def _cut_work(entries: Sequence[Entry]) -> set[int]:
    """The entries of the work an agent's exit cut short, on each connection it exited on:
    each request of the suite it left unanswered and each prompt whose turn it never ended
    (v2: no echo of the ID its response named, or no idle of the session after that echo;
    without an ID, no idle after the request; v1: no response), with their answers, the
    session's updates from where that work began, the agent's requests among them and the
    suite's answers to those; and the ``early-exit`` event itself."""
    drop: set[int] = set()
    for end in _early_exits(entries):
        drop.add(end.seq)
        mine = [e for e in entries if e.conn == end.conn and e.seq < end.seq]
        answers: dict[str, tuple[int, dict[str, Any]]] = {}  # request id -> (seq, answer)
        echoes: dict[str, int] = {}  # user message ID -> the first echo's seq
        idles: dict[str, list[int]] = {}  # session -> seqs of its idle updates
        for e in mine:
            for m in _messages(e) if e.src == "agent" else ():
                if "method" not in m:
                    answers.setdefault(repr(m.get("id")), (e.seq, m))
                kind, sid = _update(m).get("sessionUpdate"), _session(m)
                if kind in ("user_message", "user_message_chunk") and sid is not None:
                    echoes.setdefault(str(_update(m).get("messageId")), e.seq)
                if _is_idle(m) and sid is not None:
                    idles.setdefault(sid, []).append(e.seq)
        v2 = bool(idles) or any(_update(m).get("sessionUpdate") == "state_update"
                                for e in mine for m in _messages(e))
        cut_from: dict[str, int] = {}  # session -> where its cut work began
        for e in mine:
            for m in _messages(e) if e.src == "client" else ():
                if "method" not in m or "id" not in m:
                    continue
                rid, sid = repr(m["id"]), _session(m)
                answer = answers.get(rid)
                cut, began = _cut_at(m, e.seq, answer, v2, echoes, idles.get(sid or "", []))
                if not cut:
                    continue
                drop.add(e.seq)
                if answer is not None:
                    drop.add(answer[0])
                if sid is not None and began is not None:
                    cut_from[sid] = min(cut_from.get(sid, began), began)
        asked: set[str] = set()
        for e in mine:
            for m in _messages(e):
                sid = _session(m)
                if e.src == "agent" and "method" in m and sid in cut_from \
                        and e.seq >= cut_from[sid]:
                    drop.add(e.seq)
                    if "id" in m:
                        asked.add(repr(m["id"]))
                elif e.src == "client" and "method" not in m and repr(m.get("id")) in asked:
                    drop.add(e.seq)
    return drop


def _cut_at(m: dict[str, Any], seq: int, answer: tuple[int, dict[str, Any]] | None, v2: bool,
            echoes: dict[str, int], idles: list[int]) -> tuple[bool, int | None]:
    """Whether the exit cut short the work of the suite's request ``m`` (sent at ``seq``),
    and where the session's updates of that work began (None: it has none of its own)."""
    prompt = m.get("method") == "session/prompt"
    if answer is None:
        if prompt and v2 and any(i > seq for i in idles):
            return True, None  # unanswered, but the turn running then ended: not its updates
        return True, seq  # never answered: what followed in its session was its work
    if not prompt or not v2 or "error" in answer[1]:
        return False, None  # answered: done (a refused prompt runs no turn)
    result = answer[1].get("result")
    mid = result.get("messageId") if isinstance(result, dict) else None
    if isinstance(mid, str):
        echo = echoes.get(mid)
        if echo is None:  # accepted, never started (queued behind a turn), unless an idle
            # came after it: a turn that ended without its echo is the agent's own fault
            return not any(i > answer[0] for i in idles), None
        return (False, None) if any(i > echo for i in idles) else (True, echo)
    return (False, None) if any(i > seq for i in idles) else (True, seq)


def first_cut(entries: Sequence[Entry]) -> int | None:
    """Where an agent's exit first acts: the first entry of the work it cut short (else
    the ``early-exit`` event); None when the agent never exited on its own."""
    drop = _cut_work(entries)
    return min(drop) if drop else None


def without_the_cut_work(entries: Sequence[Entry], onset: int) -> list[Entry]:
    """The transcript as it would be had the agent not exited before the work it was
    given was done: without that work (:func:`_cut_work`), so what remains is work the
    agent finished, and a rule it breaks there it breaks without the exit."""
    drop = _cut_work(entries)
    return [e for e in entries if e.seq not in drop]


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
    Fault(
        name="the agent's exit mid-case",
        causes=("TARGET/exit",),
        consequences=("MID-V2-05/no-echo", "MID-V2-05/response-id", "MID-V2-13/missing"),
        onset=first_cut,
        control=without_the_cut_work,
        control_says="the transcript without the work the exit cut short, from #{onset}"),
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
