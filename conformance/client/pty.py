"""Driving a client process through a pty, the way a person would (pexpect spawns it).

Interactive clients are started once per case: the driver waits until the
profile's ``ready`` regex matches at the end of the output, types ``submit``
with the prompt, waits until the agent double reports that the turn ended
(the stream was played and the probe answered or timed out) *and* the client
shows ``ready`` again, then reads the render with the profile's ``message``
regex. One-shot clients (``{prompt}`` in the command) are started once per
turn and read when they exit. Without a profile the driver types
``{prompt}\\r`` once the client has opened a session with its agent, and
observes nothing.

Every wait ends when output or a double's report arrives, or after
``timeout`` seconds of silence. A hang, a crash, a flood of output or a
client that never shows ``ready`` becomes a harness event in the transcript
(graded under MID-C-08) and ends the case with :class:`ClientAborted`. The
client runs in its own session and process group; :meth:`PtyClient.stop` ends
the group, and the runner also ends any double the client left behind.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.agent.connection import CUT_POLL, TURN_TIMEOUT_FACTOR
from conformance.client.channel import SuiteSide
from conformance.client.double_engine import DoubleTally
from conformance.client.profile import Profile, parse_messages, screen_lines, strip_ansi
from conformance.client.script import TurnScript
from conformance.lifecycle import CaseAborted, CaseCut, Cutoff
from conformance.timers import record as record_timer
from conformance.transcript import Transcript
from conformance.transport import TargetCommandError
from conformance.transport.process import signals_held

DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024  # bytes a client may print while the suite waits once
TAIL = 2000
DIMENSIONS = (60, 1000)  # rows, columns: wide, so clients do not wrap rendered messages


class ClientAborted(CaseAborted):
    """The client hung, exited or flooded: the case stops; the transcript says why.

    ``kind`` names the fault without the case's own words ("went silent",
    "exited"); the runner adds the step it happened at, so two cases that end
    the same way at the same step are seen to repeat (see ``runner.Shortcut``).
    """

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class ClientCut(ClientAborted, CaseCut):
    """The case was cut from outside (``--deadline``, or a run that no longer needs it);
    ``reason`` says which. Not the client's fault."""

    def __init__(self, reason: str) -> None:
        CaseCut.__init__(self, reason)
        self.kind = ""


def check_cut(cutoff: Cutoff | None) -> None:
    """Raise :class:`ClientCut` when the case's Cutoff says it must stop now."""
    reason = cutoff.reason() if cutoff is not None else ""
    if reason:
        raise ClientCut(reason)


@dataclass
class Template:
    """The client command with ``{agent}`` (and for one-shot clients ``{prompt}``) in it."""

    words: list[str]

    @property
    def one_shot(self) -> bool:
        return any("{prompt}" in w for w in self.words)

    def argv(self, agent: str, prompt: str | None = None, session: str | None = None
             ) -> list[str]:
        out = []
        for w in self.words:
            w = w.replace("{agent}", agent)
            if prompt is not None:
                w = w.replace("{prompt}", prompt)
            if session is not None:
                w = w.replace("{session}", session)
            out.append(w)
        return out


class PtyClient(DoubleTally):
    """One client under test, driven through a pty."""

    def __init__(self, template: Template, *, agent: str, profile: Profile | None,
                 control: SuiteSide, transcript: Transcript, protocol: int, timeout: float,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 max_output: int = DEFAULT_MAX_OUTPUT, turn_timeout: float | None = None,
                 cutoff: Cutoff | None = None) -> None:
        super().__init__()
        self.cutoff = cutoff  # looked at while every wait lasts (--deadline)
        self.template = template
        self.agent = agent
        self.profile = profile
        self.control = control
        self.transcript = transcript
        self.protocol = protocol
        self.timeout = timeout
        # Longest wait overall, even while output keeps coming (a client that never
        # shows ready but never falls silent either).
        self.turn_timeout = turn_timeout or TURN_TIMEOUT_FACTOR * timeout
        self.env = dict(os.environ, **(env or {}))
        self.cwd = cwd
        self.max_output = max_output
        self.child: Any = None
        self.buf = bytearray()
        self.eof = False
        self.first_double = 0  # the control connection of the first double it started
        self.read_bytes = 0
        self.started: list[int] = []  # pids of every client process started

    # -- process ---------------------------------------------------------------
    def _spawn(self, argv: Sequence[str]) -> None:
        import pexpect

        with signals_held():  # a stop lands once the child is built and its pid kept
            try:
                self.child = pexpect.spawn(argv[0], list(argv[1:]), env=self.env,
                                           cwd=self.cwd, dimensions=DIMENSIONS,
                                           encoding=None, echo=True)
            except pexpect.ExceptionPexpect as exc:
                raise TargetCommandError(f"cannot start the client: {exc}") from None
            self.started.append(self.child.pid)
        # pexpect waits 50 ms before every send and 100 ms after closing the pty; the
        # suite types only once the client shows ready, so it waits only where the
        # profile asks (send_delay).
        self.child.delaybeforesend = (self.profile.send_delay or None) if self.profile else None
        self.child.ptyproc.delayafterclose = self.child.ptyproc.delayafterterminate = 0.0
        self.buf.clear()
        self.eof = False
        self.first_double = len(self.control.doubles)
        self.transcript.add(self._conn(), "harness", "harness", event="start",
                            data={"argv": list(argv), "pid_role": "client",
                                  "pid": self.child.pid, "pgid": self.child.pid})

    def _conn(self) -> int:
        return max(self.control.doubles, default=0)

    def alive(self) -> bool:
        return self.child is not None and bool(self.child.isalive())

    def stop(self) -> None:
        """Quit politely if the profile says how, then end the client's process group."""
        child = self.child
        if child is None:
            return
        if self.profile is not None and self.profile.quit and child.isalive() and not self.eof:
            try:
                child.send(self.profile.quit.encode("utf-8"))
                self._wait(lambda: self.eof, "the client to quit", quiet=True,
                           limit=min(self.timeout, 2.0))
            except ClientAborted:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not child.isalive():
                break
            try:
                os.killpg(child.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            deadline = time.monotonic() + 2.0
            while child.isalive() and time.monotonic() < deadline:
                time.sleep(0.02)  # reaping a signalled child; bounded, not a wait for data
        child.delayafterclose = child.delayafterterminate = 0.0
        try:
            child.close(force=True)
        except Exception:  # noqa: BLE001, S110 - pexpect raises its own types on a dead child
            pass
        self.child = None

    # -- waiting -------------------------------------------------------------------
    def _text(self, since: int = 0) -> str:
        return bytes(self.buf[since:]).decode("utf-8", errors="replace")

    def _tail(self) -> str:
        return strip_ansi(self._text(max(0, len(self.buf) - TAIL * 2)))[-TAIL:]

    def _wait(self, done: Callable[[], bool], waiting_for: str, *, quiet: bool = False,
              limit: float | None = None) -> None:
        """Read output and double reports until ``done()``; ``timeout`` s of silence ends it."""
        silence = limit if limit is not None else self.timeout
        deadline = time.monotonic() + silence
        overall = time.monotonic() + max(silence, self.turn_timeout)
        wake = self.control.wake_fd
        budget = self.read_bytes + self.max_output
        while not done():
            check_cut(self.cutoff)
            remaining = min(deadline, overall) - time.monotonic()
            if remaining <= 0:
                kept_coming = time.monotonic() >= overall
                if not quiet:
                    self._event("timeout", {"timeout": silence, "waiting_for": waiting_for,
                                            "deadline": self.turn_timeout if kept_coming
                                            else None})
                    record_timer(self.transcript.header,
                                 "turn timeout" if kept_coming else "silence timeout",
                                 self.turn_timeout if kept_coming else silence,
                                 "--turn-timeout" if kept_coming else "--timeout",
                                 f"waiting for {waiting_for}", len(self.transcript.entries) - 1)
                raise ClientAborted(f"timeout waiting for {waiting_for}" + (
                    f" (--turn-timeout {self.turn_timeout:g} s)" if kept_coming else ""),
                    "kept writing past --turn-timeout" if kept_coming else "went silent")
            fds = [wake] if self.eof or self.child is None else [wake, self.child.child_fd]
            ready, _, _ = select.select(fds, [], [], min(remaining, CUT_POLL))
            if wake in ready:
                self._tally_reports()
                deadline = time.monotonic() + silence
            if self.child is not None and not self.eof and self.child.child_fd in ready:
                try:
                    data = os.read(self.child.child_fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    self.eof = True
                    continue
                self.buf += data
                self.read_bytes += len(data)
                deadline = time.monotonic() + silence
                if self.read_bytes > budget:
                    self._event("flood", {"limit": self.max_output, "waiting_for": waiting_for})
                    raise ClientAborted(f"the client flooded its output ({self.max_output} bytes)",
                                        "flooded its output")
            if self.eof and not done():
                self._settle(silence)  # a one-shot client's turn ends as it exits, too
                if done():
                    return  # the turn had ended before the exit: the next step meets it
                rc = self._reap()
                if not quiet:
                    self._event("early-exit", {"waiting_for": waiting_for, "returncode": rc,
                                               "signal": None})
                raise ClientAborted(f"the client exited while the suite waited for {waiting_for}",
                                    "exited")

    def _settle(self, limit: float) -> None:
        """The client exited: wait, at most ``limit`` s, until the agents it started have
        closed their reports. A double reports each line before it writes it, but on its own
        channel, which the suite may read after it reads the client's exit: what the client
        was sent before it died is in the transcript before its exit, whichever the suite
        read first."""
        end = time.monotonic() + limit
        wake = self.control.wake_fd
        while self._reporting():
            check_cut(self.cutoff)
            left = end - time.monotonic()
            if left <= 0:
                break
            if select.select([wake], [], [], min(left, CUT_POLL))[0]:
                self._tally_reports()

    def _reporting(self) -> bool:
        """Does an agent double this client process started still report?"""
        return any(not d.closed for d in list(self.control.doubles.values())
                   if d.conn >= self.first_double)

    def _tally_reports(self) -> None:
        """Count the doubles' events the control channel has woken the suite for."""
        self.control.drain_wake()
        while (ev := self.control.next_event(0)) is not None:
            self.count(ev.name, ev.data)

    def _reap(self) -> int | None:
        child = self.child
        if child is None:
            return None
        deadline = time.monotonic() + 2.0
        while child.isalive() and time.monotonic() < deadline:
            time.sleep(0.02)  # the pty closed; the process is about to be reaped
        if child.isalive():
            return None
        return child.exitstatus if child.exitstatus is not None else (
            -child.signalstatus if child.signalstatus else None)

    def _event(self, event: str, data: dict[str, Any]) -> None:
        self.transcript.add(self._conn(), "harness", "harness", event=event,
                            data={**data, "output_tail": self._tail()})

    def _ready_at_end(self, since: int) -> bool:
        assert self.profile is not None and self.profile.ready is not None
        # Ready is what the client shows last: only the tail needs looking at.
        text = strip_ansi(self._text(max(since, len(self.buf) - 65536))).replace("\r", "")
        last = None
        for last in self.profile.ready.finditer(text):  # noqa: B007  (the last match)
            pass
        return last is not None and last.end() >= len(text.rstrip())

    # -- the driving -------------------------------------------------------------------
    def start(self) -> None:
        if self.template.one_shot:
            return
        self._spawn(self.template.argv(self.agent))
        if self.profile is not None:
            ready = self.profile.ready.pattern if self.profile.ready else "?"
            self._wait(lambda: self._ready_at_end(0), f"the client to show ready ({ready})")
        else:
            self._wait(lambda: self.sessions > 0,
                       "the client to start its agent and open a session")

    def play(self, turn: TurnScript) -> None:
        target = self.turns_ended + 1
        if self.template.one_shot:
            self._spawn(self.template.argv(self.agent, turn.prompt))
            self._wait_turn(turn, 0, lambda: self.eof and self.turns_ended >= target,
                            f"the one-shot client to play turn {turn.name} and exit")
            rc = self._reap()
            if rc not in (0, None):
                self._event("early-exit", {"waiting_for": f"turn {turn.name} to end cleanly",
                                           "returncode": rc, "signal": None})
                self._observe(turn, 0, exited=f"the client exited with code {rc}")
                raise ClientAborted(f"the one-shot client exited with code {rc}",
                                    f"exited with code {rc}")
            self._observe(turn, 0)
            self.child = None
            return
        since = len(self.buf)
        submit = self.profile.submit if self.profile and self.profile.submit else "{prompt}\r"
        self.child.send(submit.replace("{prompt}", turn.prompt).encode("utf-8"))
        if self.profile is not None:
            def done() -> bool:
                return self.turns_ended >= target and self._ready_at_end(since)
        else:
            def done() -> bool:
                return self.turns_ended >= target
        self._wait_turn(turn, since, done, f"turn {turn.name} to end and the client to show ready")
        self._observe(turn, since)

    def _wait_turn(self, turn: TurnScript, since: int, done: Callable[[], bool],
                   waiting_for: str) -> None:
        """Wait for a turn (or a reload); a client that fails on the way is observed as
        gone (what it showed counts as a crash after this stream). A cut is not the
        client's doing: nothing is observed."""
        try:
            self._wait(done, waiting_for)
        except ClientCut:
            raise
        except ClientAborted as exc:
            self._observe(turn, since, exited=str(exc))
            raise

    def can_reload(self) -> bool:
        return self.profile is not None and self.profile.load is not None

    def can_reconnect(self) -> bool:
        """An interactive client can be shown its agent hanging up and typed a new load."""
        return self.can_reload() and not self.template.one_shot

    def reload(self, turn: TurnScript) -> None:
        """Reload the session the client has open (MID-C-07): type the profile's ``load``;
        a one-shot client is started with the ``load`` command line and prompts once."""
        assert self.profile is not None and self.profile.load is not None
        session = self.session_id or "sess-1"
        if self.template.one_shot:
            import shlex

            target = self.turns_ended + 1
            self._spawn(Template(shlex.split(self.profile.load)).argv(self.agent, turn.prompt,
                                                                      session))
            done = lambda: self.eof and self.turns_ended >= target
            waiting_for = f"the one-shot client to resume session {session} and exit"
            since = 0
        elif turn.hangup:  # the double hangs up mid-replay: the client shows ready again
            target = self.hangups + 1
            since = len(self.buf)
            self.child.send(self.profile.load.replace("{session}", session).encode("utf-8"))
            done = lambda: self.hangups >= target and self._ready_at_end(since)
            waiting_for = (f"the client to show ready after its agent hung up in the middle of "
                           f"the replay of session {session}")
        else:
            target = self.loads_ended + 1
            since = len(self.buf)
            self.child.send(self.profile.load.replace("{session}", session).encode("utf-8"))
            done = lambda: self.loads_ended >= target and self._ready_at_end(since)
            waiting_for = f"the client to reload session {session} and show ready"
        self._wait_turn(turn, since, done, waiting_for)
        self._observe(turn, since)
        if self.template.one_shot:
            self._reap()
            self.child = None

    def _observe(self, turn: TurnScript, since: int, *, exited: str | None = None) -> None:
        if self.profile is None:
            return
        cumulative = self.profile.render == "cumulative" or self.template.one_shot
        lines = screen_lines(self._text(since), last_screen=cumulative)
        data: dict[str, Any] = {
            **turn.observed_fields(), "protocol": self.protocol, "source": "pty",
            "render": "cumulative" if cumulative else "incremental",
            "kinds": list(self.profile.show), "shown": parse_messages(self.profile, lines)}
        if exited:
            data["exited"] = True
            data["why"] = exited
            data["tail"] = self._tail()
        self.transcript.add(self._conn(), "harness", "harness", event="observed", data=data)
