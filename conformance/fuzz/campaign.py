"""Fuzz targets as Hypothesis tests: what ``pytest --acp-fuzz`` collects and HypoFuzz runs.

The ``fuzz`` subcommand runs one search for one budget in one process. A
*campaign* runs the same engines as ordinary Hypothesis tests, one per role and
protocol version (:func:`agent_test`, :func:`client_test`), so pytest runs each
once and HypoFuzz (``hypothesis fuzz -n N -- --acp-fuzz ...``) runs them for as
long as it is left running, on N processes, sharing one example database.

A test fails when a generated run breaks a rule, as any Hypothesis test does, so
Hypothesis (or HypoFuzz) keeps the failing example in its database and replays
it first next time. Before the test fails, :class:`Campaign` does what ``fuzz``
does with a failure: shrinks it by replaying ever smaller step lists (agents)
or streams (clients), confirms a client's cause against its control, and saves
the minimal counterexample to the regression library. The file name is the
fingerprint and is created exclusively (:func:`conformance.fuzz.regressions.save`),
so several workers that find the same bug write it once. Each process shrinks
a broken rule once (per protocol); later failures of that rule only fail the test.

Processes started for a campaign (the agent's spare processes, the scratch
working directory) live as long as the Python process: HypoFuzz collects the
tests with a pytest session that ends before fuzzing starts.
"""

from __future__ import annotations

import atexit
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.checks import Options
from conformance.fuzz.grading import Failure, FuzzResult, graded, violations
from conformance.fuzz.settings import Budget, Effort
from conformance.fuzz.tracing import untraced
from conformance.results import Finding

if TYPE_CHECKING:
    from hypothesis import settings as HypothesisSettings

COUNT_ENV = "ACP_CAMPAIGN_COUNT"  # a file: one line appended per execution (bench/campaign.py)


def _count() -> None:
    """With ``$ACP_CAMPAIGN_COUNT`` set, note one execution (a short append: atomic, so
    every worker of a campaign can share the file)."""
    import os

    path = os.environ.get(COUNT_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{time.time():.3f}\n".encode())
        finally:
            os.close(fd)


AGENT_TEST = "agent_v{protocol}"
CLIENT_TEST = "client_v{protocol}"


@dataclass
class Handled:
    """What the campaign did with one broken rule in this process."""

    failure: Failure  # the shrunk (and, for clients, controlled) counterexample
    fingerprint: str
    path: Path | None  # the regression file (None: --no-save)
    existed: bool  # another worker (or an earlier campaign) had written it


@dataclass
class Campaign:
    """One target under fuzzing as Hypothesis tests (see the module docstring)."""

    role: str  # "agent" | "client"
    effort: Effort
    options: Options = field(default_factory=Options)
    strict: bool = False
    schema_dir: Path | None = None
    regressions: Path | None = None  # None: found failures are not saved
    agent: Any = None  # AgentFuzzConfig (role agent)
    client: Any = None  # ClientTarget (role client)
    database: Any = None  # the shared example database: shrunk counterexamples kept there
    handled: dict[tuple[str, int], Handled] = field(default_factory=dict)
    on_saved: Callable[[Handled], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _cwd: tempfile.TemporaryDirectory[str] | None = None
    _ctx: Any = None

    # -- what the tests share ----------------------------------------------------
    @property
    def target_label(self) -> str:
        return str(self.agent.target.label if self.role == "agent" else self.client.label)

    @property
    def masker(self) -> Any:
        return self.agent.target.masker if self.role == "agent" else self.client.masker

    def cwd(self) -> str:
        if self._cwd is None:
            self._cwd = tempfile.TemporaryDirectory(prefix="acp-campaign-")
            atexit.register(self.close)
        return self._cwd.name

    def context(self) -> Any:
        """The agent machines' shared context (spawner, budget), built on first use."""
        if self._ctx is None:
            from dataclasses import replace

            from conformance.fuzz.agent_machine import _Context

            # no clock: Hypothesis' max_examples (or HypoFuzz) says when a campaign ends
            budget = Budget(replace(self.effort, time_budget=None), label="agent", stream=None)
            class Context(_Context):
                latest: Failure | None = None  # the last failure recorded (by this thread)

                def record(self, failure: Failure) -> None:
                    super().record(failure)
                    self.latest = failure

            self._ctx = Context(self.agent, budget, self.cwd())
        return self._ctx

    def close(self) -> None:
        if self._ctx is not None:
            self._ctx.spawner.close()
            self._ctx = None
        if self._cwd is not None:
            self._cwd.cleanup()
            self._cwd = None

    def result(self) -> FuzzResult:
        """A FuzzResult that names the target, for the regression headers."""
        replay_with = self.client.replay_with() if self.role == "client" else {}
        return FuzzResult(self.role, self.target_label, 0, self.effort,
                          replay_with=replay_with)

    # -- a failure: shrink, confirm, save once -----------------------------------
    def handle(self, failure: Failure) -> Handled:
        """Shrink and confirm ``failure`` and save it, once per rule and version in this
        process (later failures of the same rule get what the first one got)."""
        with self._lock:  # one shrink at a time: it replays against the same target
            done = self.handled.get(failure.key)
            if done is not None:
                return done
            shrunk = self._shrink(failure)
            handled = self._save(shrunk)
            self.handled[failure.key] = handled
        if self.on_saved is not None:
            self.on_saved(handled)
        return handled

    def _shrink(self, failure: Failure) -> Failure:
        if self.role == "agent":
            from conformance.fuzz.agent_fuzz import shrink_failure

            ctx = self.context()
            best = shrink_failure(failure, self.agent, self.cwd(), ctx.spawner)
            best.findings = violations(graded(best.transcript, self.schema_dir),
                                       self.strict) or best.findings
            return best
        from conformance.fuzz.client_fuzz import confirm_cause, delete_steps

        shrunk = delete_steps(failure, self.client, self.options, self.strict, self.schema_dir)
        return confirm_cause(shrunk, self.client, self.options, self.strict, self.schema_dir)

    def _save(self, f: Failure) -> Handled:
        from hypothesis import settings

        from conformance.fuzz import database, regressions

        # the database in force: --acp-hypothesis-db, or a settings profile's (Redis, ...)
        database.save(self.database if self.database is not None else settings().database, f)
        fp = regressions.failure_fingerprint(f)
        if self.regressions is None:
            return Handled(f, fp, None, False)
        masker = self.masker
        header = regressions.regression_header(f, self.result(), self.options, self.strict)
        header["seed"] = None  # Hypothesis (or HypoFuzz) chose the inputs: no seed repeats them
        header["found_by"] = "campaign"  # pytest --acp-fuzz, under HypoFuzz or not
        if masker is not None:
            header = masker.data(header)
        saved = regressions.save(self.regressions, fingerprint_=fp, header=header,
                                 entries=f.transcript.entries,
                                 cwd=regressions.session_cwd(f.transcript))
        return Handled(f, fp, saved.path, saved.existed)


class CampaignFailure(AssertionError):
    """A generated run broke a rule; the message names the rule and the regression file."""

    def __init__(self, handled: Handled, found: Failure, masker: Any = None) -> None:
        f = handled.failure
        where = (f"{'already in' if handled.existed else 'saved to'} {handled.path}"
                 if handled.path is not None else "not saved")
        message = (f"{found.requirement} (v{found.protocol}): {found.finding.message}; "
                   f"shrunk to {_size(f)}, fingerprint {handled.fingerprint}, {where}")
        super().__init__(masker.text(message) if masker is not None else message)
        self.handled = handled


def _size(f: Failure) -> str:
    if f.role == "agent":
        return f"{len(f.steps)} step(s)"
    return f"{len(f.stream['steps'])} stream step(s)"


_FAILURE_TYPES: dict[str, type[CampaignFailure]] = {}


def failure_type(rule_id: str) -> type[CampaignFailure]:
    """One exception type per rule, so Hypothesis and HypoFuzz tell broken rules apart."""
    cls = _FAILURE_TYPES.get(rule_id)
    if cls is None:
        cls = _FAILURE_TYPES[rule_id] = type(f"RuleBroken[{rule_id}]", (CampaignFailure,), {})
    return cls


def campaign_settings(effort: Effort) -> HypothesisSettings:
    """The tests' settings. The database is left to the settings profile in force (the
    plugin loads one for ``--acp-hypothesis-db``), because HypoFuzz fuzzes only tests
    whose database is the default one; the health check on nested ``@given`` stays on
    (HypoFuzz skips tests that suppress it). No Hypothesis shrinking under pytest: the
    campaign shrinks by replaying steps, which is what makes a counterexample replayable."""
    from hypothesis import HealthCheck, Phase, Verbosity, settings

    return settings(
        max_examples=effort.max_examples,
        stateful_step_count=effort.steps,
        deadline=None,
        derandomize=False,
        verbosity=Verbosity.quiet,
        report_multiple_bugs=True,
        print_blob=False,
        suppress_health_check=[h for h in HealthCheck if h is not HealthCheck.nested_given],
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
    )


def agent_test(campaign: Campaign, protocol: int) -> Callable[..., None]:
    """The agent state machine over one protocol version, as a ``@given`` test."""
    from dataclasses import replace

    from hypothesis.stateful import get_state_machine_test

    from conformance.fuzz.agent_machine import AgentMachine

    config = replace(campaign.agent, protocols=(protocol,))

    class CampaignMachine(AgentMachine):
        def __init__(self) -> None:
            _count()
            ctx = campaign.context()
            super().__init__(ctx)
            self.config = config  # this test's version; the context is shared

        def _grade(self, *, schema: bool = False) -> list[Finding]:
            with untraced():
                return super()._grade(schema=schema)

        def _check(self, *, sync: bool = True, schema: bool = False) -> bool:
            if not super()._check(sync=sync, schema=schema):
                return False
            found = getattr(self.ctx, "latest", None)  # what super()._check just recorded
            assert found is not None
            handled = campaign.handle(found)
            raise failure_type(found.requirement)(handled, found, campaign.masker)

    CampaignMachine.__name__ = CampaignMachine.__qualname__ = f"AgentV{protocol}"
    # untyped before Hypothesis 6.157.1 (the campaign extra's bound): no ignore is left unused
    test: Callable[..., None] = get_state_machine_test(  # type: ignore[no-untyped-call,unused-ignore]
        CampaignMachine, settings=campaign_settings(campaign.effort))
    test.__name__ = test.__qualname__ = AGENT_TEST.format(protocol=protocol)
    return test


def client_test(campaign: Campaign, protocol: int) -> Callable[..., None]:
    """The client stream fuzzer over one protocol version, as a ``@given`` test."""
    from hypothesis import given
    from hypothesis import strategies as st

    from conformance.fuzz.client_fuzz import draw_turn, play_stream, stream_of

    options = campaign.options

    @campaign_settings(campaign.effort)
    @given(st.data())
    def test(data: Any) -> None:
        _count()
        proto, steps = draw_turn(data, (protocol,), options.profile.interleave_allowed)
        stream = stream_of(proto, steps)
        run = play_stream(campaign.client, proto, stream, options=options,
                          strict=campaign.strict, schema_dir=campaign.schema_dir)
        bad = violations(run.findings, campaign.strict)
        if not bad:
            return
        found = Failure(bad[0], proto, [], run.transcript, bad, role="client", stream=stream)
        handled = campaign.handle(found)
        raise failure_type(found.requirement)(handled, found, campaign.masker)

    test.__name__ = test.__qualname__ = CLIENT_TEST.format(protocol=protocol)
    return test


def tests_of(campaign: Campaign, protocols: tuple[int, ...]) -> list[Callable[..., None]]:
    make = agent_test if campaign.role == "agent" else client_test
    return [make(campaign, p) for p in protocols]


__all__ = ["Campaign", "CampaignFailure", "Handled", "agent_test", "campaign_settings",
           "client_test", "failure_type", "tests_of"]
