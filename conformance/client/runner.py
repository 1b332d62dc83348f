"""The client runner: client cases x protocol versions -> client + agent double -> transcript
-> the same checkers and the same CaseResult/RunResult shapes as the agent suite.

For each case the suite opens a control socket in a fresh temporary folder, writes a one-word
agent command there (a small script that starts ``python -m conformance.client.double`` for this
case's protocol and socket), puts it where the client command says ``{agent}``, and drives the
client (through a pty, or in-process through an adapter). The double reports every wire line;
the driver adds what the client showed after each turn (``observed`` harness events). Grading is
:func:`conformance.checks.grade` with ``role="client"``, so ``acp-conformance check`` regrades a
saved client transcript the same way.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import model
from conformance.cases import Case
from conformance.client.profile import Profile
from conformance.client.pty import ClientAborted, ClientCut, PtyClient, Template, check_cut
from conformance.client.reaper import end_doubles
from conformance.client.script import (
    TurnScript,
    build_control,
    build_reload,
    build_turn,
    check_case,
    new_ids,
)
from conformance.engine import Suite, run_suite
from conformance.grading import Ending
from conformance.lifecycle import (
    CaseNotPlayable,
    Cutoff,
    case_scope,
    drive_case,
    new_transcript,
    play_case,
)
from conformance.results import CaseResult, Reason, RunResult
from conformance.settings import RunSettings
from conformance.transcript import Transcript

NO_RELOAD = "the client has no reload"
HOW_TO_RELOAD = " (give the profile key load, or load() in the adapter)"
NO_RECONNECT = ("the client cannot be shown its agent hanging up and resume again (an "
                "interactive client with the profile key load, or disconnected() and load() in "
                "the adapter)")
EXITED_ON_HANGUP = ("the client exited when its agent hung up in the middle of a replay, so it "
                    "cannot be shown a truncated replay and then a full one; ending with the "
                    "agent breaks no rule of message identity")
ONE_SHOT_RELOAD = (" (for a one-shot client, the profile key load is the command line that "
                   "resumes a session, with {agent}, {session} and {prompt})")


class ClientSetupError(Exception):
    """The client command or options cannot be used (exit 2)."""


@dataclass(kw_only=True)
class ClientRun(RunSettings):
    """The client role's run: the shared settings and the client's own."""

    command: str | None = None  # the client command template, with {agent}
    adapter: str | None = None  # MODULE:FACTORY
    profile: Profile | None = None
    max_output: int = 8 * 1024 * 1024


def agent_template(command: str, option: str, example: str,
                   error: type[Exception]) -> list[str]:
    """The words of a command that starts the agent where it says ``{agent}`` (``--client``,
    ``--proxy``), its relative paths made absolute; ``error`` names what is wrong."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise error(f"{option} {command!r}: {exc}") from None
    if not words:
        raise error(f"{option}: the {option[2:]} command is empty")
    if not any("{agent}" in w for w in words):
        raise error(f"{option}: the command must say where the agent command goes, "
                    f"with {{agent}} (e.g. {example!r})")
    return absolute_paths(words, os.getcwd())


def template_of(command: str, profile: Profile | None) -> Template:
    words = agent_template(command, "--client", "my-editor --agent-cmd {agent}",
                           ClientSetupError)
    t = Template(words)
    if profile is not None and not t.one_shot:
        profile.require_interactive()
    from conformance.transport import split_command

    split_command([words[0]])  # a missing executable is a usage error, not a finding
    return t


def absolute_paths(words: Sequence[str], cwd: str) -> list[str]:
    """The client runs in a scratch folder: each word (or ``--opt=`` value) that names an
    existing path relative to ``cwd``, the folder the suite was started from, is made
    absolute. A word qualifies when it contains a ``/`` or, after the first word (looked
    up on PATH), names a file; options and the ``{agent}``/``{prompt}`` words stay as given."""
    out = []
    for i, word in enumerate(words):
        prefix, _, value = word.rpartition("=") if word.startswith("-") else ("", "", word)
        candidate = os.path.join(cwd, value)
        relative = (value and not value.startswith(("-", "{")) and "{" not in value
                    and not os.path.isabs(value)
                    and ((os.sep in value and os.path.exists(candidate))
                         or (i > 0 and not prefix and os.path.isfile(candidate))))
        out.append(f"{prefix}={os.path.normpath(candidate)}" if relative and prefix
                   else os.path.normpath(candidate) if relative else word)
    return out


SPAWNED = "spawned"  # in a case's folder: the PID of every double the client started


def double_command(directory: str, protocol: int, control: str) -> str:
    """A one-word agent command: a script that starts the double from any directory."""
    import conformance

    root = str(Path(conformance.__file__).resolve().parent.parent)
    code = ("import sys; sys.path.insert(0, " + repr(root) + "); "
            "from conformance.client.double import main; sys.exit(main())")
    path = os.path.join(directory, "acp-agent-double")
    spawned = shlex.quote(os.path.join(directory, SPAWNED))
    with open(path, "w", encoding="utf-8") as fh:
        # Each start notes its PID (exec keeps it) before Python starts, which can take
        # seconds on a busy machine: the suite then knows of a double still starting.
        fh.write("#!/bin/sh\n"
                 f"echo $$ >> {spawned}\n"
                 f"exec {shlex.quote(sys.executable)} -c {shlex.quote(code)} "
                 f"--protocol {protocol} --control {shlex.quote(control)} \"$@\"\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def client_plan(run: ClientRun, cases: Sequence[Case]) -> list[tuple[int, Case]]:
    """The (protocol, case) pairs a client run plays, in report order."""
    return [(p, c) for p in run.protocols for c in cases
            if c.role == "client" and c.applies_to(p, run.options.profile.name)]


def client_suite(run: ClientRun, cases: Sequence[Case], target_label: str,
                 choices: Sequence[Case] | None = None) -> Suite:
    """The client role as the engine runs it (:mod:`conformance.engine`)."""
    for c in cases:
        if c.role == "client":
            check_case(c)

    def play(protocol: int, case: Case, signals: Any, cutoff: Cutoff) -> CaseResult:
        return run_client_case(run, case, protocol, target_label, signals=signals,
                               cutoff=cutoff)

    return Suite("client", target_label, client_plan(run, cases), play,
                 scope=lambda case: case_scope("client", run.options, run.strict, case),
                 target_info=lambda result: next(
                     (dict(c.target_info) for c in result.cases if c.target_info), {}),
                 selected=[c.id for c in cases],
                 runnable=[c.id for _, c in client_plan(run, choices or cases)])


def run_client_suite(run: ClientRun, cases: Sequence[Case], target_label: str,
                     choices: Sequence[Case] | None = None,
                     started: Callable[[], None] | None = None) -> RunResult:
    return run_suite(client_suite(run, cases, target_label, choices), run, started=started)


@dataclass
class Played:
    """One client case driven: its transcript, and how it ended when it ended early."""

    transcript: Transcript
    note: str = ""
    fault: str = ""  # the client fault it ended with and the step ("went silent at start")
    reason: Reason | None = None  # set when the case was not played (nothing to grade)


def run_client_case(run: ClientRun, case: Case, protocol: int, target_label: str, *,
                    signals: Any = None, cutoff: Cutoff | None = None) -> CaseResult:
    """Drive one case, grade it (every client rule, less the case's exclusions), save its
    transcript if asked: the lifecycle every role shares (``conformance.lifecycle``)."""
    transcript = client_transcript(run, case, protocol, target_label)
    drive = ClientDrive(run, case, protocol, transcript, cutoff=cutoff)
    cr = play_case(case, protocol, "client", drive, transcript, transcripts=run.transcripts,
                   signals=signals, deadline=run.deadline)
    cr.target_info = _client_info(transcript)
    return cr


def client_transcript(run: ClientRun, case: Case, protocol: int, target_label: str
                      ) -> Transcript:
    scope = case_scope("client", run.options, run.strict, case)
    return new_transcript("client", protocol, scope, target_label, f"{case.id}@v{protocol}",
                          case.requirements, run.masker)


def play_client_case(run: ClientRun, case: Case, protocol: int, target_label: str, *,
                     signals: Any = None, controls: bool = True,
                     cutoff: Cutoff | None = None) -> Played:
    """Start the client, play the case's drive steps to it, stop it: the transcript.
    ``controls=False`` plays no control streams (the fuzzer's generated cases). When
    ``cutoff`` says so (``--deadline``) the case stops at once and what was recorded
    is graded."""
    transcript = client_transcript(run, case, protocol, target_label)
    drive = ClientDrive(run, case, protocol, transcript, controls=controls, cutoff=cutoff)
    ending = drive_case(drive, transcript, signals=signals, deadline=run.deadline)
    transcript.header["ended"] = ending.to_json()
    return Played(transcript, ending.note, ending.fault, ending.reason)


class ClientDrive:
    """The client role's drive: the suite plays the agent (the double, or an in-process
    adapter) through a case's steps, and reads what the client shows."""

    def __init__(self, run: ClientRun, case: Case, protocol: int, transcript: Transcript, *,
                 controls: bool = True, cutoff: Cutoff | None = None) -> None:
        self.run, self.case, self.protocol, self.transcript = run, case, protocol, transcript
        self.controls, self.cutoff = controls, cutoff
        self.reloads = any(isinstance(step, dict) and "reload" in step for step in case.drive)
        self.history: list[TurnScript] = []  # what a reload replays
        self.ids = new_ids()
        self.current: list[TurnScript | None] = [None]
        self.client: Any = None
        self.control: Any = None
        self.tmp: tempfile.TemporaryDirectory[str] | None = None
        if self._cannot_reload() is None:
            self._open()

    def _cannot_reload(self) -> str | None:
        """Why the case cannot be played, known before starting anything (or None)."""
        run = self.run
        if not self.reloads:
            return None
        if run.adapter is None and (run.profile is None or run.profile.load is None):
            return NO_RELOAD + HOW_TO_RELOAD
        if (run.profile is not None and run.profile.load is not None
                and "{prompt}" in (run.command or "") and "{agent}" not in run.profile.load):
            return NO_RELOAD + ONE_SHOT_RELOAD  # a pty client's load, given to a one-shot
        return None

    def _next_turn(self, conn: int) -> TurnScript | None:
        turn, self.current[0] = self.current[0], None  # each play is served once
        client = self.client
        if turn is not None and client is not None and client.probe_missed:
            # The client already left a probe unanswered in this case (MID-C-08/probe
            # failed there): later turns do not wait out the probe timeout again.
            turn = turn._replace(await_probe=False)
        return turn

    def _open(self) -> None:
        run, protocol, transcript = self.run, self.protocol, self.transcript
        response_id = run.options.profile.response_message_id
        if run.adapter is not None:  # it runs in this process and needs no folder
            from conformance.client.adapter import AdapterClient, load_factory

            self.client = AdapterClient(load_factory(run.adapter), transcript=transcript,
                                        protocol=protocol, timeout=run.timeout,
                                        response_message_id=response_id,
                                        next_turn=self._next_turn)
            self.client.load_session = self.reloads
            self.client.replay_marker = run.options.profile.replay_marker
            return
        from conformance.client.channel import ANSWER_WAIT_CAP, SuiteSide
        from conformance.transport.home import case_env  # its own HOME, XDG folders, TMPDIR

        assert run.command is not None
        template = template_of(run.command, run.profile)
        # A client process needs a folder: the double's script, its socket, a working folder.
        self.tmp = tempfile.TemporaryDirectory(prefix="acp-cc-")
        tmp = self.tmp.name
        self.control = SuiteSide(tmp, transcript, protocol=protocol, wait=min(run.timeout, ANSWER_WAIT_CAP),
                                 response_message_id=response_id, next_turn=self._next_turn)
        self.control.config["load_session"] = self.reloads
        self.control.config["replay_marker"] = run.options.profile.replay_marker
        agent = double_command(tmp, protocol, self.control.path)
        os.mkdir(workdir := os.path.join(tmp, "work"))
        self.client = PtyClient(template, agent=agent, profile=run.profile, control=self.control,
                                transcript=transcript, protocol=protocol, timeout=run.timeout,
                                env=case_env(run.env, os.path.join(tmp, "env")), cwd=workdir,
                                max_output=run.max_output, turn_timeout=run.turn_timeout,
                                cutoff=self.cutoff)

    def drive(self) -> None:
        why = self._cannot_reload()
        if why is not None:  # known before starting: nothing is played
            raise CaseNotPlayable(why, Reason.NO_CAPABILITY)
        client, case, protocol = self.client, self.case, self.protocol
        where, plays = "start", 0  # the step being played, named alike in every case
        try:
            for step in case.drive:
                check_cut(self.cutoff)
                where = step if isinstance(step, str) else next(iter(step), "")
                if where == "play":
                    plays += 1
                    where = f"turn {plays}"
                if step == "start":
                    client.start()
                elif step == "restart":
                    client.stop()
                    client.start()
                elif "reload" in step:
                    if not client.can_reload():
                        raise CaseNotPlayable(NO_RELOAD + HOW_TO_RELOAD, Reason.NO_CAPABILITY)
                    if step["reload"] == "truncated" and not client.can_reconnect():
                        raise CaseNotPlayable(NO_RECONNECT, Reason.NO_CAPABILITY)
                    reload = self.current[0] = build_reload(step["reload"], self.history,
                                                            protocol)
                    try:
                        client.reload(reload)
                    except ClientAborted as exc:
                        if (reload.hangup and not isinstance(exc, ClientCut)
                                and exc.kind.startswith(("exited", "raised"))):
                            raise CaseNotPlayable(EXITED_ON_HANGUP, Reason.NO_CAPABILITY) \
                                from None
                        raise
                else:
                    turn = build_turn(case, step["play"], protocol, self.ids,
                                      controls=self.controls)
                    self.current[0] = turn
                    try:
                        client.play(turn)
                    except ClientAborted as exc:
                        self._control_after_exit(turn, step["play"], exc)
                        raise
                    self.history.append(turn)
                    if _asked_lower(client, protocol):
                        return  # one turn shows what the client does next; it is recorded
                    if turn.control:  # played the same way, right after the probe
                        self.current[0] = build_control(case, step["play"], protocol, self.ids)
                        client.play(self.current[0])
        except ClientCut as exc:
            self.transcript.add(0, "harness", "harness", event="note",
                                data={"note": "interrupted", "cut": exc.reason})
            raise
        except ClientAborted as exc:
            exc.fault = f"{exc.kind} at {where}" if exc.kind else ""
            raise

    def _control_after_exit(self, turn: TurnScript, name: str, exc: ClientAborted) -> None:
        """A client that exited on a probe stream is started again and shown the stream's
        control (the same turn with ordinary IDs): whether it survives that decides the
        crash's cause (checks/controls.py). The case still ends with the exit."""
        if (not turn.control or isinstance(exc, ClientCut)
                or not exc.kind.startswith(("exited", "raised"))):
            return  # a hang, a flood, a cut: no crash to decide
        client = self.client
        try:
            client.stop()
            client.start()
            self.current[0] = build_control(self.case, name, self.protocol, self.ids)
            client.play(self.current[0])
        except ClientAborted:
            pass  # the control's own ending is in its observation: it decides the crash

    def stop(self, hurry: bool) -> None:
        if self.client is not None:
            self.client.stop()
        if self.control is not None:
            assert self.tmp is not None  # made with the control channel
            end_doubles(self.control, os.path.join(self.tmp.name, SPAWNED), self.run.timeout)
            self.control.close()
        if self.tmp is not None:
            self.tmp.cleanup()

    def conn(self) -> int:
        return 0

    def ended(self, ending: Ending) -> Ending:
        """A client that asked for another version than the case's and did not go on with
        the one it was answered is "vN unsupported by the client", for v1 as for v2."""
        client = self.client
        asked = client.version_asked if client is not None else None
        if not isinstance(asked, int) or isinstance(asked, bool) or asked == self.protocol:
            return ending
        if asked < self.protocol or (ending.aborted and not _went_on(self.transcript)):
            return Ending(f"v{self.protocol} unsupported by the client (it asked for {asked})",
                          Reason.VERSION_UNSUPPORTED)
        return ending


def _went_on(transcript: Transcript) -> bool:
    """The client sent something after its initialize request: it went on with the version
    it was answered (whatever happened to it later), rather than closing."""
    return any(e.src == "client" and isinstance(e.msg, dict)
               and e.msg.get("method") not in (None, "initialize") for e in transcript.entries)


def _asked_lower(client: Any, protocol: int) -> bool:
    """The client asked for an older protocol version than this case's (v1-only client)."""
    asked = client.version_asked
    return isinstance(asked, int) and not isinstance(asked, bool) and asked < protocol


def _client_info(transcript: Transcript) -> dict[str, Any]:
    """What the client says it is, from its initialize request (clientInfo / info)."""
    for e in transcript.entries:
        m = e.msg
        if e.src == "client" and isinstance(m, dict) and m.get("method") == "initialize":
            params = model.as_object(m.get("params"))
            info = params.get("clientInfo") or params.get("info")
            if isinstance(info, dict):
                return {"name": info.get("name"), "version": info.get("version"),
                        "protocol": params.get("protocolVersion")}
    return {}


def reference_client(render: str = "cumulative") -> tuple[str, Profile]:
    """The bundled reference client as a pty target: its command template and profile."""
    import conformance
    from conformance.client import profile as profmod
    from conformance.client.reference import PROFILE_YAML

    root = str(Path(conformance.__file__).resolve().parent.parent)
    code = ("import sys; sys.path.insert(0, " + repr(root) + "); "
            "from conformance.client.reference import main; sys.exit(main())")
    command = " ".join(shlex.quote(w) for w in (sys.executable, "-c", code, "--agent-cmd",
                                                "{agent}", "--render", render))
    return command, profmod.loads(PROFILE_YAML.replace("cumulative", render),
                                  "reference-client profile")
