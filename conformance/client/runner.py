"""The client runner: client cases x protocol versions -> client + agent double -> transcript
-> the same checkers and the same CaseResult/RunResult shapes as the agent suite.

For each case the suite opens a control socket in a fresh temporary folder,
writes a one-word agent command there (a small script that starts
``python -m conformance.client.double`` for this case's protocol and socket),
puts it where the client command says ``{agent}``, and drives the client
(through a pty, or in-process through an adapter). The double reports every
wire line; the driver adds what the client showed after each turn
(``observed`` harness events). Grading is :func:`conformance.checks.grade`
with ``role="client"``, so ``acp-conformance check`` regrades a saved client
transcript the same way.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from conformance import __version__, model
from conformance.cases import Case
from conformance.checks import ALWAYS as checks_always
from conformance.checks import Options, grade
from conformance.client.profile import Profile
from conformance.client.pty import ClientAborted, ClientCut, PtyClient, Template, check_cut
from conformance.client.script import (
    TurnScript,
    build_control,
    build_reload,
    build_turn,
    check_case,
    new_ids,
    wants_controls,
)
from conformance.driver import Cutoff
from conformance.results import CaseResult, Finding, Outcome, RunResult, apply_strict
from conformance.transcript import Transcript

ALWAYS = checks_always["client"]
NO_RELOAD = "the client has no reload"
HOW_TO_RELOAD = " (give the profile key load, or load() in the adapter)"
ONE_SHOT_RELOAD = (" (for a one-shot client, the profile key load is the command line that "
                   "resumes a session, with {agent}, {session} and {prompt})")


class ClientSetupError(Exception):
    """The client command or options cannot be used (exit 2)."""


@dataclass
class ClientRun:
    protocols: Sequence[int]
    options: Options
    command: str | None = None  # the client command template, with {agent}
    adapter: str | None = None  # MODULE:FACTORY
    profile: Profile | None = None
    timeout: float = 10.0
    strict: bool = False
    transcripts: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    max_output: int = 8 * 1024 * 1024
    turn_timeout: float | None = None  # longest single wait; None: 6 x timeout
    handle_signals: bool = False  # SIGINT/SIGTERM end the run cleanly (RunInterrupted)
    progress: Callable[[int, int, str], None] | None = None
    jobs: int = 1  # cases run at the same time (--jobs)
    deadline: float | None = None  # seconds the whole run may last (--deadline)
    keep_going: bool = False  # --keep-going: run every case even after a repeated fault


def template_of(command: str, profile: Profile | None) -> Template:
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ClientSetupError(f"--client {command!r}: {exc}") from None
    if not words:
        raise ClientSetupError("--client: the client command is empty")
    if not any("{agent}" in w for w in words):
        raise ClientSetupError("--client: the command must say where the agent command goes, "
                               "with {agent} (e.g. 'my-editor --agent-cmd {agent}')")
    t = Template(absolute_paths(words, os.getcwd()))
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


def double_command(directory: str, protocol: int, control: str) -> str:
    """A one-word agent command: a script that starts the double from any directory."""
    import conformance

    root = str(Path(conformance.__file__).resolve().parent.parent)
    code = ("import sys; sys.path.insert(0, " + repr(root) + "); "
            "from conformance.client.double import main; sys.exit(main())")
    path = os.path.join(directory, "acp-agent-double")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("#!/bin/sh\n"
                 f"exec {shlex.quote(sys.executable)} -c {shlex.quote(code)} "
                 f"--protocol {protocol} --control {shlex.quote(control)} \"$@\"\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def run_client_suite(run: ClientRun, cases: Sequence[Case], target_label: str) -> RunResult:
    profile_name = run.options.profile.name
    result = RunResult(__version__, target_label, "client", list(run.protocols), profile_name,
                       run.strict)
    client_cases = [c for c in cases if c.role == "client"]
    for c in client_cases:
        check_case(c)
    plan = [(p, c) for p in run.protocols for c in client_cases if c.applies_to(p, profile_name)]
    from conformance.runner import RunInterrupted, Shortcut, run_plan

    signum = run_plan(result, plan,
                      lambda protocol, case, signals, cutoff: run_client_case(
                          run, case, protocol, target_label, signals=signals, cutoff=cutoff),
                      handle_signals=run.handle_signals, progress=run.progress,
                      jobs=run.jobs, deadline=run.deadline,
                      shortcut=Shortcut(run.keep_going))
    for done in result.cases:
        if done.target_info:
            result.target_info = dict(done.target_info)
            break
    if signum:
        raise RunInterrupted(result, signum)
    return result


@dataclass
class Played:
    """One client case driven: its transcript, and a note when it ended early."""

    transcript: Transcript
    note: str = ""
    fault: str = ""  # the client fault it ended with and the step ("went silent at start")


def run_client_case(run: ClientRun, case: Case, protocol: int, target_label: str, *,
                    signals: Any = None, cutoff: Cutoff | None = None) -> CaseResult:
    """Drive one case, grade it with the case's checks, save its transcript if asked."""
    name = f"{case.id}@v{protocol}"
    cr = CaseResult(name, case.description, list(case.requirements), protocol)
    played = play_client_case(run, case, protocol, target_label, signals=signals,
                              cutoff=cutoff)
    transcript, cr.note, cr.fault = played.transcript, played.note, played.fault
    cr.target_info = _client_info(transcript)
    if cr.note.startswith((f"v{protocol} unsupported", NO_RELOAD)):
        cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, f"not testable: {cr.note}", case=name)
                       for r in case.requirements]
        cr.findings += [f.with_case(name) for f in grade(
            transcript.entries, protocol=protocol, options=run.options,
            select=["TARGET/negotiation"], role="client") if f.outcome != Outcome.NOT_APPLICABLE]
    else:
        # A case with controls reports a fault whose cause they rule out under MID-C-03.
        generic = ["MID-C-03"] if wants_controls(case) else []
        findings = grade(transcript.entries, protocol=protocol, options=run.options,
                         select=list(case.checks) + list(ALWAYS) + generic, role="client")
        cr.findings = [f.with_case(name) for f in apply_strict(findings, run.strict)]
    if run.transcripts is not None:
        from conformance.runner import safe_name

        path = Path(run.transcripts) / f"{safe_name(name)}.jsonl"
        transcript.save(path)
        cr.transcript_path = str(path)
    return cr


def play_client_case(run: ClientRun, case: Case, protocol: int, target_label: str, *,
                     signals: Any = None, controls: bool = True,
                     cutoff: Cutoff | None = None) -> Played:
    """Start the client, play the case's drive steps to it, stop it: the transcript.
    ``controls=False`` plays no control streams (the fuzzer's generated cases). When
    ``cutoff`` says so (``--deadline``) the case stops at once and what was recorded
    is graded."""
    name = f"{case.id}@v{protocol}"
    transcript = Transcript({"role": "client", "protocol": protocol,
                             "profile": run.options.profile.name, "target": target_label,
                             "case": name})
    played = Played(transcript)
    reloads = any(isinstance(step, dict) and "reload" in step for step in case.drive)
    if reloads and run.adapter is None and (run.profile is None or run.profile.load is None):
        played.note = NO_RELOAD + HOW_TO_RELOAD  # known before starting: nothing is played
        return played
    if (reloads and run.profile is not None and run.profile.load is not None
            and "{prompt}" in (run.command or "") and "{agent}" not in run.profile.load):
        played.note = NO_RELOAD + ONE_SHOT_RELOAD  # a pty client's load, given to a one-shot
        return played
    history: list[TurnScript] = []  # what a reload replays
    where, plays = "start", 0  # the step being played, named alike in every case
    ids = new_ids()
    current: list[TurnScript | None] = [None]
    client: Any = None

    def next_turn(conn: int) -> TurnScript | None:
        turn, current[0] = current[0], None  # each play is served once
        if turn is not None and client is not None and client.probe_missed:
            # The client already left a probe unanswered in this case (MID-C-08/probe
            # failed there): later turns do not wait out the probe timeout again.
            turn = replace(turn, await_probe=False)
        return turn

    response_id = run.options.profile.response_message_id
    # A client process needs a folder (the double's script, its socket, a working
    # folder); an adapter runs in this process and needs none.
    with (tempfile.TemporaryDirectory(prefix="acp-cc-") if run.adapter is None
          else contextlib.nullcontext("")) as tmp:
        control = None
        if run.adapter is not None:
            from conformance.client.adapter import AdapterClient, load_factory

            client = AdapterClient(load_factory(run.adapter), transcript=transcript,
                                   protocol=protocol, timeout=run.timeout,
                                   response_message_id=response_id, next_turn=next_turn)
            client.load_session = reloads
        else:
            from conformance.client.channel import SuiteSide

            assert run.command is not None
            template = template_of(run.command, run.profile)
            control = SuiteSide(tmp, transcript, protocol=protocol, wait=min(run.timeout, 5.0),
                                response_message_id=response_id, next_turn=next_turn)
            control.config["load_session"] = reloads
            agent = double_command(tmp, protocol, control.path)
            workdir = os.path.join(tmp, "work")
            os.mkdir(workdir)
            client = PtyClient(template, agent=agent, profile=run.profile, control=control,
                               transcript=transcript, protocol=protocol, timeout=run.timeout,
                               env=run.env, cwd=workdir, max_output=run.max_output,
                               turn_timeout=run.turn_timeout, cutoff=cutoff)
        try:
            try:
                if signals is not None:
                    signals.driving = True
                for step in case.drive:
                    check_cut(cutoff)
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
                            played.note = NO_RELOAD + HOW_TO_RELOAD
                            break
                        current[0] = build_reload(step["reload"], history, protocol)
                        client.reload(current[0])
                    else:
                        turn = build_turn(case, step["play"], protocol, ids,
                                          controls=controls)
                        current[0] = turn
                        client.play(turn)
                        history.append(turn)
                        if _asked_lower(client, protocol):
                            break  # one turn shows what the client does next; it is recorded
                        if turn.control:  # played the same way, right after the probe
                            current[0] = build_control(case, step["play"], protocol, ids)
                            client.play(current[0])
            finally:
                if signals is not None:
                    signals.driving = False
        except KeyboardInterrupt:
            if signals is None or not signals.enabled:
                raise
            played.note = (f"aborted: interrupted by "
                           f"{signal.Signals(signals.signum or 2).name}; graded what was recorded")
            transcript.add(0, "harness", "harness", event="note",
                           data={"note": "interrupted", "signal": signals.signum})
        except ClientCut as exc:  # --deadline, or a run that no longer needs the case
            from conformance.runner import CUT_NOTE

            played.note = (f"{CUT_NOTE} ({run.deadline or 0:g} s)" if exc.reason == "deadline"
                           else f"aborted: interrupted by {exc.reason}"
                           ) + "; graded what was recorded"
            transcript.add(0, "harness", "harness", event="note",
                           data={"note": "interrupted", "cut": exc.reason})
        except ClientAborted as exc:
            played.note = f"aborted: {exc}"
            played.fault = f"{exc.kind} at {where}" if exc.kind else ""
        finally:
            client.stop()
            if control is not None:
                _end_doubles(control)
                control.close()
        if _asked_lower(client, protocol):
            played.note = (f"v{protocol} unsupported by the client (it asked for "
                           f"{client.version_asked})")
    return played


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


def _end_doubles(control: Any) -> None:
    """Every double the client started is ended: wait for their reports to close, then kill."""
    deadline = time.monotonic() + 2.0
    while control.pids() and time.monotonic() < deadline:
        control.next_event(max(0.0, deadline - time.monotonic()))
    for pid in control.pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 2.0
    while control.pids() and time.monotonic() < deadline:
        control.next_event(max(0.0, deadline - time.monotonic()))


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
