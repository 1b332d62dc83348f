"""Playing agent-fuzzing steps (:mod:`conformance.agent.steps`) against a live agent.

:func:`perform` plays one step through a :class:`FuzzDriver` (the client driver
plus prompts of any content blocks and a cancel after a chosen number of
updates); :func:`play` records a whole step list on fresh processes (what
shrinking and ``replay`` do).

Starting a process is the expensive part of a step, so :class:`Spawner` can
keep one spare process started ahead of need; its output is recorded from the
moment it is put to use (an agent writes nothing before ``initialize``; if it
does, those lines are carried over).
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.agent.connection import GRACE
from conformance.agent.faults import DriveAborted, NotTestable
from conformance.agent.player import StepDriver, perform
from conformance.agent.steps import Step, StepError
from conformance.controlstream import PING
from conformance.grading import Scope
from conformance.lifecycle import stopped
from conformance.masking import Masker
from conformance.profiles import Profile
from conformance.transcript import Entry, Transcript
from conformance.transport import DEFAULT_GRACE, TargetExited, TargetProcess, TargetTimeout


class Spawner:
    """Starts agent processes, optionally keeping one spare started ahead of need."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 timeout: float = 5.0, prespawn: bool = False) -> None:
        self.argv = list(argv)
        self.env = dict(env or {})
        self.timeout = timeout
        self.prespawn = prespawn
        self.started = 0
        self._spare: TargetProcess | None = None
        self._retiring: list[threading.Thread] = []

    def spawn(self, transcript: Transcript, conn: int) -> TargetProcess:
        spare, self._spare = self._spare, None
        if spare is not None and spare.alive():
            proc = self._adopt(spare, transcript, conn)
        else:
            if spare is not None:
                spare.close(grace=0.5)
            proc = self._start(transcript, conn)
        self.started += 1
        if self.prespawn:
            self._spare = self._start(Transcript(), 0)
        return proc

    def _start(self, transcript: Transcript, conn: int) -> TargetProcess:
        return TargetProcess(self.argv, transcript, conn=conn, src="agent", env=self.env,
                             grace=min(DEFAULT_GRACE, self.timeout), write_timeout=self.timeout)

    def _adopt(self, proc: TargetProcess, transcript: Transcript, conn: int) -> TargetProcess:
        early = proc.transcript
        proc.transcript = transcript
        proc.conn = conn
        transcript.add(conn, "harness", "harness", event="start",
                       data={"argv": list(self.argv), "pid_role": "agent"})
        for e in list(early.entries)[1:]:  # anything written before it was put to use
            _copy_entry(e, transcript, conn)
        return proc

    def retire(self, proc: TargetProcess) -> None:
        """End a process in the background (its exit is still recorded)."""
        thread = threading.Thread(target=proc.close, name="retire", daemon=True)
        thread.start()
        self._retiring.append(thread)
        self._retiring = [t for t in self._retiring if t.is_alive()]

    def close(self) -> None:
        """End the spare and wait for the retiring processes."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.close(grace=0.5)
        for thread in self._retiring:
            thread.join()
        self._retiring.clear()


def _copy_entry(e: Entry, transcript: Transcript, conn: int) -> None:
    if e.stream == "harness":
        transcript.add(conn, e.src, e.stream, event=e.event, data=e.data)
        return
    if e.raw_b64 is not None:
        line = base64.b64decode(e.raw_b64)
    else:
        line = (e.raw or "").encode("utf-8", "surrogatepass")
    transcript.add(conn, e.src, e.stream, line, truncated=e.truncated)


@dataclass
class PromptCaps:
    """What the agent's initialize answer allows beyond the baseline."""

    embedded: bool = False  # embedded resources in prompts
    image: bool = False
    close: bool = False  # session/close

    @classmethod
    def read(cls, protocol: int, result: Any) -> PromptCaps:
        if not isinstance(result, dict):
            return cls()
        if protocol >= 2:
            session = _obj(result.get("capabilities")).get("session")
            prompt = _obj(_obj(session).get("prompt"))
            return cls(embedded=_on(prompt.get("embeddedContext")),
                       image=_on(prompt.get("image")), close=isinstance(session, dict))
        caps = _obj(result.get("agentCapabilities"))
        prompt = _obj(caps.get("promptCapabilities"))
        return cls(embedded=prompt.get("embeddedContext") is True,
                   image=prompt.get("image") is True,
                   close=_obj(caps.get("sessionCapabilities")).get("close") is not None)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _on(value: Any) -> bool:
    return value is True or isinstance(value, dict)


class FuzzDriver(StepDriver):
    """The step driver plus what fuzzing needs: processes from a :class:`Spawner`, the
    agent's prompt capabilities, and pings that say when its output is complete."""

    def __init__(self, argv: Sequence[str], transcript: Transcript, *, protocol: int,
                 timeout: float, cwd: str, env: Mapping[str, str] | None = None,
                 spawner: Spawner | None = None, profile: Profile | None = None) -> None:
        super().__init__(argv, transcript, protocol=protocol, timeout=timeout, cwd=cwd, env=env,
                         profile=profile)
        self.spawner = spawner or Spawner(argv, env=env, timeout=timeout)
        self.caps = PromptCaps()
        self.ping_answered = True

    def request(self, method: str, params: Any, *, waiting_for: str) -> Any:
        result = super().request(method, params, waiting_for=waiting_for)
        if method == "initialize":
            self.caps = PromptCaps.read(self.protocol, result)
        return result

    def start(self) -> None:
        self.conn += 1
        self.proc = self.spawner.spawn(self.transcript, self.conn)
        self.initialize()

    def retire(self) -> None:
        """Stop using the process and let it end in the background."""
        if self.proc is not None:
            self.spawner.retire(self.proc)
            self.proc = None

    def settle(self, quiet: float | None = GRACE,
               on_update: Callable[[Entry, dict[str, Any]], None] | None = None,
               why: str = "") -> None:
        """After a cancel or a replay: the ping answers as soon as the agent has caught
        up; only an agent that does not answer pings costs the quiet window. With
        prompts in flight (``on_update``) their turns go on: the quiet window waits."""
        if on_update is not None or not self.sync():
            super().settle(quiet, on_update, why)

    def sync(self, timeout: float = 2.0) -> bool:
        """Wait until the agent has answered a ping sent now, so every line it wrote
        before reading the ping is in the transcript. False if it did not answer (then
        only its exit shows that its output is complete); the ping is never graded."""
        proc = self.proc
        if proc is None or not self.ping_answered:
            return False
        rid = self._send_request(PING, {})
        deadline = time.monotonic() + timeout
        while rid not in self.responses:
            try:
                entry = proc.receive(deadline - time.monotonic())
            except (TargetTimeout, TargetExited):
                self.ping_answered = False
                self.note("no answer to the suite's ping: late output is graded at exit", {})
                return False
            if entry.error is None and entry.msg is not None:
                for msg in entry.msg if isinstance(entry.msg, list) else [entry.msg]:
                    self._dispatch(entry, msg, None)
        self.responses.pop(rid)
        return True


@dataclass
class AgentTarget:
    """An agent to play steps against."""

    command: list[str]
    label: str  # the command as the user gave it (recorded in transcript headers)
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 5.0  # longest silence while waiting for the agent
    masker: Masker | None = None  # masks secrets where transcripts record them (None: off)


@dataclass
class Played:
    """One play of a step list: its transcript, and why it stopped early (if it did)."""

    protocol: int
    steps: list[Step]
    transcript: Transcript
    note: str = ""  # "aborted: ..." (still graded), "not testable: ..." / "cannot play: ..."
    playable: bool = True  # False: the target could not take the steps (nothing to grade)


def run_transcript(target: AgentTarget, protocol: int, scope: Scope,
                   header: Mapping[str, Any] | None = None) -> Transcript:
    """A generated run's transcript: its header records what the run grades (``scope``)
    as a suite case's does, so the fuzzer, ``check`` and ``replay`` grade it alike."""
    return Transcript({"role": scope.role, "protocol": protocol, "profile": scope.profile,
                       "target": target.label, "case": "fuzz", "scope": scope.to_json(),
                       **(header or {})}, masker=target.masker)


def record_end(transcript: Transcript, exc: DriveAborted | NotTestable) -> None:
    """Record in the header how a generated run ended early, as a suite case records it:
    a fault is graded on what was recorded, a run the agent could not take is not."""
    transcript.header["ended"] = stopped(exc).to_json()


def play(target: AgentTarget, protocol: int, steps: Sequence[Step], *, scope: Scope,
         cwd: str, spawner: Spawner | None = None, header: Mapping[str, Any] | None = None,
         wait_exit: bool = True, profile: Profile | None = None) -> Played:
    """Play a step list on fresh processes and record it, graded as ``scope`` says. With
    ``wait_exit=False`` the last process ends in the background (its exit joins the
    transcript later); ``profile`` is the run's (the driver's idempotency keys)."""
    transcript = run_transcript(target, protocol, scope, header)
    spawner = spawner or Spawner(target.command, env=target.env)
    driver = FuzzDriver(target.command, transcript, protocol=protocol, timeout=target.timeout,
                        cwd=cwd, env=target.env, spawner=spawner, profile=profile)
    played = Played(protocol, list(steps), transcript)
    try:
        for step in steps:
            perform(driver, step, strict=False)
            driver.sync()  # as the state machine does: late lines stay with their step
        if wait_exit or not driver.ping_answered:
            driver.stop()
    except DriveAborted as exc:
        played.note = f"aborted: {exc}"
        record_end(transcript, exc)
    except NotTestable as exc:  # a failed negotiation is graded: the agent's fault
        played.note, played.playable = f"not testable: {exc}", bool(
            getattr(exc, "every_case", False))
        record_end(transcript, exc)
    except StepError as exc:
        played.note, played.playable = f"cannot play: {exc}", False
    finally:
        if wait_exit:
            driver.stop()
        else:
            driver.retire()
    return played


__all__ = ["AgentTarget", "FuzzDriver", "Played", "PromptCaps", "Spawner", "play", "record_end",
           "run_transcript"]
