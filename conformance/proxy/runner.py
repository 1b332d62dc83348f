"""The proxy runner: cases x protocol versions -> the driver in front of the proxy, the
recording shim and the agent (the double, or ``--agent``) behind it -> two transcripts
-> :func:`conformance.checks.proxy.grade_proxy` -> results.

Without ``--agent`` the proxy cases run (``role: proxy``): the agent double plays each
``{play: TURN}`` of the case's stream while the driver sends that turn's prompt; a
``{reload: ...}`` step loads (v1) or resumes with replay (v2) and the double replays
what was played. With ``--agent`` the agent cases run through the proxy (their own
drive steps), and the real agent's side is also graded with the agent checkers: those
findings are the agent's, a second result of each case the engine carries
(``CaseResult.behind``, gathered into ``RunResult.behind``), never the proxy's.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from conformance.agent.driver import ClientDriver
from conformance.agent.player import StepDriver, perform
from conformance.agent.runner import play_steps, stop_driver
from conformance.cases import Case
from conformance.checks import all_rules
from conformance.checks.proxy import REQUIREMENTS
from conformance.client.script import TurnScript, build_reload, build_turn, check_case, new_ids
from conformance.engine import Suite, run_suite
from conformance.grading import Ending, grade_sides
from conformance.lifecycle import (
    Cutoff,
    Side,
    case_scope,
    file_stem,
    new_transcript,
    play_case,
    safe_name,
)
from conformance.proxy.grading import ROLE, proxy_scope
from conformance.proxy.sides import agent_side
from conformance.results import CaseResult, RunResult
from conformance.settings import RunSettings
from conformance.transcript import Transcript
from conformance.transport.home import case_env


class ProxySetupError(Exception):
    """The proxy command or options cannot be used (exit 2)."""


@dataclass(kw_only=True)
class ProxyRun(RunSettings):
    """The proxy role's run: the shared settings and the proxy's own."""

    proxy: str  # the proxy command template, with {agent}
    agent: Sequence[str] | None = None  # a real agent behind the proxy; None: the double
    adapts: bool = False  # a declared v2-to-v1 adapter: v2 behind it, v1 in front
    schema_dir: Path | None = None
    grace: float | None = None  # --grace: MID-A-09's grace window (None: the driver's 0.25 s)
    model: Any = None  # a running ModelServer (--model-server) for the agent behind, or None
    model_script: Path | None = None


def proxy_template(command: str, option: str = "--proxy") -> list[str]:
    """The proxy command's words (``option``: how the shell spells it, for its one error)."""
    from conformance.client.runner import agent_template
    from conformance.transport import split_command

    words = agent_template(command, option, "my-bridge --upstream {agent}", ProxySetupError)
    split_command([words[0]])  # a missing executable is a usage error, not a finding
    return words


def proxy_plan(run: ProxyRun, cases: Sequence[Case]) -> list[tuple[int, Case]]:
    role = "agent" if run.agent else "proxy"
    protocols = [p for p in run.protocols if p >= 2] if run.adapts else run.protocols
    return [(p, c) for p in protocols for c in cases
            if c.role == role and c.applies_to(p, run.options.profile.name)]


def proxy_suite(run: ProxyRun, cases: Sequence[Case], target_label: str,
                choices: Sequence[Case] | None = None) -> Suite:
    """The proxy role as the engine runs it (:mod:`conformance.engine`); with ``--agent``,
    each case's result carries the real agent's behind it, which the engine gathers into
    the run's ``behind``."""
    plan = proxy_plan(run, cases)
    for _, case in plan:
        if case.role == ROLE:
            check_case(case)

    def play(protocol: int, case: Case, signals: Any, cutoff: Cutoff) -> CaseResult:
        return run_proxy_case(run, case, protocol, signals=signals, cutoff=cutoff)

    return Suite(ROLE, target_label, plan, play,
                 scope=lambda case: proxy_scope(run.options, run.strict, case),
                 target=run.proxy, target_info=lambda result: {},  # initialize is the agent's
                 selected=[c.id for c in cases],
                 runnable=[c.id for _, c in proxy_plan(run, choices or cases)],
                 header={"side": "client"},  # a not-run case's transcript: its client side
                 behind=" ".join(run.agent) if run.agent else "")


def run_proxy_suite(run: ProxyRun, cases: Sequence[Case], target_label: str,
                    choices: Sequence[Case] | None = None,
                    started: Callable[[], None] | None = None) -> RunResult:
    """The proxy's run; with ``--agent`` the real agent's own is its ``behind``."""
    proxy_template(run.proxy)
    return run_suite(proxy_suite(run, cases, target_label, choices), run, started=started)


def _script_command(directory: str, name: str, argv: Sequence[str]) -> str:
    """A one-word command (what ``{agent}`` becomes): a script that runs ``argv``."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in argv) + ' "$@"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _python(module: str) -> list[str]:
    import conformance

    root = str(Path(conformance.__file__).resolve().parent.parent)
    return [sys.executable, "-c", (f"import sys; sys.path.insert(0, {root!r}); "
            f"from {module} import main; sys.exit(main())")]


def double_script(case: Case, protocol: int) -> tuple[list[TurnScript], bool]:
    """The turns the double plays, in the order the case's steps ask for them, and
    whether it must answer load/resume."""
    ids, played, script = new_ids(), [], []
    reloads = False
    for step in case.drive:
        if isinstance(step, dict) and "play" in step:
            turn = build_turn(case, step["play"], protocol, ids, controls=False)
            script.append(turn)
            played.append(turn)
        elif isinstance(step, dict) and "reload" in step:
            reloads = True  # the next prompt plays the next turn, not a turn after the load
            script.append(build_reload(step["reload"], played, protocol)._replace(actions=()))
    return script, reloads


def _perform_proxy_step(driver: ClientDriver, step: Any, turns: dict[str, TurnScript],
                        protocol: int) -> None:
    if step == "start":
        driver.start()
        driver.new_session()
    elif isinstance(step, dict) and "play" in step:
        driver.prompt(turns[step["play"]].prompt, cancel=bool(step.get("cancel", False)))
    elif isinstance(step, dict) and "reload" in step:
        if protocol >= 2:
            driver.resume("start")
        else:
            driver.load()
    else:  # check_case makes this unreachable
        raise ValueError(f"unknown proxy step {step!r}")


class ProxyDrive:
    """The proxy role's drive (a :class:`conformance.lifecycle.Drive`): the driver plays the
    client in front of the proxy; behind it, where the command says ``{agent}``, the
    recording shim starts the agent double playing the case's turns, or ``--agent``."""

    def __init__(self, run: ProxyRun, case: Case, protocol: int, transcript: Transcript,
                 cutoff: Cutoff | None, tmp: str) -> None:
        self.run, self.case, self.transcript = run, case, transcript
        self.name = str(transcript.header["case"])
        self.log = Path(tmp) / "agent-side.log"
        self.turns: dict[str, TurnScript] = {}
        env = dict(run.env)
        if run.agent:
            inner = list(run.agent)
            if run.model is not None:  # the case's own route of the model server
                from conformance.modelserver.cases import use_case_script

                url = use_case_script(run.model, case, safe_name(self.name), run.model_script,
                                      transcript.header)
                inner = [a.replace(run.model.url, url) for a in inner]
                env = {k: v.replace(run.model.url, url) for k, v in env.items()}
        else:
            script, reloads = double_script(case, protocol)
            self.turns = {t.name: t for t in script}
            script_path = Path(tmp) / "turns.json"
            script_path.write_text(json.dumps([t.to_json() for t in script]), "utf-8")
            inner = _python("conformance.client.double") + [
                "--protocol", str(protocol), "--script", str(script_path)] + (
                ["--load-session"] if reloads else []) + (
                [] if run.options.profile.response_message_id else ["--no-response-message-id"])
        self.inner = inner
        agent_cmd = _script_command(tmp, "acp-agent", _python("conformance.proxy.shim") + [
            "--log", str(self.log), "--"] + inner)
        argv = [w.replace("{agent}", agent_cmd) for w in proxy_template(run.proxy)]
        workdir = os.path.join(tmp, "work")
        os.mkdir(workdir)
        env = case_env(env, os.path.join(tmp, "env"))  # its own HOME, XDG folders, TMPDIR
        front = int(transcript.header["protocol"])
        self.driver = StepDriver(argv, transcript, protocol=front, timeout=run.timeout,
                                 cwd=workdir, env=env, turn_timeout=run.turn_timeout,
                                 cutoff=cutoff, grace=run.grace, profile=run.options.profile)
        # A declared v2-to-v1 adapter passes on what v1 cannot express (MID-V2-10 grades it).
        self.driver.check_spoken_version = not run.adapts
        self.stderr = ""

    def drive(self) -> None:
        if self.case.role == ROLE:
            play_steps(self.driver, self.case.drive, lambda d, s: _perform_proxy_step(
                d, s, self.turns, d.protocol))
        else:
            play_steps(self.driver, self.case.drive, perform)

    def stop(self, hurry: bool) -> None:
        model = self.run.model if self.run.agent else None  # a model only behind a real agent
        self.stderr = stop_driver(self.driver, self.transcript, hurry, model, self.name,
                                  self.run.jobs)

    def conn(self) -> int:
        return self.driver.conn

    def ended(self, ending: Ending) -> Ending:
        return ending


def run_proxy_case(run: ProxyRun, case: Case, protocol: int, *, signals: Any = None,
                   cutoff: Cutoff | None = None) -> CaseResult:
    """Play one case through the proxy on the one case lifecycle
    (:func:`conformance.lifecycle.play_case`): its two transcripts graded together; with
    ``--agent`` the agent side graded alone too, as the agent's own result
    (``CaseResult.behind``)."""
    name = f"{case.id}@v{protocol}"
    front = 1 if run.adapts else protocol  # the version the driver speaks to the proxy
    scope = proxy_scope(run.options, run.strict, case)
    transcript = new_transcript(ROLE, front, scope, run.proxy, name, REQUIREMENTS, run.masker)
    side = {"agent_protocol": protocol, "adapter": run.adapts}
    transcript.header.update(side, side="client",
                             agent_side=f"{file_stem(name + AGENT_SIDE)}.jsonl")
    with tempfile.TemporaryDirectory(prefix="acp-px-") as tmp:
        drive = ProxyDrive(run, case, protocol, transcript, cutoff, tmp)
        recorded: list[Side] = []

        def second() -> Side:
            """The agent side, read once the drive is over (from the shim's log)."""
            if not recorded:
                recorded.append(Side(_agent_transcript(run, case, drive, name, scope.profile,
                                                       side), AGENT_SIDE, grade_sides,
                                     bool(run.agent)))
            return recorded[0]

        cr = play_case(case, protocol, ROLE, drive, transcript, transcripts=run.transcripts,
                       signals=signals, deadline=run.deadline, schema_dir=run.schema_dir,
                       side=second)
    cr.requirements = list(REQUIREMENTS)
    cr.stderr_tail = drive.stderr
    if cr.behind is not None:
        cr.behind.target_info = _agent_info(recorded[0].transcript)
    return cr


def _agent_transcript(run: ProxyRun, case: Case, drive: ProxyDrive, name: str, profile: str,
                      side: dict[str, Any]) -> Transcript:
    """The agent side's transcript; with ``--agent`` its header records the agent's own
    scope (every agent rule but the TARGET ones, which are the proxy's to show), so it is
    graded alone as the agent's result, by the live run and by ``check``."""
    protocol = side["agent_protocol"]
    header = {"role": ROLE, "protocol": protocol, "profile": profile, "case": name,
              "target": " ".join(drive.inner) if run.agent else "(the suite's agent double)",
              **side, "side": "agent", "client_side": f"{file_stem(name)}.jsonl"}
    if run.agent:  # the real agent's own findings, graded on what it wrote before the proxy
        agent_scope = case_scope("agent", run.options, run.strict, case)
        every = agent_scope.rules if agent_scope.rules is not None else tuple(
            r.id for r in all_rules().values() if r.role == "agent")
        agent_scope = replace(agent_scope, rules=tuple(
            r for r in every if not r.startswith("TARGET")))
        header.update(scope=agent_scope.to_json(), requirements=list(case.requirements))
    return agent_side(drive.log, header, run.masker)


AGENT_SIDE = ".agent-side"  # the agent side's transcript: CASE.agent-side.jsonl


def _agent_info(t: Transcript) -> dict[str, Any]:
    for e in t.entries:
        m = e.msg
        if e.src == "agent" and isinstance(m, dict) and isinstance(m.get("result"), dict):
            info = m["result"].get("agentInfo") or m["result"].get("info")
            if isinstance(info, dict):
                return {"name": info.get("name"), "version": info.get("version"),
                        "protocol": m["result"].get("protocolVersion")}
    return {}
