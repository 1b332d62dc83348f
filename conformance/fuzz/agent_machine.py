# long: one Hypothesis state machine and the run around it (keeping, shrinking, signals)
"""Agent fuzzing: a Hypothesis state machine that plays the client against a live agent.

Rules are the client's moves: new sessions, prompts of generated content (with
legacy IDs, extra content blocks, and cancels at generated moments), switching
sessions, loading or resuming the current session on a fresh process or on the
same one, closing it. The invariant is the agent-side checkers: grading the
transcript so far yields no fail (and no warn under ``strict``). A rule never
judges anything itself.

Each generated run starts one agent process and reuses it for every step; only
a reload on a fresh process starts another. A spare process is started ahead
of need, so start-up overlaps the previous run's work. After each step the
suite pings the agent (an extension request any agent answers, if only with
"method not found") and grades once the answer is in, so a late update is
graded with the step that caused it.

A broken rule ends the generated run and is recorded; generation goes on to
find other broken rules. Afterwards each one is shrunk by replaying ever
smaller step lists (:mod:`conformance.fuzz.shrink`), and the minimal
counterexample's steps and transcript are kept. Each failure is stored the
moment it is recorded (``config.keeper``: :mod:`conformance.fuzz.keeper`),
shrinking stops at ``config.shrink_budget`` with the smallest so far, and a
signal (:class:`~conformance.fuzz.keeper.Interrupted`) ends the run with what is
held. A worker of ``fuzz --workers`` only generates (``generate_only``).

Against an LLM-backed agent behind the scripted model server
(``config.model``), each run also draws what the model says for the whole run
(:mod:`conformance.fuzz.model_side`); the script is shrunk after the steps.

This module stays about 500 lines on purpose: the machine's rules, the context
every machine of a run shares, and the search-then-shrink loop that reads and
updates that context (the failures held, the smallest so far while shrinking,
what a signal leaves) are one piece (each changes with the others); the step
vocabulary, playing, grading, shrinking, keeping and workers are modules of
their own.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import reject
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import Flaky, Unsatisfiable
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from conformance.agent.driver import DriveAborted, NotTestable
from conformance.agent.player import perform
from conformance.agent.steps import Step
from conformance.checks import Options
from conformance.fuzz import database, model_side, persistent
from conformance.fuzz.grading import Failure, FuzzResult, graded, merge_coverage, violations
from conformance.fuzz.keeper import Interrupted, received
from conformance.fuzz.player import (
    AgentTarget,
    FuzzDriver,
    Played,
    PromptCaps,
    Spawner,
    record_end,
    run_transcript,
)
from conformance.fuzz.prompts import prompt_specs
from conformance.fuzz.settings import Budget, Effort, StopFuzzing, hypothesis_settings
from conformance.fuzz.shrink import shrink_steps
from conformance.grading import Scope
from conformance.results import Finding
from conformance.strategies import model_scripts
from conformance.transcript import Transcript

MAX_SESSIONS = 3  # per generated run
MAX_RESTARTS = 2  # fresh processes after the first, per generated run


@dataclass
class AgentFuzzConfig:
    target: AgentTarget
    protocols: tuple[int, ...] = (1, 2)
    options: Options = field(default_factory=Options)
    strict: bool = False
    prespawn: bool = True
    max_failures: int | None = None  # stop generating once this many rules broke
    shrink_attempts: int = 60  # replays per shrunk failure, at most
    schema_dir: Path | None = None  # also validate each run against the official schemas
    model: Any = None  # a running ModelServer: every run also draws what the model says
    database: Any = None  # a Hypothesis example database: stored counterexamples first
    keeper: Any = None  # a fuzz.keeper.Keeper: each failure stored the moment it is found
    shrink_budget: float | None = None  # seconds for all shrinking (None: attempts only)
    generate_only: bool = False  # a worker: no shrinking, the run's parent shrinks
    replay_database: bool = True  # play the database's counterexamples first
    # generated runs one agent process serves (conformance.fuzz.persistent); 1: a fresh
    # process for every run (--fresh-process)
    runs_per_process: int = field(default_factory=persistent.default_runs_per_process)

    @property
    def scope(self) -> Scope:
        """What each generated run grades, recorded in its transcript's header: every
        agent rule under these options (the invariant's ``strict`` too)."""
        return Scope.of("agent", self.options, self.strict)


class _Context:
    """State shared by every machine of one run."""

    def __init__(self, config: AgentFuzzConfig, budget: Budget, cwd: str) -> None:
        self.config = config
        self.budget = budget
        self.cwd = cwd
        self.spawner = Spawner(config.target.command, env=config.target.env,
                               timeout=config.target.timeout, prespawn=config.prespawn)
        self.pool = (persistent.ProcessPool(self.spawner, config.runs_per_process)
                     if config.runs_per_process > 1 else None)
        self.unsupported: dict[int, str] = {}
        self.aborts: list[str] = []
        self.failures: dict[tuple[str, int], Failure] = {}
        self.coverage: dict[int, dict[str, Finding]] = {}

    def record(self, failure: Failure) -> None:
        self.budget.failure()
        old = self.failures.get(failure.key)
        if old is None or failure.size() < old.size():
            self.failures[failure.key] = failure
            if self.config.keeper is not None:
                self.config.keeper.found(failure)

    def enough(self) -> bool:
        limit = self.config.max_failures
        return (limit is not None and len(self.failures) >= limit) or (
            self.budget.spent())

    def cover(self, protocol: int, findings: Sequence[Finding]) -> None:
        merge_coverage(self.coverage.setdefault(protocol, {}), findings)


class AgentMachine(RuleBasedStateMachine):
    """One generated client session against the agent (see the module docstring)."""

    def __init__(self, ctx: _Context) -> None:
        super().__init__()
        self.ctx = ctx
        self.config = ctx.config
        ctx.budget.processes = ctx.spawner.started
        self.protocol = 0
        self.steps: list[Step] = []
        self.transcript: Transcript | None = None
        self.driver: FuzzDriver | None = None
        self.restarts = 0
        self.ended = False  # broke a rule, or could not go on: only `idle` applies
        self.busy = False  # a step is running (an exception left it: no teardown check)
        self.last: list[Finding] = []  # the findings of the last check
        self.model: dict[str, Any] | None = None  # this run's model script
        self.kept: persistent.Kept | None = None  # the reused process this run started on
        self.history: list[list[Step]] = []  # the steps of the earlier runs on that process

    # -- helpers --------------------------------------------------------------
    @property
    def book(self) -> FuzzDriver:
        """The driver keeps the run's sessions (created, current, open)."""
        assert self.driver is not None
        return self.driver

    @property
    def live(self) -> bool:
        return self.driver is not None and not self.ended

    def _do(self, step: Step) -> None:
        assert self.driver is not None
        self.steps.append(step)
        self.busy = True
        try:
            perform(self.driver, step, strict=False)
        except DriveAborted as exc:
            self.busy = False
            if self.transcript is not None:
                record_end(self.transcript, exc)
            if not self._check(sync=False):  # a hang or a crash is a TARGET finding
                self._note(f"aborted: {exc}")
        except NotTestable as exc:
            self.busy = False
            if self.transcript is not None:
                record_end(self.transcript, exc)
            # A failed negotiation is the agent's fault, as the suite grades it
            # (TARGET/negotiation/agent): a failure, and the version is settled.
            fault = getattr(exc, "every_case", False) and self._check(sync=False)
            if fault or step == "start":
                self.ctx.unsupported[self.protocol] = str(exc) if fault else \
                    f"not testable: {exc}"
                self.ended = True  # nothing more of it is graded
                if step == "start":
                    reject()
            if not fault:
                self._note(f"not testable: {exc}")
        self.busy = False

    def _note(self, why: str) -> None:
        self.ended = True
        if why not in self.ctx.aborts:
            self.ctx.aborts.append(why)

    def _grade(self, *, schema: bool = False) -> list[Finding]:
        assert self.transcript is not None
        return graded(self.transcript, self.config.schema_dir if schema else None)

    def _check(self, *, sync: bool = True, schema: bool = False) -> bool:
        """Grade the run so far (the official schema only at its end: it is the costly
        part); on a violation record it and end the run (True)."""
        if self.transcript is None or self.ended:
            return False
        if sync and self.driver is not None:
            self.driver.sync()
        self.last = self._grade(schema=schema)
        bad = violations(self.last, self.config.strict)
        if not bad:
            return False
        failure = Failure(bad[0], self.protocol, list(self.steps), self.transcript, bad,
                          found_steps=len(self.steps), model=self.model,
                          history=list(self.history))
        self._model_log()
        self.ctx.record(failure)
        self.ended = True
        return True

    # -- rules ----------------------------------------------------------------
    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        ctx = self.ctx
        protocol = data.draw(st.sampled_from(self.config.protocols), label="protocol")
        if ctx.enough():
            raise StopFuzzing()  # budget spent or enough rules broke: the search ends here
        if protocol in ctx.unsupported:
            reject()  # this version was refused once: never counts as a run
        ctx.budget.example_started()
        self.protocol = protocol
        if self.config.model is not None:
            self.model = data.draw(model_scripts(), label="model")
            model_side.use(self.config.model, self.model)
        target = self.config.target
        self.transcript = run_transcript(target, protocol, self.config.scope)
        self.driver = FuzzDriver(target.command, self.transcript, protocol=protocol,
                                 timeout=target.timeout, cwd=ctx.cwd, env=target.env,
                                 spawner=ctx.spawner)
        self._start()
        if self.live:
            self._do("new_session")  # every generated run needs a session to work in

    def _start(self) -> None:
        """The run's ``start``: on the process an earlier run left (persistent mode), or
        on a fresh one."""
        pool = self.ctx.pool
        kept = pool.take(self.protocol) if pool is not None else None
        if kept is None:
            self._do("start")
            return
        assert pool is not None and self.driver is not None
        self.kept, self.history = kept, kept.history
        self.steps.append("start")
        pool.adopt(self.driver, kept)
        self.ctx.budget.reused = pool.reused

    @precondition(lambda self: self.live and len(self.book.sessions) < MAX_SESSIONS)
    @rule()
    def new_session(self) -> None:
        self._do("new_session")

    # Prompts are what make an agent talk, so they get three rules' worth of the
    # choice (Hypothesis picks uniformly among the rules that apply). Rules are
    # ordered by name and shrink towards the first: a plain prompt.
    @precondition(lambda self: self.live and self.book.current_open())
    @rule(data=st.data())
    def a_prompt(self, data: st.DataObject) -> None:
        self._prompt(data, cancel=False)

    @precondition(lambda self: self.live and self.book.current_open())
    @rule(data=st.data())
    def another_prompt(self, data: st.DataObject) -> None:
        self._prompt(data, cancel=False)

    @precondition(lambda self: self.live and self.book.current_open())
    @rule(data=st.data())
    def prompt_and_cancel(self, data: st.DataObject) -> None:
        self._prompt(data, cancel=True)

    def _prompt(self, data: st.DataObject, *, cancel: bool) -> None:
        strategy = prompt_specs(kinds=self._block_kinds(), cancel=cancel)
        self._do({"prompt": data.draw(strategy, label="prompt")})

    @precondition(lambda self: self.live and len(self.book.sessions) > 1)
    @rule(data=st.data())
    def switch(self, data: st.DataObject) -> None:
        others = [i for i in range(len(self.book.sessions)) if i != self.book.current]
        index = data.draw(st.sampled_from(others), label="session")
        self._do({"switch": {"session": index}})

    # Load and resume come as two rules, on this process and on a fresh one: replay is
    # where IDs go wrong most, so it gets two rules' worth of the choice.
    @precondition(lambda self: self.live and self.book.current is not None
                  and bool(self._reloads()))
    @rule(data=st.data())
    def reload_here(self, data: st.DataObject) -> None:
        """Load or resume the current session on this connection."""
        self._do(data.draw(st.sampled_from(self._reloads()), label="how"))

    @precondition(lambda self: self.live and self.book.current is not None
                  and bool(self._reloads()) and self.restarts < MAX_RESTARTS)
    @rule(data=st.data())
    def reload_fresh(self, data: st.DataObject) -> None:
        """Load or resume the current session on a fresh process (a restart first)."""
        how = data.draw(st.sampled_from(self._reloads()), label="how")
        self.restarts += 1
        self._do("restart")
        if self.live:
            self._do(how)

    @precondition(lambda self: self.live and self.book.current_open() and self._caps().close)
    @rule()
    def close_session(self) -> None:
        self._do("close_session")

    @precondition(lambda self: not self.live or self._stuck())
    @rule()
    def idle(self) -> None:
        """Nothing left to do in this run (it broke a rule, or every session is closed)."""

    @invariant()
    def conformant(self) -> None:
        self._check()

    def _model_log(self) -> None:
        """What the model was asked and said in this run: into the transcript header."""
        if self.config.model is not None and self.transcript is not None:
            self.transcript.header["model_requests"] = model_side.requests_log(self.config.model)

    def teardown(self) -> None:
        driver = self.driver
        if driver is None:
            return
        try:
            if not (self.ended or self.busy):
                if not driver.sync():  # the agent did not answer pings: wait for its exit
                    driver.stop()
                if not self._check(sync=False, schema=True):  # e.g. a late update
                    self.ctx.cover(self.protocol, self.last)
                    self._model_log()
        finally:
            if self.ctx.pool is not None:  # persistent mode: kept for the next run if it can
                self.ctx.pool.give_back(driver, self.steps, self.kept, reusable=(
                    "the run broke a rule or was aborted" if self.ended or self.busy
                    else None))
            else:
                driver.retire()
            self.ctx.budget.processes = self.ctx.spawner.started
            self.ctx.budget.tick()

    # -- what the agent allows ------------------------------------------------
    def _info(self) -> Any:
        assert self.driver is not None
        return self.driver.info

    def _caps(self) -> PromptCaps:
        assert self.driver is not None
        return self.driver.caps

    def _block_kinds(self) -> tuple[str, ...]:
        caps = self._caps()
        return (("text", "resource_link") + (("resource",) if caps.embedded else ())
                + (("image",) if caps.image else ()))

    def _reloads(self) -> list[Step]:
        info = self._info()
        out: list[Step] = []
        if self.protocol >= 2:
            if info.resume:
                out += [{"resume": {"replay": "start"}}, {"resume": {"replay": "none"}}]
            return out
        if info.load_session:
            out.append("load")
        if info.resume:
            out.append({"resume": {"replay": "none"}})
        return out

    def _stuck(self) -> bool:
        return (not self.book.current_open() and len(self.book.sessions) >= MAX_SESSIONS
                and not self._reloads())


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
            stored = replay_stored(ctx, config, cwd) if config.replay_database else (0, 0)
            if stored[0]:
                result.notes.append(_stored_note(*stored))
            _search_and_shrink(ctx, config, effort, seed, result, cwd)
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


def replay_stored(ctx: _Context, config: AgentFuzzConfig, cwd: str) -> tuple[int, int]:
    """Play the counterexamples the shared database holds (:mod:`conformance.fuzz.database`)
    before generating: each one that still breaks a rule is recorded as found. How many
    were played, and how many still broke a rule."""
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
                                            scope=config.scope)
        replayed += 1
        if not played.playable:
            continue
        bad = violations(graded(played.transcript, config.schema_dir), config.strict)
        if bad:
            failing += 1
            ctx.record(Failure(bad[0], protocol, list(played.steps), played.transcript, bad,
                               found_steps=len(played.steps), model=model))
    return replayed, failing


class KeyedAgentMachine(AgentMachine):
    """Under a profile with prompt idempotency keys (acp-schema-1.21): one rule more. A
    class of its own, since any rule, even one whose precondition never holds, changes
    what a seed generates under the other profiles."""

    @precondition(lambda self: self.live and self.protocol == 2 and self.book.current_open()
                  and self.driver.last_prompt is not None)
    @rule()
    def response_lost(self) -> None:
        """The last prompt's response was lost: the client retries it with the same
        idempotencyKey (MID-V2-15)."""
        self._do({"prompt": {"text": "", "retry": True}})


def _search_and_shrink(ctx: _Context, config: AgentFuzzConfig, effort: Effort, seed: int,
                       result: FuzzResult, cwd: str) -> None:
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
                                            scope=config.scope, wait_exit=False)
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


__all__ = ["AgentFuzzConfig", "AgentMachine", "failure_of", "run_agent_fuzz"]
