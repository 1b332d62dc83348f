"""The roles, one table: a role is one entry of :data:`ROLES`.

An entry (:class:`Role`) says which options name the target it tests (``tested``), how
its settings are checked (``check``) and its run made from the option values
(``settings``), how its suite is built (``suite``: the engine's
:class:`conformance.engine.Suite`), and the reports it owns beyond the run's
(``behind``: a target behind the one tested, whose own result the run carries apart, as
the proxy's real agent). The command line's one run command (:mod:`conformance.cli.run`)
and the pytest plugin's one builder (:mod:`conformance.pytest_plugin.state`) look the
role up here; no shell tests a role's name. The option table
(:mod:`conformance.settings.table`) names in each option's ``roles`` the entries it
applies to, and :func:`check_options` refuses an option given with another role.
Adding a role is one module (its runner: settings record, suite) and one entry here
(CONTRIBUTING.md, "Adding a role").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.settings.table import check_values, option, spelling
from conformance.usage import UsageError

if TYPE_CHECKING:
    from conformance.cases import Case
    from conformance.engine import Suite
    from conformance.settings import RunSettings

__all__ = ["ROLES", "Behind", "Given", "Role", "check_options", "make_run", "role_of"]

#: How a shell spells an option by its table name (``proxy -> --acp-proxy``).
Spell = Callable[[str], str]


@dataclass(frozen=True)
class Given:
    """What a shell hands a role to make its run: the option values (table name ->
    parsed value; a value a caller made ready, as demo's client profile, stands), the
    target (its command: the first ``tested`` option given, or a caller's own, as demo's
    bundled agent), the settings every role shares
    (:class:`conformance.settings.RunSettings`' fields) and, with ``--model-server``, the
    scripted model serving the agent (its command and environment filled in)."""

    values: Mapping[str, Any]
    target: Any
    shared: Mapping[str, Any]
    model: Any = None
    served: Any = None  # the served agent's command, {model_url} filled in (None: as given)


@dataclass(frozen=True)
class Behind:
    """A target behind the one tested (a proxy's real agent), named by ``option``: each
    case's result carries its own (``CaseResult.behind``), which the run gathers into
    ``RunResult.behind`` and every shell reports apart, under ``role``'s rules, never as
    the tested target's (its console section, ``NAME.<role>.json`` beside ``--json``)."""

    option: str
    role: str


@dataclass(frozen=True)
class Role:
    """One role: what a shell needs to run it."""

    name: str  # as results, cases and transcripts name it
    #: The options (table names) that name its target; the first given is the target.
    tested: tuple[str, ...]
    #: The role's own checks of the option values, before anything starts (one message
    #: each, options spelled as the shell spells them): raise UsageError.
    check: Callable[[Mapping[str, Any], Spell], None]
    #: Its run settings (a RunSettings record with the role's extras) from what was given.
    settings: Callable[[Given], RunSettings]
    #: Its suite, as the engine runs it: (run, selected cases, label, every case loaded).
    suite: Callable[[Any, Sequence[Case], str, Sequence[Case] | None], Suite]
    #: Its setup errors (a bad command, profile or adapter): usage errors (exit 2).
    errors: Callable[[], tuple[type[Exception], ...]] = lambda: ()
    behind: Behind | None = None
    #: The option naming an agent a scripted model (``--model-server``) may serve, when it
    #: is not the target itself (None: the target, when ``model`` says it has one).
    model_option: str | None = None
    model: bool = False  # --model-server serves an agent of this role's run
    #: A line the command line prints when the run starts: what it cannot measure ("").
    notice: Callable[[Any], str] = lambda run: ""
    #: Without --transcripts, its transcripts may live in a scratch folder for the reports
    #: (the agent behind a proxy is reported with its transcripts' paths: not).
    scratch: bool = True
    fuzz: bool = True  # the fuzzer fuzzes this role (the plugin's --acp-fuzz)
    session: bool = False  # acp_session drives its target (vendor tests)
    article: str = "a"  # "an agent": how messages name one

    def target(self, values: Mapping[str, Any]) -> Any:
        """The target the values name: the first of ``tested`` given."""
        return next((values[n] for n in self.tested if values.get(n)), None)

    def served(self, given_target: Any, values: Mapping[str, Any]) -> Any:
        """The agent command a scripted model would serve in this run (None: none)."""
        if not self.model:
            return None
        return values.get(self.model_option) if self.model_option else given_target


# -- the agent ----------------------------------------------------------------------------


def _agent_settings(g: Given) -> RunSettings:
    from conformance.agent.runner import AgentRun
    from conformance.transport import split_command

    v = g.values
    return AgentRun(command=split_command(g.served or g.target), schema_dir=v.get("schema-dir"),
                    model=g.model, model_script=v.get("model-script"), grace=v.get("grace"),
                    **g.shared)


def _agent_suite(run: Any, cases: Sequence[Case], label: str,
                 choices: Sequence[Case] | None = None) -> Suite:
    from conformance.agent.runner import agent_suite

    return agent_suite(run, cases, label, choices)


# -- the client ---------------------------------------------------------------------------


def _client_settings(g: Given) -> RunSettings:
    from conformance.client.adapter import load_factory
    from conformance.client.profile import load
    from conformance.client.runner import ClientRun, template_of

    v = g.values
    profile = v.get("client-profile")
    if isinstance(profile, (str, Path)):
        profile = load(Path(profile))
    adapter = v.get("client-adapter")
    command = None if adapter else str(g.target)
    if adapter:  # in-process: a bad MODULE:FACTORY is a usage error now
        load_factory(adapter)
    else:
        template_of(str(command), profile)  # a bad command is a usage error now, not in every case
    return ClientRun(command=command, adapter=adapter, profile=profile, **g.shared)


def _client_suite(run: Any, cases: Sequence[Case], label: str,
                  choices: Sequence[Case] | None = None) -> Suite:
    from conformance.client.runner import client_suite

    return client_suite(run, cases, label, choices)


def _client_errors() -> tuple[type[Exception], ...]:
    from conformance.client.adapter import AdapterError
    from conformance.client.profile import ProfileError
    from conformance.client.runner import ClientSetupError

    return (ClientSetupError, AdapterError, ProfileError)


def _client_notice(run: Any) -> str:
    """A client run without --client-profile: what it cannot observe, in one line."""
    if not run.command or run.profile is not None:
        return ""
    from conformance.checks import all_rules
    from conformance.checks.observe import NO_PROFILE

    shown = sorted({r.id.split("/", 1)[0] for r in all_rules().values()
                    if r.untested == NO_PROFILE})
    return ("no --client-profile: the suite cannot read what the client shows, so "
            f"{', '.join(shown)} are not exercised (the verdict says partial)")


# -- the proxy ----------------------------------------------------------------------------


def _proxy_check(values: Mapping[str, Any], spell: Spell) -> None:
    from conformance.proxy.runner import ProxySetupError, proxy_template

    # a run that keeps no transcripts (a shell whose --no-transcripts, or a report on
    # standard output, leaves none) has no agent side to bundle
    if values.get("certify") is not None and "no-transcripts" in values \
            and values.get("transcripts") is None:
        raise UsageError(f"{spell('certify')} keeps every transcript: not with "
                         f"{spell('no-transcripts')}")
    if not values.get("agent") and (values.get("model-server") or values.get("model-script")):
        raise UsageError(f"{spell('model-server')} serves a real agent behind the proxy: give "
                         f"{spell('agent')} CMD")
    try:
        proxy_template(values["proxy"], spell("proxy"))  # without {agent}: one error line
    except ProxySetupError as exc:
        raise UsageError(str(exc)) from None


def _proxy_settings(g: Given) -> RunSettings:
    from conformance.proxy.runner import ProxyRun
    from conformance.transport import split_command

    v = g.values
    agent = g.served or v.get("agent")
    return ProxyRun(proxy=g.target, agent=split_command(agent) if agent else None,
                    model=g.model, model_script=v.get("model-script"),
                    adapts=bool(v.get("proxy-adapts")), schema_dir=v.get("schema-dir"),
                    grace=v.get("grace"), **g.shared)


def _proxy_suite(run: Any, cases: Sequence[Case], label: str,
                 choices: Sequence[Case] | None = None) -> Suite:
    from conformance.proxy.runner import proxy_suite

    return proxy_suite(run, cases, label, choices)


def _proxy_errors() -> tuple[type[Exception], ...]:
    from conformance.proxy.runner import ProxySetupError

    return (ProxySetupError,)


def _no_check(values: Mapping[str, Any], spell: Spell) -> None:
    return None


#: The roles, in the order the reports and the option reference list them.
ROLES: dict[str, Role] = {r.name: r for r in (
    Role("agent", ("agent",), _no_check, _agent_settings, _agent_suite, model=True,
         session=True, article="an"),
    Role("client", ("client", "client-adapter"), _no_check, _client_settings, _client_suite,
         errors=_client_errors, notice=_client_notice),
    Role("proxy", ("proxy",), _proxy_check, _proxy_settings, _proxy_suite,
         errors=_proxy_errors, behind=Behind("agent", "agent"), model=True,
         model_option="agent", scratch=False, fuzz=False),
)}


def role_of(values: Mapping[str, Any]) -> Role | None:
    """The role the values test (None: no target given). A role with a target behind it
    (the proxy, whose ``--agent`` is the agent behind it) is the run's when given: the
    other targets given are behind it, or refused as options of another role."""
    given = [r for r in ROLES.values() if any(values.get(n) for n in r.tested)]
    outer = [r for r in given if r.behind is not None]
    return next(iter(outer or given), None)


def check_options(values: Mapping[str, Any], shell: str, role: Role | None = None) -> None:
    """The option table's checks (:func:`conformance.settings.table.check_values`), then an
    option given with a role it does not apply to (``Option.roles``): one line, options
    spelled as ``shell`` spells them. ``role`` defaults to :func:`role_of`; no role given
    refuses a role's options as needing their target."""
    check_values(values, shell)
    spell = spelling(shell)
    role = role or role_of(values)
    for name, value in values.items():
        try:
            row = option(name)
        except KeyError:
            continue
        if row.roles is None or not value or value == row.default:
            continue
        if role is None:
            wanted = [spell(r.tested[0]) for r in ROLES.values() if r.name in row.roles]
            raise UsageError(f"{spell(name)} needs {' or '.join(wanted)}")
        if role.name not in row.roles:
            tested = "/".join(spell(n) for n in role.tested)
            raise UsageError(f"{spell(name)} does not apply to the {role.name} role ({tested}): "
                             "leave it out")


def make_run(role: Role, given: Given) -> RunSettings:
    """The role's run from what was given; its setup errors are usage errors (exit 2)."""
    try:
        return role.settings(given)
    except role.errors() as exc:
        raise UsageError(str(exc)) from None
