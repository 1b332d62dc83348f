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

A broken rule ends the generated run and is recorded in the context every machine
of a run shares (:class:`_Context`); the run around the machines (the search,
stored counterexamples, shrinking, keeping, signals) is
:mod:`conformance.fuzz.agent_fuzz`.

Against an LLM-backed agent behind the scripted model server
(``config.model``), each run also draws what the model says for the whole run
(:mod:`conformance.fuzz.model_side`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from conformance.agent.faults import DriveAborted, NotTestable
from conformance.agent.player import perform
from conformance.agent.steps import Step
from conformance.checks import Options
from conformance.fuzz import model_side, persistent
from conformance.fuzz.grading import Failure, Streamed, graded, merge_coverage, violations
from conformance.fuzz.keeper import raise_pending
from conformance.fuzz.player import (
    AgentTarget,
    FuzzDriver,
    PromptCaps,
    Spawner,
    record_end,
    run_transcript,
)
from conformance.fuzz.prompts import prompt_specs
from conformance.fuzz.settings import Budget, StopFuzzing
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
        """Whether generation ends: enough rules broke, or the time budget is spent."""
        limit = self.config.max_failures
        return (limit is not None and len(self.failures) >= limit) or self.budget.spent()

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
        self.streamed: Streamed | None = None  # the checkers kept between steps (_check)

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
        if not schema and "ended" not in self.transcript.header:
            # After a step: the checkers fed only its entries say whether grading the run
            # so far could find a violation; only then is the whole run graded (Streamed).
            if self.streamed is None or self.streamed.transcript is not self.transcript:
                self.streamed = Streamed(self.transcript)
            if not self.streamed.may_violate(self.config.strict):
                return False
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
        raise_pending()  # a signal whose Interrupted was swallowed still ends generation
        ctx.budget.example_started()
        self.protocol = protocol
        if self.config.model is not None:
            self.model = data.draw(model_scripts(), label="model")
            model_side.use(self.config.model, self.model)
        target = self.config.target
        self.transcript = run_transcript(target, protocol, self.config.scope)
        self.driver = FuzzDriver(target.command, self.transcript, protocol=protocol,
                                 timeout=target.timeout, cwd=ctx.cwd, env=target.env,
                                 spawner=ctx.spawner, profile=self.config.options.profile)
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


__all__ = ["AgentFuzzConfig", "AgentMachine", "KeyedAgentMachine"]
