"""Agent fuzzing, the run around the state machine (:mod:`conformance.fuzz.agent_machine`):
stored counterexamples replayed first, the search, and the shrinking of every broken rule.

A broken rule ends the generated run and is recorded; generation goes on to
find other broken rules. Afterwards each one is shrunk by replaying ever
smaller step lists (:mod:`conformance.fuzz.shrink`), and the minimal
counterexample's steps and transcript are kept. Each failure is stored the
moment it is recorded (``config.keeper``: :mod:`conformance.fuzz.keeper`),
shrinking stops at ``config.shrink_budget`` with the smallest so far, and a
signal (:class:`~conformance.fuzz.keeper.Interrupted`) ends the run with what is
held. A worker of ``fuzz --workers`` only generates (``generate_only``).
Behind the scripted model server (``config.model``) the model's script is shrunk
after the steps.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Flaky, Unsatisfiable
from hypothesis.stateful import run_state_machine_as_test

from conformance.agent.steps import Step
from conformance.fuzz import database, model_side, persistent
from conformance.fuzz.agent_machine import (
    AgentFuzzConfig,
    AgentMachine,
    KeyedAgentMachine,
    _Context,
)
from conformance.fuzz.grading import Failure, FuzzResult, graded, violations
from conformance.fuzz.keeper import Interrupted, received
from conformance.fuzz.player import Played, Spawner
from conformance.fuzz.settings import Budget, Effort, StopFuzzing, hypothesis_settings
from conformance.fuzz.shrink import shrink_steps


def run_agent_fuzz(config: AgentFuzzConfig, effort: Effort, seed: int, *,
                   progress: Any = None,
                   on_failure: Callable[[Failure], None] | None = None) -> FuzzResult:
    """Fuzz one agent: generate runs until ``effort`` is spent, then shrink every broken
    rule (per protocol) to its minimal counterexample."""
    budget = Budget(effort, label="agent", stream=progress)
    target = config.target
    result = FuzzResult("agent", target.label, seed, effort, protocols=config.protocols)
    with tempfile.TemporaryDirectory(prefix="acp-fuzz-") as cwd:
        ctx = _Context(config, budget, cwd)
        try:
            stored = replay_stored(ctx) if config.replay_database else (0, 0)
            if stored[0]:
                result.notes.append(_stored_note(*stored))
            _search_and_shrink(ctx, effort, seed, result)
        except Interrupted as exc:  # keep what is held: the smallest of each rule so far
            result.interrupted = exc.signum
            done = {f.key for f in result.failures}
            result.unshrunk = set(ctx.failures) - done
            result.failures += [f for k, f in sorted(ctx.failures.items()) if k not in done]
        finally:
            if ctx.pool is not None:
                ctx.pool.close()
                result.reused = ctx.pool.reused
            ctx.spawner.close()  # the retired processes have ended: transcripts complete
            budget.done()
    result.examples = budget.examples
    result.processes = ctx.spawner.started
    result.elapsed = budget.elapsed
    result.time_to_first_failure = budget.first_failure
    result.coverage = ctx.coverage
    for p, why in sorted(ctx.unsupported.items()):
        result.notes.append(f"v{p}: {why}")
    for why in ctx.aborts:
        result.notes.append(why)
    for f in result.failures:
        f.findings = violations(graded(f.transcript, config.schema_dir),
                                config.strict) or f.findings
        if config.keeper is None:  # else the command keeps it (keeper.final)
            database.save(config.database, f)
        if on_failure is not None:
            on_failure(f)
    return result


def _stored_note(replayed: int, failing: int) -> str:
    return (f"replayed {replayed} counterexample(s) from the example database first: "
            f"{failing} still failing")


def replay_stored(ctx: _Context) -> tuple[int, int]:
    """Play the counterexamples the shared database holds (:mod:`conformance.fuzz.database`)
    before generating: each one that still breaks a rule is recorded as found. How many
    were played, and how many still broke a rule."""
    config, cwd = ctx.config, ctx.cwd
    replayed = failing = 0
    for stored in database.counterexamples(config.database, "agent"):
        protocol = stored["protocol"]
        if protocol not in config.protocols or ctx.enough():
            continue
        model = stored.get("model") if config.model is not None else None
        ctx.budget.example_started()
        played = model_side.play_with_model(config.target, config.model, protocol,
                                            stored["steps"], model, cwd=cwd,
                                            spawner=ctx.spawner, wait_exit=False,
                                            scope=config.scope,
                                            profile=config.options.profile)
        replayed += 1
        if not played.playable:
            continue
        bad = violations(graded(played.transcript, config.schema_dir), config.strict)
        if bad:
            failing += 1
            ctx.record(Failure(bad[0], protocol, list(played.steps), played.transcript, bad,
                               found_steps=len(played.steps), model=model))
    return replayed, failing


def _search_and_shrink(ctx: _Context, effort: Effort, seed: int, result: FuzzResult) -> None:
    config, cwd = ctx.config, ctx.cwd
    base: type[AgentMachine] = (KeyedAgentMachine if config.options.profile.idempotency_keys
                                else AgentMachine)

    class Machine(base):  # type: ignore[valid-type,misc]  # bound per profile
        # Hypothesis builds each machine itself: bind the context
        def __init__(self) -> None:
            super().__init__(ctx)

    try:
        persistent.generate(lambda s, e: run_state_machine_as_test(  # type: ignore[no-untyped-call,unused-ignore]
            hypothesis_seed(s)(Machine), settings=hypothesis_settings(e, shrink=False)),
            ctx, effort, seed, result.notes)
    except StopFuzzing:
        pass
    except Flaky:  # the agent answered a repeated run differently (timing): keep what we have
        if received() is not None:  # a signal, not the agent, made the repeat differ
            raise Interrupted(received() or 0) from None
        result.notes.append("generation stopped early: the agent did not repeat a run "
                            "the same way (its behaviour depends on timing)")
    except Unsatisfiable:
        if not ctx.failures:
            why = "; ".join(list(ctx.unsupported.values()) + ctx.aborts)
            result.notes.append(f"no run could be driven: {why or 'every run was rejected'}")
    if config.generate_only:  # a worker: the run's parent shrinks
        result.failures = sorted(ctx.failures.values(), key=lambda f: f.key)
        return
    budget = config.shrink_budget
    deadline = None if budget is None else time.monotonic() + budget
    for failure in sorted(ctx.failures.values(), key=lambda f: f.key):
        result.failures.append(shrink_failure(failure, config, cwd, ctx.spawner,
                                              deadline=deadline, stream=ctx.budget.stream,
                                              hold=ctx.failures))
        if deadline is not None and time.monotonic() >= deadline:
            result.notes.append(f"shrinking {failure.requirement} (v{failure.protocol}) "
                                f"stopped at the shrink budget ({budget:g} s): the smallest "
                                "counterexample found so far is kept")
        ctx.budget.tick()


def shrink_failure(failure: Failure, config: AgentFuzzConfig, cwd: str,
                   spawner: Spawner, *, deadline: float | None = None, stream: Any = None,
                   hold: dict[tuple[str, int], Failure] | None = None) -> Failure:
    """Replay ever smaller step lists while the same rule still breaks; then, behind a
    model server, ever smaller model scripts with the shrunk steps, and the steps once
    more with the shrunk script (a smaller script can need fewer steps). No replay starts
    after ``deadline``; each smaller counterexample is printed to ``stream`` and put in
    ``hold``, so a stopped run keeps the smallest so far."""
    name = f"{failure.requirement} (v{failure.protocol})"
    _say(stream, f"shrinking {name}: {len(failure.steps)} steps")

    def smaller(steps: list[Step], best: Failure | None, attempts: int) -> None:
        if best is None:
            return
        best.found_steps = failure.found_steps
        if hold is not None:
            hold[failure.key] = best
        _say(stream, f"shrinking {name}: {len(steps)} steps after {attempts} replay(s)")

    def fails(steps: list[Step], model: dict[str, Any] | None = failure.model
              ) -> Failure | None:
        played = model_side.play_with_model(config.target, config.model, failure.protocol,
                                            steps, model, cwd=cwd, spawner=spawner,
                                            scope=config.scope, wait_exit=False,
                                            profile=config.options.profile)
        return failure_of(played, failure.requirement, config.strict, config.schema_dir,
                          model=model)

    if failure.history:  # found on a reused process: replayed on a fresh one first
        failure = persistent.confirm(failure, fails, max_attempts=config.shrink_attempts,
                                     deadline=deadline, say=lambda line: _say(stream, line))
        if failure.history_steps or failure.unconfirmed:
            if hold is not None:
                hold[failure.key] = failure
            return failure
    shrunk = shrink_steps(failure.steps, failure, fails, max_attempts=config.shrink_attempts,
                          deadline=deadline, on_smaller=smaller)
    best, attempts = shrunk.result, shrunk.attempts
    if config.model is not None and best.model is not None:
        steps = best.steps
        _script, by_model = model_side.shrink_script(
            best.model, best, lambda m: fails(steps, m), max_attempts=config.shrink_attempts,
            deadline=deadline)
        script = by_model.result.model
        if hold is not None:
            hold[failure.key] = by_model.result
        again = shrink_steps(by_model.result.steps, by_model.result,
                             lambda s: fails(s, script),
                             max_attempts=max(1, config.shrink_attempts // 4),
                             deadline=deadline, on_smaller=smaller)
        best, attempts = again.result, attempts + by_model.attempts + again.attempts
    best.found_steps = failure.found_steps
    best.shrink_attempts = attempts
    _say(stream, f"shrinking {name}: done, {len(best.steps)} steps "
                 f"({attempts} replay(s))")
    return best


def _say(stream: Any, line: str) -> None:
    if stream is not None:
        stream.write(line + "\n")
        stream.flush()


def failure_of(played: Played, requirement: str, strict: bool,
               schema_dir: Path | None = None, *, model: dict[str, Any] | None = None
               ) -> Failure | None:
    """The failure a play shows for ``requirement`` (None if it does not break it), graded
    from what its transcript's header records."""
    if not played.playable:
        return None
    bad = violations(graded(played.transcript, schema_dir), strict)
    match = [f for f in bad if f.requirement == requirement]
    if not match:
        return None
    return Failure(match[0], played.protocol, list(played.steps), played.transcript, bad,
                   model=model)


__all__ = ["failure_of", "replay_stored", "run_agent_fuzz", "shrink_failure"]
