"""``--acp-fuzz``: the fuzz engines as Hypothesis tests, for pytest and for HypoFuzz.

With ``--acp-fuzz`` the plugin collects, instead of the cases, one Hypothesis
test per role and protocol version (``acp-fuzz::agent_v1``, ...), built by
:mod:`conformance.fuzz.campaign`. ``pytest --acp-fuzz`` runs each once (the
effort's number of examples); ``hypothesis fuzz -n N -- --acp-fuzz ...`` runs
them as a HypoFuzz campaign. The items are plain ``pytest.Function`` items of
``@given`` functions, which is what HypoFuzz fuzzes.

``--acp-hypothesis-db DIR|URL`` loads a Hypothesis settings profile whose example
database is that folder, a Redis (``redis://host:port/db``) or a CI job's uploaded
database (``github:OWNER/REPO[/ARTIFACT]``, read-only, writes going to Hypothesis'
local folder): see :func:`conformance.fuzz.database.open_database`. Every worker,
every campaign and every machine on it share what was found; HypoFuzz requires the tests' database to be the
default one, which a profile makes it. Without the option a campaign uses the
profile in force, or Hypothesis' default folder where that profile has no database
(its ``ci`` profile, loaded wherever ``CI`` is set).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PROFILE = "acp-conformance-fuzz"


@dataclass
class FuzzState:
    campaign: Any  # conformance.fuzz.campaign.Campaign
    protocols: tuple[int, ...]


FUZZ = pytest.StashKey[FuzzState]()


def configure(config: pytest.Config) -> bool:
    """Read the fuzz options (True if ``--acp-fuzz`` is on); usage errors at configure time."""
    if not config.getoption("acp_fuzz"):  # its options without it: the table's "needs"
        return False
    from conformance.usage import UsageError

    try:
        config.stash[FUZZ] = _build(config)
    except (UsageError, ValueError) as exc:
        raise pytest.UsageError(f"acp-conformance: {exc}") from None
    if not hasattr(config, "workerinput"):  # an interrupted session exits 128+N
        config.pluginmanager.register(Interrupted(), "acp-conformance-fuzz-interrupted")
    return True


class Interrupted:
    """SIGINT or SIGTERM during ``--acp-fuzz``: the run in progress stops (KeyboardInterrupt:
    its target ends) and the session exits 128+N as the ``fuzz`` command does (SIGTERM used
    to kill the session with no word; SIGINT gave pytest's own 2); the terminal says
    ``verdict: INTERRUPTED by SIG...`` and ``--junitxml``'s test suite properties say
    ``verdict`` interrupted and ``interrupted`` (the signal). Later signals are noted only."""

    def __init__(self) -> None:
        import signal
        import threading

        from conformance.lifecycle import QuietDrops

        self.signum = 0
        self._old: dict[int, Any] = {}
        self._quiet = QuietDrops(KeyboardInterrupt)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._interrupt)

    def _interrupt(self, signum: int, frame: Any) -> None:
        from conformance.fuzz.keeper import noted

        noted(signum)  # should this raise be dropped, the next run raises it (timing_proof)
        if not self.signum:
            self.signum = signum
            raise KeyboardInterrupt

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        if self.signum:
            from conformance.pytest_plugin.reports import showable

            showable(excinfo)

    def pytest_sessionstart(self) -> None:
        if self._old:  # after pytest's own hook: a raise Python drops (in a gc callback) is
            self._quiet.start()  # noted, and the next run raises it: no warning for it

    def pytest_unconfigure(self) -> None:
        import signal

        from conformance.fuzz.keeper import settled

        settled()
        self._quiet.stop()
        for sig, old in self._old.items():
            signal.signal(sig, old)

    @pytest.hookimpl(tryfirst=True)  # before --junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.signum:
            return
        import signal

        session.exitstatus = 128 + self.signum
        from _pytest.junitxml import xml_key  # pytest's own writer; no public handle to it

        xml = session.config.stash.get(xml_key, None)
        if xml is not None:
            xml.add_global_property("verdict", "interrupted")
            xml.add_global_property("interrupted", signal.Signals(self.signum).name)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.signum:
            import signal

            name = signal.Signals(self.signum).name
            terminalreporter.section("acp-conformance")
            terminalreporter.write_line(f"verdict: INTERRUPTED by {name}: not a pass, the "
                                        "fuzzer stopped before its runs were done")


def _build(config: pytest.Config) -> FuzzState:
    from conformance.fuzz.campaign import Campaign
    from conformance.fuzz.settings import get_effort
    from conformance.pytest_plugin.state import _masker, _options
    from conformance.usage import env_pairs

    opt = config.getoption
    agent, client, adapter = opt("acp_agent"), opt("acp_client"), opt("acp_client_adapter")
    if not (agent or client or adapter):
        raise ValueError("--acp-fuzz needs --acp-agent CMD, --acp-client CMD or "
                         "--acp-client-adapter MODULE:FACTORY")
    env = env_pairs(opt("acp_agent_env"), "--acp-agent-env")  # checked by the table, as
    # are both sides at once and --acp-model-server without --acp-agent (pytest_configure)
    masker = _masker(env)
    protocols = (1, 2) if opt("acp_protocol") == "both" else (int(opt("acp_protocol")),)
    options = _options(opt("acp_profile"))
    if opt("acp_hypothesis_db"):
        db = _use_database(str(opt("acp_hypothesis_db")))
    else:
        db = _campaign_database()
    regressions = Path(opt("acp_regressions")) if opt("acp_regressions") else None
    campaign = Campaign("agent" if agent else "client", get_effort(opt("acp_fuzz_effort")),
                        options=options, strict=opt("acp_strict"), regressions=regressions,
                        database=db)
    if agent:
        import atexit

        from conformance.fuzz.agent_machine import AgentFuzzConfig
        from conformance.fuzz.player import AgentTarget
        from conformance.modelserver.cases import prepare_run
        from conformance.transport import TargetCommandError, split_command

        model, command, full_env = prepare_run(agent, env, [], enabled=opt("acp_model_server"),
                                               script=None, masker=masker)
        if model is not None:  # lives as long as the campaign's process (HypoFuzz workers)
            atexit.register(model.stop)
        try:
            target = AgentTarget(split_command(str(command)), agent, full_env,
                                 opt("acp_timeout"), masker)
        except TargetCommandError as exc:
            raise ValueError(str(exc)) from None
        # A fresh process per run: Hypothesis replays a failing example and must see it
        # fail again, which a run on a process earlier runs shaped need not do.
        campaign.agent = AgentFuzzConfig(target, protocols=protocols, options=options,
                                         strict=opt("acp_strict"), model=model,
                                         runs_per_process=1)
    else:
        from conformance.fuzz.client_fuzz import ClientChoice, client_target

        profile = opt("acp_client_profile")
        campaign.client = client_target(ClientChoice(
            client, adapter, Path(profile) if profile else None, env, opt("acp_timeout"),
            masker))
    return FuzzState(campaign, protocols)


def _use_database(spec: str) -> Any:
    """Make the database ``spec`` names (a folder or a URL) the example database of every
    Hypothesis test of this process (ValueError: it cannot be reached)."""
    from hypothesis import settings

    from conformance.fuzz.database import open_database

    db = open_database(spec, flag="--acp-hypothesis-db")
    settings.register_profile(PROFILE, database=db)
    settings.load_profile(PROFILE)
    return db


def _campaign_database() -> Any:
    """Under HypoFuzz with no ``--acp-hypothesis-db``: the default example folder when the
    profile in force has no database. Hypothesis loads its ``ci`` profile (no database)
    wherever ``CI`` is set, and HypoFuzz's workers cannot start without one; a campaign
    in CI keeps its examples where it would anywhere else. Under plain pytest the profile's
    choice stands (None: the profile's database is used)."""
    import sys
    import warnings

    from hypothesis import settings

    if "hypofuzz" not in sys.modules or settings().database is not None:
        return None
    from hypothesis import errors
    from hypothesis.configuration import storage_directory

    with warnings.catch_warnings():  # the folder is wanted now: the workers start on it
        warnings.simplefilter("ignore", getattr(errors, "HypothesisSideeffectWarning", Warning))
        folder: Any = storage_directory("examples")  # a Path, or a lazy holder of one
        return _use_database(str(Path(getattr(folder, "path", folder))))


class AcpFuzz(pytest.Collector):
    """The fuzz tests of one target: one per protocol version."""

    def collect(self) -> list[pytest.Item]:
        from conformance.fuzz.campaign import tests_of

        state = self.config.stash[FUZZ]
        items: list[pytest.Item] = []
        for protocol, test in zip(state.protocols, tests_of(state.campaign, state.protocols),
                                  strict=True):
            item = pytest.Function.from_parent(self, name=test.__name__,
                                               callobj=timing_proof(test, state.campaign,
                                                                    protocol))
            item.add_marker(f"acp_v{protocol}")
            items.append(item)
        return items


#: What a run says when the target did not repeat a run the same way and broke no rule
#: (the ``fuzz`` subcommand's note for the same situation).
TIMING_NOTE = ("generation stopped early: the target did not repeat a run the same way "
               "(its behaviour depends on timing), so Hypothesis could not replay what it "
               "drew ({error}); no rule broke in the runs it played")


def timing_proof(test: Any, campaign: Any, protocol: int) -> Any:
    """``test``, whose Hypothesis errors about a run the target did not repeat the same
    way (``Flaky``: "the second run stopped drawing earlier than the first run",
    "inconsistent data generation", a failure that did not fail again) become what they
    mean: the finding the campaign recorded for this version (shrunk and saved already),
    or, when no rule broke, a skip that says why (never a pass, never Hypothesis'
    traceback). A stop whose raise Python dropped (in a gc callback) is raised again by
    the next run (``keeper.raise_pending``) and ends the session as the interrupt it is.
    HypoFuzz fuzzes the inner ``@given`` test (``test.hypothesis``, copied by
    ``functools.wraps``) and handles flakiness its own way."""
    import functools

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True  # the finding is the report, not this frame
        from hypothesis.errors import Flaky

        from conformance.fuzz.keeper import Interrupted, pending

        try:
            test(*args, **kwargs)
        except Interrupted:  # the signal's own raise was dropped; the next run raised it
            raise KeyboardInterrupt from None
        except Flaky as exc:
            if pending() is not None:  # this session's stop, not the target, made the
                raise KeyboardInterrupt from None  # repeat differ
            found = _finding_of(exc, campaign, protocol)
            if found is not None:
                raise found from None
            pytest.skip(TIMING_NOTE.format(error=type(exc).__name__))

    return run


def _finding_of(exc: BaseException, campaign: Any, protocol: int) -> BaseException | None:
    """The rule-broken error behind a flaky run: one the run raised (inside Hypothesis'
    group), else the first rule the campaign handled for ``protocol`` in this process."""
    from conformance.fuzz.campaign import CampaignFailure, failure_type

    for inner in getattr(exc, "exceptions", ()) or ():
        if isinstance(inner, CampaignFailure):
            return inner
    handled = [h for (_, p), h in sorted(campaign.handled.items()) if p == protocol]
    if not handled:
        return None
    first = handled[0]
    return failure_type(first.failure.requirement)(first, first.failure, campaign.masker)


def collect(session: pytest.Session) -> list[pytest.Item]:
    role = session.config.stash[FUZZ].campaign.role
    name = f"acp-fuzz-{role}"
    suite = AcpFuzz.from_parent(session, name=name, nodeid=name)
    return suite.collect()
