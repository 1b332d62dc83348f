# long: drawing, playing, confirming a cause and shrinking client streams share one failure type
"""Client fuzzing: generated streams played by the agent double against a client.

Each generated example is one prompt turn. The client is started (a process
through a pty with a profile, a one-shot process, a wire-only process, or an
in-process adapter), the user prompt is submitted, and the double answers it
with a stream drawn from :func:`client_streams`: a valid
:func:`~conformance.strategies.chunk_streams` stream (IDs from the
opacity attack set, tool calls between chunks, v2 upserts), or one with a
malformed ID (:data:`~conformance.strategies.MUTATIONS`) that a client
must survive. The client runner records it and the client-side checkers grade
it, exactly as for a declarative client case; a violation is raised as an
exception named after its rule, and Hypothesis shrinks the stream to the
fewest messages and chunks that still break that rule.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from conformance.checks import Options
from conformance.controlstream import CAUSE_RULES
from conformance.fuzz.client_case import PROMPT, StreamRun, stream_case
from conformance.fuzz.grading import Failure, FuzzResult, graded, violations
from conformance.fuzz.settings import Budget, Effort
from conformance.masking import Masker
from conformance.usage import UsageError


@dataclass
class ClientTarget:
    label: str
    command: str | None = None  # template with {agent}
    adapter: str | None = None  # MODULE:FACTORY
    profile: Any = None  # conformance.client.profile.Profile
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 5.0
    profile_path: str | None = None
    masker: Masker | None = None  # masks secrets where transcripts record them (None: off)

    def replay_with(self) -> dict[str, Any]:
        """What a regression file records to reach this client again."""
        if self.adapter and not self.command:
            return {"client_adapter": self.adapter}
        return {"client": self.command, "client_profile": self.profile_path}


@dataclass(frozen=True)
class ClientChoice:
    """The client named on the command line: a command (with a profile) or an adapter."""

    command: str | None = None  # template with {agent}
    adapter: str | None = None  # MODULE:FACTORY
    profile_path: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 5.0
    masker: Masker | None = None


def client_target(choice: ClientChoice) -> ClientTarget:
    """The client to fuzz or replay against (usage errors: exit 2)."""
    from conformance.client.profile import ProfileError
    from conformance.client.profile import load as load_profile
    from conformance.client.runner import ClientSetupError, template_of

    if choice.command and choice.adapter:
        raise UsageError("give --client CMD or --client-adapter MODULE:FACTORY, not both")
    profile = None
    if choice.profile_path is not None:
        if choice.adapter:
            raise UsageError("--client-profile drives a client process; an adapter "
                             "reports its messages itself")
        try:
            profile = load_profile(choice.profile_path)
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
    if choice.command:
        try:
            template_of(choice.command, profile)
        except ClientSetupError as exc:
            raise UsageError(str(exc)) from None
    else:
        from conformance.client.adapter import AdapterError, load_factory

        try:
            load_factory(choice.adapter or "")
        except AdapterError as exc:
            raise UsageError(str(exc)) from None
    return ClientTarget(choice.command or choice.adapter or "", choice.command, choice.adapter,
                        profile, dict(choice.env), choice.timeout,
                        str(choice.profile_path) if choice.profile_path is not None else None,
                        choice.masker)


# -- strategies ------------------------------------------------------------------

@functools.cache
def client_streams(*, protocol: int, interleave: bool = False) -> Any:
    """One turn for the double: a valid stream (in v2 with the upsert patch forms, and
    interleaved messages where the profile allows them), a run of look-alike IDs, or a
    stream with a malformed ID (shrinks to valid, then to one plain-ID chunk). Built once
    per (protocol, interleave): building and validating a strategy costs far more than a
    draw from it."""
    from hypothesis import strategies as st

    from conformance.strategies import chunk_streams, mutated_chunk_streams

    v2 = protocol >= 2
    valid = chunk_streams(protocol=protocol, max_messages=5, patches=v2,
                          interleave=v2 and interleave)
    return st.one_of(valid, look_alike_streams(), mutated_chunk_streams(valid))


def look_alike_streams() -> Any:
    """Consecutive messages of one kind whose IDs are distinct members of one opacity
    family (case, whitespace, Unicode forms, numeric look-alikes): what a client that
    transforms IDs merges. The family members are drawn, so every family is reachable."""
    from hypothesis import strategies as st

    from conformance.strategies import id_families

    @st.composite
    def build(draw: Any) -> list[dict[str, Any]]:
        family = draw(id_families(), label="family")
        members = draw(st.lists(st.sampled_from(family), min_size=2, max_size=len(family),
                                unique=True), label="members")
        kind = draw(st.sampled_from(("agent", "thought")), label="kind")
        steps: list[dict[str, Any]] = []
        for member in members:
            for _ in range(draw(st.integers(1, 2), label="chunks")):
                steps.append({kind: f"o{len(steps) + 1}. ", "id": member})
        return steps

    return build()


def draw_turn(data: Any, protocols: Sequence[int], interleave: bool) -> tuple[int, list[Any]]:
    """One fuzz example's draws from ``st.data()``: a protocol version, then its stream."""
    from hypothesis import strategies as st

    protocol = data.draw(st.sampled_from(tuple(protocols)), label="protocol")
    steps = data.draw(client_streams(protocol=protocol, interleave=interleave), label="stream")
    return protocol, steps


# -- one example -------------------------------------------------------------------

def play_stream(target: ClientTarget, protocol: int, stream: Mapping[str, Any], *,
                options: Options, strict: bool = False,
                schema_dir: Path | None = None) -> StreamRun:
    """Start the client, play one turn of ``stream``, stop it; grade it as its transcript's
    header records: every client rule under ``options`` (and ``strict``), or, when the
    client did not take the case's version, the negotiation alone, as the suite and
    ``check`` grade it.

    With ``"controls": true`` in the stream its control (the same arrangement with
    ordinary IDs) is played right after it, as the suite's cases do, so a finding
    that names a cause is decided against it (``confirm_cause``)."""
    from conformance.client.runner import ClientRun, play_client_case

    case = stream_case(protocol, stream)
    run = ClientRun(protocols=(protocol,), options=options, command=target.command,
                    adapter=target.adapter if not target.command else None,
                    profile=target.profile, timeout=target.timeout, env=target.env,
                    masker=target.masker, strict=strict)
    # Generated streams play no control (it would double every example); a cause the
    # heuristics name is confirmed once, on the shrunk stream (confirm_cause).
    played = play_client_case(run, case, protocol, target.label,
                              controls=bool(stream.get("controls")))
    from conformance.fuzz.tracing import untraced

    with untraced():  # a coverage-guided fuzzer's tracer covers the client, not our grading
        findings = graded(played.transcript, schema_dir)
    return StreamRun(played.transcript, findings, played.note)


def stream_of(protocol: int, steps: Sequence[Any]) -> dict[str, Any]:
    return {"protocol": protocol, "prompt": PROMPT, "steps": list(steps)}


# -- the fuzz run -----------------------------------------------------------------

def run_client_fuzz(target: ClientTarget, effort: Effort, seed: int, *,
                    protocols: Sequence[int] = (1, 2), options: Options | None = None,
                    strict: bool = False, max_failures: int | None = None,
                    progress: Any = None, schema_dir: Path | None = None,
                    database: Any = None, keeper: Any = None,
                    runs_per_process: int | None = None) -> FuzzResult:
    """Fuzz one client; Hypothesis shrinks every broken rule's stream. The counterexamples
    a shared example database holds (``database``) are played first. Where the client
    takes several turns on one process, up to ``runs_per_process`` runs share one
    (persistent mode, :mod:`conformance.fuzz.client_persistent`; 1: a fresh process per
    run; None: the default of ``--runs-per-process``)."""
    from hypothesis import given
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
    from hypothesis.errors import Flaky, Unsatisfiable

    from conformance.fuzz import client_persistent as persistent
    from conformance.fuzz import database as shared
    from conformance.fuzz.grading import merge_coverage
    from conformance.fuzz.keeper import Interrupted, raise_pending, received
    from conformance.fuzz.persistent import default_runs_per_process
    from conformance.fuzz.settings import StopFuzzing, hypothesis_settings

    options = options or Options()
    budget = Budget(effort, label="client", stream=progress)
    result = FuzzResult("client", target.label, seed, effort, protocols=tuple(protocols),
                        replay_with=target.replay_with())
    smallest: dict[tuple[str, int], Failure] = {}
    coverage: dict[int, dict[str, Any]] = {}
    stored: list[Failure] = []
    kept: set[tuple[str, int]] = set()
    replayed = 0
    if runs_per_process is None:
        runs_per_process = default_runs_per_process()
    pool = None
    if runs_per_process > 1:
        why_not = persistent.cannot_persist(target)
        if why_not is None:
            pool = persistent.ClientPool(target, options, strict, schema_dir, runs_per_process)
        else:
            result.notes.append(f"a fresh client process per run: {why_not}")
    cross: dict[tuple[str, int], Failure] = {}  # found on a reused process, needing it
    for value in shared.counterexamples(database, "client"):
        if value["protocol"] not in protocols or "stream" not in value:
            continue
        replayed += 1
        raise_pending()  # a signal whose Interrupted was swallowed still ends generation
        budget.example_started()
        budget.processes += 0 if target.adapter else 1
        played = play_stream(target, value["protocol"], value["stream"], options=options,
                             strict=strict, schema_dir=schema_dir)
        bad = violations(played.findings, strict)
        if bad:
            budget.failure()
            stored.append(Failure(bad[0], value["protocol"], [], played.transcript, bad,
                                  role="client", stream=dict(value["stream"])))
    if replayed:
        result.notes.append(f"replayed {replayed} counterexample(s) from the example database "
                            f"first: {len(stored)} still failing")

    def needs_history(protocol: int, got: Any, bad: list[Any]) -> None:
        """A failure on a reused client that did not fail alone on a fresh one: played
        again after the earlier turns on one fresh client; kept (with them) if it fails
        there, or as found (``unconfirmed``). A client that cannot take a second turn at
        all (a probe of two plain turns) is fuzzed on a fresh process per run instead."""
        requirement = bad[0].requirement
        composed = persistent.with_history(got.stream, got.history)
        again = play_stream(target, protocol, composed, options=options, strict=strict,
                            schema_dir=schema_dir)
        budget.processes += 0 if target.adapter else 1
        failure = persistent.failure_for(again, requirement, protocol, composed, strict)
        if failure is None and got.aborted:
            tried = play_stream(target, protocol, persistent.probe_stream(protocol),
                                options=options, strict=strict, schema_dir=schema_dir)
            budget.processes += 0 if target.adapter else 1
            if violations(tried.findings, strict):
                assert pool is not None
                pool.off = (f"the client did not take a second turn on one process "
                            f"({tried.note or 'a plain second turn broke a rule'}): a fresh "
                            "client process per run from then on")
                pool.close()
                result.notes.append(pool.off)
                return
        if failure is None:
            failure = Failure(bad[0], protocol, [], got.run.transcript, bad, role="client",
                              stream=composed)
            failure.unconfirmed = True
        failure.earlier_sessions = persistent.earlier_turns(composed)
        budget.failure()
        if failure.key not in cross and failure.key not in smallest:
            cross[failure.key] = failure
            if keeper is not None and failure.key not in kept:
                kept.add(failure.key)
                keeper.found(failure)

    # Shrinking replays through this function too, so nothing is rejected once a rule
    # broke: the budget only ends a search that found nothing; --max-failures 1 stops
    # Hypothesis at the first broken rule.
    @hypothesis_seed(seed)
    @hypothesis_settings(effort, shrink=True, multiple=max_failures != 1)
    @given(st.data())
    def fuzz(data: Any) -> None:
        if budget.spent() and not smallest:
            raise StopFuzzing()
        protocol, steps = draw_turn(data, protocols, options.profile.interleave_allowed)
        if max_failures is not None and not smallest and len(cross) >= max_failures:
            # enough broken rules, each found needing earlier turns (after the draws:
            # Hypothesis takes a run that stops before drawing for inconsistent data)
            raise StopFuzzing()
        raise_pending()  # a signal whose Interrupted was swallowed still ends generation
        budget.example_started()
        stream = stream_of(protocol, steps)
        # Persistent mode while nothing has broken: Hypothesis then replays examples to
        # shrink them, and each replay must see what the first run saw (a fresh client).
        if pool is not None and pool.off is None and not smallest:
            got = pool.play(protocol, stream)
            budget.processes += 1 if got.started and not target.adapter else 0
            budget.reused += 1 if got.reused else 0
            run = got.run
            bad = violations(run.findings, strict)
            if bad and got.history:  # does it stand alone?
                alone = play_stream(target, protocol, stream, options=options, strict=strict,
                                    schema_dir=schema_dir)
                budget.processes += 0 if target.adapter else 1
                # Any broken rule alone stands alone: the earlier turns can change which
                # cause a fault is put down to (they show IDs the client kept apart), not
                # whether it is one; confirm_cause decides the cause with a control.
                if not violations(alone.findings, strict):
                    needs_history(protocol, got, bad)
                    return
                run = alone
        else:
            budget.processes += 0 if target.adapter else 1
            run = play_stream(target, protocol, stream, options=options, strict=strict,
                              schema_dir=schema_dir)
        bad = violations(run.findings, strict)
        if not bad:
            merge_coverage(coverage.setdefault(protocol, {}), run.findings)
            return
        failure = Failure(bad[0], protocol, [], run.transcript, bad, role="client",
                          stream=stream)
        budget.failure()
        key = failure.key
        if key not in smallest or len(steps) < len(smallest[key].stream["steps"]):
            smallest[key] = failure
            if keeper is not None and key not in kept:  # stored the moment it is found
                kept.add(key)
                keeper.found(failure)
        raise violation_type(failure.requirement)(failure)

    try:
        try:
            fuzz()
        finally:
            if pool is not None:
                pool.close()
                result.reused = pool.reused
                if pool.restarted:
                    result.notes.append("persistent mode: fresh clients after " + "; ".join(
                        f"{why} ({n})" for why, n in sorted(pool.restarted.items())))
    except StopFuzzing:
        pass
    except Interrupted as exc:  # keep what is held: the smallest stream of each rule so far
        result.interrupted = exc.signum
        result.failures = one_per_rule(list(smallest.values()) + stored + list(cross.values()))
        result.unshrunk = {f.key for f in result.failures}
    except Unsatisfiable:
        result.notes.append("no example could be played (every one was rejected)")
    except BaseException as exc:  # our violations; anything else is re-raised
        found = collect_failures(exc, {k[0]: v for k, v in smallest.items()})
        if not found and not isinstance(exc, Flaky):
            raise
        if not found and received() is not None:
            # a signal, not the client, made a repeated run differ: an interrupted run
            result.interrupted = received()
            result.failures = one_per_rule(list(smallest.values()) + stored
                                           + list(cross.values()))
            result.unshrunk = {f.key for f in result.failures}
        elif not found:  # the client answered a repeated run differently (timing)
            result.notes.append("generation stopped early: the client did not repeat a run "
                                "the same way (its behaviour depends on timing)")
        else:
            try:
                confirmed = [confirm_cause(delete_steps(f, target, options, strict, schema_dir),
                                           target, options, strict, schema_dir) for f in found]
            except Interrupted as stop:  # stopped while shrinking: what Hypothesis shrank
                result.interrupted, confirmed = stop.signum, list(found)
                result.unshrunk = {f.key for f in found}
            result.failures = one_per_rule(confirmed)
    finally:
        budget.done()
    if result.interrupted is None and cross:  # found needing earlier turns: shrunk
        known = {f.key for f in result.failures}
        try:
            for f in cross.values():
                if f.key not in known:
                    result.failures.append(shrink_cross(f, target, options, strict,
                                                        schema_dir, progress))
                    known.add(f.key)
        except Interrupted as stop:
            result.interrupted = stop.signum
            result.unshrunk |= {f.key for f in cross.values()} - known
            result.failures += [f for f in cross.values() if f.key not in known]
    if stored and result.interrupted is None:  # the database's, still failing: shrunk
        known = {f.key for f in result.failures}
        again = [confirm_cause(f, target, options, strict, schema_dir) for f in stored
                 if f.key not in known]
        result.failures = sorted(one_per_rule(result.failures + again), key=lambda f: f.key)
    if keeper is None:  # else the command keeps them (keeper.final)
        for f in result.failures:
            shared.save(database, f)
    result.examples = budget.examples
    result.processes = budget.processes
    result.elapsed = budget.elapsed
    result.time_to_first_failure = budget.first_failure
    result.coverage = coverage
    return result


def shrink_cross(failure: Failure, target: ClientTarget, options: Options, strict: bool,
                 schema_dir: Path | None, progress: Any = None) -> Failure:
    """A failure that needs the earlier turns on its client process: the fewest earlier
    turns and steps that still break its rule on one fresh client
    (:func:`conformance.fuzz.client_persistent.shrink_history`)."""
    from conformance.fuzz import client_persistent as persistent

    if failure.unconfirmed:
        return failure
    name = f"{failure.requirement} (v{failure.protocol})"
    if progress is not None:
        progress.write(f"shrinking {name}: it needs the "
                       f"{persistent.earlier_turns(failure.stream)} earlier turn(s) on its "
                       "client process\n")
        progress.flush()

    def fails(stream: dict[str, Any]) -> Failure | None:
        run = play_stream(target, failure.protocol, stream, options=options, strict=strict,
                          schema_dir=schema_dir)
        return persistent.failure_for(run, failure.requirement, failure.protocol, stream,
                                      strict)

    shrunk = persistent.shrink_history(failure, fails)
    # A cause it names stands only when its control rules the others out, as for any
    # finding: the shrunk turns played again with controls, on one fresh client.
    confirmed = confirm_cause(shrunk, target, options, strict, schema_dir)
    for name in ("earlier_sessions", "history_steps", "shrink_attempts"):
        setattr(confirmed, name, getattr(shrunk, name))
    return confirmed


def delete_steps(failure: Failure, target: ClientTarget, options: Options, strict: bool,
                 schema_dir: Path | None, max_attempts: int = 40) -> Failure:
    """After Hypothesis: drop whole stream steps while the same rule still breaks (the
    generated streams keep look-alike IDs together, which Hypothesis cannot always
    take apart), so the counterexample has the fewest messages and chunks."""
    from conformance.fuzz.shrink import shrink_steps

    protocol = failure.protocol

    def fails(steps: list[Any]) -> Failure | None:
        stream = stream_of(protocol, steps)
        run = play_stream(target, protocol, stream, options=options, strict=strict,
                          schema_dir=schema_dir)
        bad = violations(run.findings, strict)
        same = [f for f in bad if f.requirement == failure.requirement]
        if not same:
            return None
        return Failure(same[0], protocol, [], run.transcript, bad, role="client", stream=stream)

    steps = list(failure.stream["steps"])
    shrunk = shrink_steps(steps, failure, fails, keep=0, max_attempts=max_attempts,
                          variants=lambda step: [])
    shrunk.result.shrink_attempts = shrunk.attempts
    return shrunk.result


def names_a_cause(requirement: str) -> bool:
    """A rule whose finding says why the client is wrong, or the generic one it falls back
    to (MID-C-03: a control can show the cause was an ID property after all), or a crash
    (MID-C-08/crash: a control shown fine puts it down to the rule the stream tests)."""
    return (requirement.split("/", 1)[0] in (*CAUSE_RULES, "MID-C-03")
            or requirement == "MID-C-08/crash")


def confirm_cause(failure: Failure, target: ClientTarget, options: Options, strict: bool,
                  schema_dir: Path | None) -> Failure:
    """Play the shrunk stream again followed by its control, and keep what that says.

    Without a control the observation checker can only guess a cause from the
    pattern (conformance.checks.compare): a client that merges every pair of
    messages looks like one that treats ``null`` unlike an omitted ID. With its
    control, a cause stands only when the control was shown as expected; else
    the fault is MID-C-03 with the cause "not attributable". The failure keeps
    the controlled transcript and stream (``"controls": true``), so ``replay``
    and ``check`` decide the same way. A client that does not repeat the fault
    keeps the first run's failure.
    """
    if not names_a_cause(failure.requirement):
        return failure
    stream = {**failure.stream, "controls": True}
    run = play_stream(target, failure.protocol, stream, options=options, strict=strict,
                      schema_dir=schema_dir)
    bad = violations(run.findings, strict)
    if not bad:
        return failure
    same = [f for f in bad if f.requirement == failure.requirement]
    generic = [f for f in bad if f.requirement.startswith("MID-C-03")]  # not attributable
    causes = [f for f in bad if names_a_cause(f.requirement)]  # a crash its control decided
    confirmed = Failure((same or generic or causes or bad)[0], failure.protocol, [],
                        run.transcript, bad, role="client", stream=stream)
    confirmed.shrink_attempts = failure.shrink_attempts
    return confirmed


def one_per_rule(failures: Sequence[Failure]) -> list[Failure]:
    """One failure per broken rule and version, the shortest stream: faults the heuristics
    put down to different causes can turn out to be one (MID-C-03) under their controls."""
    best: dict[tuple[str, int], Failure] = {}
    for f in failures:
        kept = best.get(f.key)
        if kept is None or len(f.stream["steps"]) < len(kept.stream["steps"]):
            best[f.key] = f
    return list(best.values())


class Violation(Exception):
    """Raised when a generated stream breaks a rule; carries the failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.requirement}: {failure.finding.message}")
        self.failure = failure


_VIOLATION_TYPES: dict[str, type[Violation]] = {}


def violation_type(rule_id: str) -> type[Violation]:
    """One exception type per rule, so Hypothesis shrinks each broken rule on its own."""
    cls = _VIOLATION_TYPES.get(rule_id)
    if cls is None:
        cls = _VIOLATION_TYPES[rule_id] = type(f"Violation[{rule_id}]", (Violation,), {})
    return cls


def collect_failures(exc: BaseException, smallest: Mapping[str, Failure]) -> list[Failure]:
    """The failures Hypothesis reports (its final, shrunk runs), one per broken rule. A
    failure Hypothesis calls flaky (the client did not repeat it) falls back to the
    smallest failing stream seen for that rule."""
    found: dict[str, Failure] = {}
    flaky = False

    def walk(e: BaseException) -> None:
        nonlocal flaky
        if isinstance(e, Violation):
            found.setdefault(e.failure.requirement, e.failure)
            return
        subs = getattr(e, "exceptions", None)  # an exception group (Python 3.10: backport)
        if isinstance(subs, (list, tuple)):
            if type(e).__name__ == "FlakyFailure":
                flaky = True
            for sub in subs:
                if isinstance(sub, BaseException):
                    walk(sub)

    walk(exc)
    if flaky or not found:
        for rid, f in smallest.items():
            found.setdefault(rid, f)
    return [found[r] for r in sorted(found)]


# -- replay and presentation ---------------------------------------------------------

def replay_client(reg: Any, choice: ClientChoice, *, options: Options, strict: bool,
                  attempts: int = 1, schema_dir: Path | None = None) -> Any:
    from conformance.fuzz import regressions

    if not (choice.command or choice.adapter):  # the client the file was found on
        recorded = reg.header.get("replay_with")
        if not isinstance(recorded, dict) or not (recorded.get("client")
                                                  or recorded.get("client_adapter")):
            raise UsageError(f"{reg.path}: no --client or --client-adapter given and no client "
                         "recorded in the file")
        profile = recorded.get("client_profile")
        client = recorded.get("client")
        if isinstance(client, str):  # clients start in a scratch folder: paths made absolute
            client = shlex.join(os.path.abspath(w) if not os.path.isabs(w) and
                                os.path.exists(w) else w for w in shlex.split(client))
        choice = replace(choice, command=client, adapter=recorded.get("client_adapter"),
                         profile_path=Path(profile) if profile else None)
    target = client_target(choice)
    steps = reg.stream.get("steps")
    if not isinstance(steps, list):
        raise regressions.RegressionError(f"{reg.path}:1: header 'stream' has no 'steps' list")
    last = None
    for _ in range(max(1, attempts)):
        run = play_stream(target, reg.protocol, reg.stream, options=options, strict=strict,
                          schema_dir=schema_dir)
        bad = violations(run.findings, strict)
        # A fault now reported as another's consequence (an exit after a crash) still fails.
        same = [f for f in bad if f.requirement == reg.requirement
                or any(c.startswith(reg.requirement + ":") for c in f.consequences)]
        others = [f for f in bad if f not in same]
        last = regressions.Verdict(reg, regressions.STILL_FAILING if same else regressions.FIXED,
                                   same, others, run.note, run.transcript)
        if same:
            break
    return last


def describe_stream(stream: Mapping[str, Any]) -> str:
    steps = stream.get("steps", [])
    shown = []
    for s in steps:
        ident = ""
        if "id_repeat" in s:
            ident = f" id={s['id_repeat'].get('text')!r}x{s['id_repeat'].get('times')}"
        elif "id" in s:
            ident = f" id={json.dumps(s['id'], ensure_ascii=True)[:30]}"
        kind = next((k for k in ("agent", "thought", "user", "upsert", "tool_call") if k in s),
                    "?")
        shown.append(f"{kind}{ident}")
    history = stream.get("history") or ()
    before = (f"after {len(history)} earlier turn(s) on the same client process "
              f"({sum(len(h.get('steps', [])) for h in history)} update step(s)), "
              if history else "")
    return (f"{before}v{stream.get('protocol')} turn of {len(steps)} update step(s): "
            + "; ".join(shown))


__all__ = ["ClientChoice", "ClientTarget", "client_streams", "client_target", "describe_stream", "draw_turn",
           "play_stream", "replay_client", "run_client_fuzz"]
