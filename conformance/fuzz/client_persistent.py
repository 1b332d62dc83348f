"""Persistent client fuzzing: many generated runs on one client process.

A generated client run costs what its processes cost to start: the client, and
the agent double the client starts. A client that takes a prompt after another
(an interactive client driven through a pty) can be shown many generated
streams without restarting, each one a turn of its own, the way a person uses
it; that is also where the faults live that one turn cannot show (state one
turn leaves for the next). So ``fuzz --client`` keeps the client process a run
leaves behind (:class:`ClientPool`, one per protocol version) and plays the
next run as the next turn of its session. One transcript records the process's
whole life, and every run grades all of it, as the suite grades a case of many
turns: the earlier turns passed, so what breaks is this turn's doing or the
earlier turns' and this one's together. Every turn after the first has its own
prompt and its texts carry a turn prefix (``t2 ``), so the client's rendering of
each message can be told apart from the earlier turns'.

A fresh client is started when

- the client is not one that takes several turns: a one-shot client (one
  process per turn). An in-process adapter is kept the same way (its object
  takes turn after turn): no process start to save, but the faults that need
  an earlier turn show only so;
- the last run broke a rule, or the client crashed, hung, or did not take the
  run's protocol version;
- the run's stream names a message ID an earlier turn on the process already
  used (within one session an ID names one message: the double would break
  MID-A-02 itself): the run goes to another kept process (up to :data:`SPARES`
  per version are kept) or a fresh one;
- the process has served ``--runs-per-process`` runs;
- a pty client that shows the whole session at each render shows half a
  screenful of messages: a later turn could push an earlier one out of sight;
- the client did not take a further turn at all (a probe of two plain turns on a
  fresh client says so): a fresh process per run from then on, with a note.

``--fresh-process`` (``runs_per_process=1``) keeps one client process per run.
A finding stands alone (:func:`conformance.fuzz.client_fuzz.run_client_fuzz`): a
failure seen on a reused client is played alone on a fresh one first; if it does
not fail there, the earlier turns are played before it on one fresh client, and
if that fails the counterexample keeps them (``stream["history"]``, shrunk by
:func:`shrink_history`) and the report says how many earlier turns it needs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from conformance.client.pty import DIMENSIONS
from conformance.fuzz.client_case import StreamRun, stream_case
from conformance.fuzz.grading import Failure, violations
from conformance.transcript import Transcript

SCREEN_ROWS = DIMENSIONS[0]  # the rows of the pty a client is driven through

SPARES = 3  # client processes kept per protocol version


def probe_stream(protocol: int) -> dict[str, Any]:
    """Two plain turns on one client: does the client take a second turn at all?"""
    first = {"protocol": protocol, "prompt": "Please play a first plain turn.",
             "steps": [{"agent": "p1. ", "id": "probe-a"}]}
    second = {"protocol": protocol, "prompt": "Please play a second plain turn.",
              "steps": [{"agent": "p2. ", "id": "probe-b"}]}
    return with_history(second, [first])


def cannot_persist(target: Any) -> str | None:
    """Why this client cannot be shown several runs on one process (None: it can)."""
    if target.adapter and not target.command:
        return None  # one adapter object takes turn after turn, as a process does
    from conformance.client.runner import template_of

    if template_of(target.command or "", target.profile).one_shot:
        return "a one-shot client ({prompt} in its command) takes one turn per process"
    return None


def turn_stream(stream: Mapping[str, Any], turn: int) -> dict[str, Any]:
    """``stream`` as the ``turn``-th turn on a process: its own prompt, and every text
    prefixed, so each message is unique among the process's turns (script.check_case)."""
    prefix = f"t{turn} "

    def step(s: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(s)
        for kind in ("user", "agent", "thought"):
            if isinstance(out.get(kind), str):
                out[kind] = prefix + out[kind]
        if "upsert" in out and isinstance(out.get("content"), list):
            out["content"] = [prefix + v if isinstance(v, str) else
                              {**v, "text": prefix + str(v.get("text", ""))}
                              if isinstance(v, dict) and "text" in v else v
                              for v in out["content"]]
        if isinstance(out.get("batch"), list):
            out["batch"] = [step(b) if isinstance(b, dict) else b for b in out["batch"]]
        return out

    return {**stream, "prompt": f"Please play generated turn {turn}.",
            "steps": [step(s) if isinstance(s, dict) else s for s in stream["steps"]]}


def message_ids(steps: Sequence[Any]) -> set[str]:
    """The string message IDs a stream's steps name."""
    from conformance.client.script import step_id

    out: set[str] = set()
    for s in steps:
        if not isinstance(s, dict):
            continue
        if isinstance(s.get("batch"), list):
            out |= message_ids(s["batch"])
            continue
        present, value = step_id(s)
        if present and isinstance(value, str):
            out.add(value)
    return out


def with_history(stream: Mapping[str, Any], history: Sequence[Mapping[str, Any]]
                 ) -> dict[str, Any]:
    """``stream`` to be played after ``history`` (earlier turns) on one fresh client."""
    out = {k: v for k, v in stream.items() if k != "history"}
    if history:
        out["history"] = [{"prompt": h.get("prompt"), "steps": list(h["steps"])}
                          for h in history]
    return out


def earlier_turns(stream: Mapping[str, Any]) -> int:
    return len(stream.get("history") or ())


def describe_history(f: Failure) -> str | None:
    """The report's line for a client failure found on a reused process (None: none)."""
    if f.unconfirmed:
        return ("found on a reused client process; it did not fail again on a fresh client "
                "(alone or after the earlier turns on its process): its behaviour depends on "
                "timing or on state the turns do not show")
    n = earlier_turns(f.stream or {})
    if not n:
        return None
    return (f"seen after {n} earlier run(s) in the same process (each a turn of the "
            "client's session): those turns (shrunk) are played first, on one client "
            "process, and the failing turn after them")


# -- the process kept between runs -------------------------------------------------------

def _turn_drive_class() -> type:
    from conformance.client.runner import ClientDrive

    class TurnDrive(ClientDrive):
        """A client drive that keeps its client between runs: each run plays one turn
        (the first also starts the client); ``stop`` after a clean turn keeps it."""

        kept = True
        clean = False
        retired = False

        def drive(self) -> None:
            self.clean = False
            super().drive()
            self.clean = True

        def stop(self, hurry: bool) -> None:
            if self.kept and self.clean and not hurry:
                return
            self.retire()

        def retire(self) -> None:
            self.kept = False
            if not self.retired:
                self.retired = True
                super().stop(True)

    return TurnDrive


@dataclass
class KeptClient:
    drive: Any  # a TurnDrive
    transcript: Transcript  # the process's whole life
    protocol: int
    history: list[dict[str, Any]] = field(default_factory=list)  # the turns played on it
    ids: set[str] = field(default_factory=set)  # the message IDs those turns named

    @property
    def runs(self) -> int:
        return len(self.history)


@dataclass
class PoolRun:
    """One run played by the pool: what it recorded and graded, and where."""

    run: Any  # a StreamRun (its transcript: the process's, every turn so far)
    stream: dict[str, Any]  # the stream as played (turn prompt and text prefix)
    history: list[dict[str, Any]]  # the turns played on the process before it
    started: bool  # a fresh client process was started for it
    reused: bool  # it was played on a process an earlier run left
    aborted: bool  # the client crashed or hung in it


@dataclass
class ClientPool:
    """The client processes kept between runs, one per protocol version."""

    target: Any  # a ClientTarget
    options: Any
    strict: bool
    schema_dir: Any
    runs_per_process: int
    # per protocol version, the processes kept (at most ``spares``): a run whose IDs an
    # earlier turn of one used goes to another
    kept: dict[int, list[KeptClient]] = field(default_factory=dict)
    spares: int = SPARES
    reused: int = 0
    restarted: dict[str, int] = field(default_factory=dict)
    off: str | None = None  # why persistent mode was switched off for the rest of the run

    def play(self, protocol: int, stream: Mapping[str, Any]) -> PoolRun:
        from conformance.fuzz.grading import graded
        from conformance.fuzz.tracing import untraced
        from conformance.lifecycle import drive_case

        kept = None
        waiting = self.kept.setdefault(protocol, [])
        for one in list(waiting):
            if not one.drive.client.alive():
                waiting.remove(one)
                self._let_go(one, "the client exited between runs")
            elif kept is None and not message_ids(stream["steps"]) & one.ids:
                waiting.remove(one)
                kept = one
        if kept is None and len(waiting) >= self.spares:  # every one used the run's IDs
            self._let_go(waiting.pop(0), "every kept process's earlier turns used a message "
                                         "ID the run's stream names")
        started = kept is None
        if kept is None:
            kept = self._start(protocol)
        turn = kept.runs + 1
        played = dict(stream) if turn == 1 else turn_stream(stream, turn)
        drive = kept.drive
        case = stream_case(protocol, played)
        name = f"fuzz-{turn}"
        drive.case = replace(case, stream=({**case.stream[-1], "turn": name},),
                             drive=(("start",) if turn == 1 else ()) + ({"play": name},))
        ending = drive_case(drive, kept.transcript)
        kept.transcript.header["ended"] = ending.to_json()
        with untraced():
            findings = graded(kept.transcript, self.schema_dir)
        history = list(kept.history)
        if not started:
            self.reused += 1
        why = None
        if violations(findings, self.strict):
            why = "a rule broke"
        elif ending.aborted or ending.reason is not None or ending.cut:
            why = ending.note or "the run ended early"
        elif turn >= self.runs_per_process:
            why = f"{self.runs_per_process} runs on one process (--runs-per-process)"
        elif self._screen_full(kept.transcript):
            why = (f"the session fills half the client's screen ({SCREEN_ROWS} rows): a "
                   "later turn could push earlier messages out of what it shows")
        if why is not None:
            self.restarted[why] = self.restarted.get(why, 0) + 1
            drive.retire()
        else:
            kept.history.append(played)
            kept.ids |= message_ids(played["steps"])
            self.kept[protocol].append(kept)
        return PoolRun(StreamRun(kept.transcript, findings, ending.note), played, history,
                       started, not started, ending.aborted)

    def _screen_full(self, transcript: Transcript) -> bool:
        """A pty client that shows the whole session on its screen (a cumulative render)
        shows no more than a screenful: once the messages it shows fill half of one, the
        session ends there, so no message of an earlier turn is ever out of sight (which
        the checkers would take for a message the client lost)."""
        if self.target.command is None or self.target.profile is None:
            return False  # an adapter or a wire-only client: no screen
        for e in reversed(transcript.entries):
            if e.stream == "harness" and e.event == "observed" and isinstance(e.data, dict):
                return (e.data.get("render") == "cumulative"
                        and len(e.data.get("shown") or ()) >= SCREEN_ROWS // 2)
        return False

    def _start(self, protocol: int) -> KeptClient:
        from conformance.client.runner import ClientRun, client_transcript

        target = self.target
        run = ClientRun(protocols=(protocol,), options=self.options, command=target.command,
                        adapter=target.adapter if not target.command else None,
                        profile=target.profile, timeout=target.timeout,
                        env=target.env, masker=target.masker, strict=self.strict)
        case = stream_case(protocol, {"steps": []})
        transcript = client_transcript(run, case, protocol, target.label)
        drive = _turn_drive_class()(run, case, protocol, transcript, controls=False)
        return KeptClient(drive, transcript, protocol)

    def close(self) -> None:
        for waiting in list(self.kept.values()):
            for kept in waiting:
                kept.drive.retire()
        self.kept.clear()

    def _let_go(self, kept: KeptClient, why: str) -> None:
        self.restarted[why] = self.restarted.get(why, 0) + 1
        kept.drive.retire()


# -- a failure that needs the earlier turns --------------------------------------------

Fails = Callable[[dict[str, Any]], "Failure | None"]


def shrink_history(failure: Failure, fails: Fails, *, max_attempts: int = 40,
                   deadline: float | None = None) -> Failure:
    """The fewest earlier turns (whole turns: the latest k for k = 1, 2, 4, ..., then each
    one left out) and then the fewest steps of the failing turn and of the earlier turns
    that still break the rule. ``fails`` plays a stream (with its history) on a fresh
    client and returns the failure for the same rule (None: it passes)."""
    from conformance.fuzz.shrink import shrink_steps

    stream = dict(failure.stream)
    history = list(stream.get("history") or ())
    own = {k: v for k, v in stream.items() if k != "history"}
    best = failure
    attempts = 0

    def over() -> bool:
        return attempts >= max_attempts or (deadline is not None
                                            and time.monotonic() >= deadline)

    def attempt(hist: list[Any], mine: Mapping[str, Any]) -> Failure | None:
        nonlocal attempts
        attempts += 1
        return fails(with_history(mine, hist))

    k = 1
    while k < len(history) and not over():
        got = attempt(history[-k:], own)
        if got is not None:
            history, best = history[-k:], got
            break
        k *= 2
    i = 0
    while i < len(history) and len(history) > 1 and not over():
        fewer = history[:i] + history[i + 1:]
        got = attempt(fewer, own)
        if got is not None:
            history, best = fewer, got
        else:
            i += 1
    if not over():  # the failing turn's own steps
        shrunk = shrink_steps(list(own["steps"]), best,
                              lambda s: attempt(history, {**own, "steps": s}), keep=0,
                              max_attempts=max(1, max_attempts - attempts),
                              variants=lambda _s: [], deadline=deadline)
        own, best = {**own, "steps": shrunk.steps}, shrunk.result
    for j in range(len(history)):  # then each earlier turn's steps
        if over():
            break
        part = history[j]

        def with_part(s: list[Any], j: int = j, part: Mapping[str, Any] = part,
                      hist: list[Any] = history) -> Failure | None:
            return attempt(hist[:j] + [{**part, "steps": s}] + hist[j + 1:], own)

        shrunk = shrink_steps(list(part["steps"]), best, with_part, keep=0,
                              max_attempts=max(1, max_attempts - attempts),
                              variants=lambda _s: [], deadline=deadline)
        history = history[:j] + [{**part, "steps": shrunk.steps}] + history[j + 1:]
        best = shrunk.result
    best.shrink_attempts = failure.shrink_attempts + attempts
    best.earlier_sessions = earlier_turns(best.stream)
    best.history_steps = sum(len(h["steps"]) for h in best.stream.get("history") or ())
    return best


def failure_for(run: Any, requirement: str, protocol: int, stream: dict[str, Any],
                strict: bool) -> Failure | None:
    """The failure a played stream shows for ``requirement`` (None: it does not break it)."""
    bad = violations(run.findings, strict)
    same = [f for f in bad if f.requirement == requirement]
    if not same:
        return None
    return Failure(same[0], protocol, [], run.transcript, bad, role="client", stream=stream)


__all__ = ["ClientPool", "PoolRun", "cannot_persist", "describe_history", "earlier_turns",
           "failure_for", "message_ids", "shrink_history", "turn_stream", "with_history"]
