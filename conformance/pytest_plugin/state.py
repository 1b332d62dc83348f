"""The plugin's configuration: its options read once into the run, the plan and the baseline.

A bad option, case file, baseline, client profile or target command is a
``pytest.UsageError`` here, at configure time, never an error in every item.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conformance.baseline import Baseline
    from conformance.cases import Case
    from conformance.checks import Options
    from conformance.roles import Role


@dataclasses.dataclass
class State:
    role: str  # "agent" | "client" | "proxy": the side under test
    run: Any  # AgentRun, ClientRun or ProxyRun
    label: str
    plan: list[tuple[int, Case]]
    cases: list[Case]
    baseline: Baseline | None
    transcripts: Path | None  # --acp-transcripts; None: under pytest's basetemp
    suite: Any = None  # the role's engine.Suite over the selected cases
    engine: Any = None  # the run engine, made when the first case item runs
    controls: dict[int, Any] = dataclasses.field(default_factory=dict)  # workers.as_serial's
    # the role's suite builder (its entry's ``suite``): (run, cases, label, choices)
    build: Callable[..., Any] | None = None
    selected: list[Case] = dataclasses.field(default_factory=list)  # the cases --acp-case chose
    playing: bool = False  # an item is being played by the engine (a signal waits for it)
    signum: int = 0  # the signal that interrupted the session (0: none)

    def interrupt(self, signum: int, frame: Any) -> None:
        """SIGINT/SIGTERM: the engine's signals cut the case in progress (KeyboardInterrupt
        while it drives its target) and no case is played after it."""
        self.signum = self.signum or signum
        if self.engine is not None and self.engine.signals is not None:
            self.engine.signals.handle(signum, frame)

    def control(self, config: pytest.Config) -> Any:
        """``workers.as_serial``'s control: the plan's ``j``-th case played apart from the
        items (its transcripts under this process's temp dir), once."""
        from conformance.engine import Engine
        from conformance.lifecycle import Cutoff

        def play(j: int) -> Any:
            if j not in self.controls:
                factory = config._tmp_path_factory  # type: ignore[attr-defined]
                run = dataclasses.replace(self.engine.run, transcripts=Path(
                    factory.getbasetemp()) / "acp-controls")
                engine = Engine(self.suite_for(run), run)
                protocol, case = self.plan[j]
                self.controls[j] = engine.play(protocol, case, None, Cutoff(parent=engine.run_cut))
            return self.controls[j]

        return play

    def engine_for(self, config: pytest.Config, wanted: set[int] | None = None) -> Any:
        """The run's engine (one per process, so per xdist worker), made on first use: the
        items are played by it and report what it decided."""
        if self.engine is None:
            from conformance.engine import Engine

            run = dataclasses.replace(self.run, transcripts=transcripts_dir(config, self),
                                      deadline=config.getoption("acp_deadline"),
                                      repeat=config.getoption("acp_repeat"))
            self.suite = self.suite_for(run)
            self.engine = Engine(self.suite, run)
            self.engine.wanted = wanted
            # SIGINT/SIGTERM (the handler is the session's, reports.Reports): the case in
            # progress is cut and graded on what was recorded, as on the command line
            signals = self.engine.take_signals()
            if self.signum:  # a signal before the first case: none is played
                signals.handle(self.signum, None)
        return self.engine

    def suite_for(self, run: Any) -> Any:
        """The role's suite over the selected cases, with the run the items use (their
        transcripts, --acp-deadline, --acp-repeat): the plan the items were collected from."""
        assert self.build is not None
        suite = self.build(run, self.selected, self.label, self.cases)
        assert suite.plan == self.plan  # the same cases, the same plan
        return suite


STATE = pytest.StashKey[State]()


def load_state(config: pytest.Config, role: Role, values: Mapping[str, Any]) -> State:
    """The run of ``role`` (an entry of :data:`conformance.roles.ROLES`) from the plugin's
    option ``values`` (by table name, checked by the option table in pytest_configure):
    the one builder of every role."""
    from conformance import baseline as baselinemod
    from conformance import cases as casemod
    from conformance.roles import Given, make_run
    from conformance.settings.table import spelling
    from conformance.transport import TargetCommandError
    from conformance.usage import UsageError, env_pairs

    opt = config.getoption
    command = role.target(values)  # a command, or an in-process adapter
    try:
        role.check(values, spelling("plugin"))
        all_cases = casemod.load_dir(Path(opt("acp_cases")) if opt("acp_cases") else None)
        cases = casemod.select(all_cases, opt("acp_case"))
        base = (baselinemod.load(Path(opt("acp_baseline")), [c.id for c in all_cases])
                if opt("acp_baseline") else None)
        env = env_pairs(opt("acp_agent_env"), "--acp-agent-env")
        protocols = [1, 2] if opt("acp_protocol") == "both" else [int(opt("acp_protocol"))]
        shared = {"protocols": protocols, "options": _options(opt("acp_profile")),
                  "timeout": opt("acp_timeout"), "strict": opt("acp_strict"), "env": env,
                  "masker": _masker(env)}
        run = make_run(role, Given(values, command, shared))
        suite = role.suite(run, cases, command, all_cases)
        from conformance.engine import check_plan

        check_plan(suite, protocols)  # a selection that plans nothing: a usage error
    except (casemod.CaseError, baselinemod.BaselineError, TargetCommandError, ValueError,
            UsageError) as exc:
        raise pytest.UsageError(f"acp-conformance: {exc}") from None
    transcripts = Path(opt("acp_transcripts")) if opt("acp_transcripts") else None
    return State(role.name, run, command, suite.plan, all_cases, base, transcripts, suite=suite,
                 build=role.suite, selected=list(cases))


def _masker(env: dict[str, str]) -> Any:
    """Secrets of ``--acp-agent-env`` and of the environment, masked as the command line
    masks them (docs/masking.md)."""
    import os

    from conformance import masking

    return masking.build(environ=os.environ, target_env=env)


def _options(profile: str | None) -> Options:
    from conformance import profiles
    from conformance.checks import Options

    try:
        return Options(profile=profiles.get(profile or profiles.DEFAULT_PROFILE))
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None


def transcripts_dir(config: pytest.Config, state: State) -> Path:
    if state.transcripts is not None:
        return state.transcripts
    # pytest's own temp dir (one per xdist worker); the fixture API is not reachable from an Item.
    factory = config._tmp_path_factory  # type: ignore[attr-defined]
    return Path(factory.getbasetemp()) / "acp-transcripts"
