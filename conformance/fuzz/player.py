"""Playing agent-fuzzing steps (:mod:`conformance.fuzz.steps`) against a live agent.

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

from conformance.controlstream import PING
from conformance.driver import GRACE, ClientDriver, DriveAborted, NotTestable, _RpcError
from conformance.fuzz.steps import Step, StepError, split
from conformance.masking import Masker
from conformance.transcript import Entry, Transcript
from conformance.transport import DEFAULT_GRACE, TargetExited, TargetProcess, TargetTimeout


@dataclass
class SessionBook:
    """The sessions of one fuzzed run: created IDs, the current one, those open on the
    current connection."""

    ids: list[str] = field(default_factory=list)
    current: int | None = None
    open: set[int] = field(default_factory=set)

    def current_open(self) -> bool:
        return self.current is not None and self.current in self.open


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


class StepDriver(ClientDriver):
    """The client driver plus the whole step vocabulary (``$defs/agentStep`` of the case
    schema): prompts of any content blocks, a cancel after a chosen number of updates,
    and switching between the sessions it created. The case runner plays agent cases
    with it, the fuzzer with :class:`FuzzDriver`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._blocks: list[Any] | None = None
        self._cancel_after: int | None = None
        self._cancel_sent = False
        self.sessions: list[str] = []  # every session created, in order (for switch)

    def new_session(self) -> str:
        sid = super().new_session()
        self.sessions.append(sid)
        return sid

    def switch(self, index: int) -> None:
        if not 0 <= index < len(self.sessions):
            raise StepError(f"switch to session #{index}, but only {len(self.sessions)} exist")
        self.session = self.sessions[index]

    def prompt_spec(self, spec: Mapping[str, Any]) -> Any:
        """Play one ``prompt`` step; the error the agent answered it with, or None."""
        if spec.get("retry"):
            return self.retry_prompt()
        self._blocks = list(spec["blocks"]) if spec.get("blocks") else None
        cancel_after = spec.get("cancel_after")
        self._cancel_after = cancel_after if isinstance(cancel_after, int) else None
        self._cancel_sent = False
        try:
            return self.prompt(str(spec.get("text", "")),
                               legacy_message_id=spec.get("legacy_message_id"),
                               meta_message_id=spec.get("meta_message_id"),
                               cancel=bool(spec.get("cancel")) and self._cancel_after is None,
                               in_flight=bool(spec.get("in_flight")))
        finally:
            self._blocks = None
            self._cancel_after = None

    def _send_cancel(self, sid: str) -> None:
        if not self._cancel_sent:
            self._cancel_sent = True
            self.cancelled.add(sid)
            self.notify("session/cancel", {"sessionId": sid})

    def _send_request(self, method: str, params: Any, *, fuzz: bool = False) -> int:
        if method == "session/prompt" and self._blocks is not None:
            params = {**params, "prompt": self._blocks}
        rid = super()._send_request(method, params, fuzz=fuzz)
        if method == "session/prompt" and self._cancel_after == 0:
            self._send_cancel(params["sessionId"])
        return rid

    def pump(self, done: Callable[[], bool], *, waiting_for: str,
             on_update: Callable[[Entry, dict[str, Any]], None] | None = None) -> None:
        limit, sid = self._cancel_after, self.session
        if not limit or sid is None or on_update is None:
            super().pump(done, waiting_for=waiting_for, on_update=on_update)
            return
        seen = 0

        def counting(entry: Entry, update: dict[str, Any]) -> None:
            nonlocal seen
            on_update(entry, update)
            seen += 1
            if seen >= limit:
                self._send_cancel(sid)

        super().pump(done, waiting_for=waiting_for, on_update=counting)


class FuzzDriver(StepDriver):
    """The step driver plus what fuzzing needs: processes from a :class:`Spawner`, the
    agent's prompt capabilities, and pings that say when its output is complete."""

    def __init__(self, argv: Sequence[str], transcript: Transcript, *, protocol: int,
                 timeout: float, cwd: str, env: Mapping[str, str] | None = None,
                 spawner: Spawner | None = None) -> None:
        super().__init__(argv, transcript, protocol=protocol, timeout=timeout, cwd=cwd, env=env)
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

    def settle(self, quiet: float = GRACE) -> None:
        """After a cancel or a replay: the ping answers as soon as the agent has caught
        up; only an agent that does not answer pings costs the quiet window."""
        if not self.sync():
            super().settle(quiet)

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


def perform(driver: FuzzDriver, book: SessionBook, step: Step) -> None:
    """Play one step. Raises DriveAborted / NotTestable like the runner's steps, and
    StepError for a step that cannot be played. An error answer to a session method is
    recorded (the transcript has it) and the run goes on."""
    name, args = split(step)
    try:
        if name == "start":
            book.open.clear()
            driver.start()
        elif name == "restart":
            driver.stop()
            book.open.clear()
            driver.start()
        elif name == "new_session":
            sid = driver.new_session()
            book.ids.append(sid)
            book.current = len(book.ids) - 1
            book.open.add(book.current)
        elif name == "switch":
            index = args.get("session")
            if not isinstance(index, int) or not 0 <= index < len(book.ids):
                raise StepError(f"switch to session #{index}, but only {len(book.ids)} exist")
            book.current = index
            driver.session = book.ids[index]
        elif name == "load":
            _need_session(book, name)
            driver.load()
            book.open.add(_current(book))
        elif name == "resume":
            _need_session(book, name)
            replay = args.get("replay", "none")
            driver.resume(None if replay == "none" else str(replay))
            book.open.add(_current(book))
        elif name == "close_session":
            _need_session(book, name)
            book.open.discard(_current(book))
            driver.close_session()
        elif name == "prompt":
            _need_session(book, name)
            driver.prompt_spec(args)
    except _RpcError as exc:
        driver.note("step answered with an error", {"step": name, "error": str(exc)})


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


def play(target: AgentTarget, protocol: int, steps: Sequence[Step], *, cwd: str,
         spawner: Spawner | None = None, header: Mapping[str, Any] | None = None,
         wait_exit: bool = True) -> Played:
    """Play a step list on fresh processes and record it. With ``wait_exit=False`` the
    last process ends in the background (its exit joins the transcript later)."""
    transcript = Transcript({"role": "agent", "protocol": protocol, "target": target.label,
                             "case": "fuzz", **(header or {})}, masker=target.masker)
    spawner = spawner or Spawner(target.command, env=target.env)
    driver = FuzzDriver(target.command, transcript, protocol=protocol, timeout=target.timeout,
                        cwd=cwd, env=target.env, spawner=spawner)
    book = SessionBook()
    played = Played(protocol, list(steps), transcript)
    try:
        for step in steps:
            perform(driver, book, step)
            driver.sync()  # as the state machine does: late lines stay with their step
        if wait_exit or not driver.ping_answered:
            driver.stop()
    except DriveAborted as exc:
        played.note = f"aborted: {exc}"
    except NotTestable as exc:
        played.note, played.playable = f"not testable: {exc}", False
    except StepError as exc:
        played.note, played.playable = f"cannot play: {exc}", False
    finally:
        if wait_exit:
            driver.stop()
        else:
            driver.retire()
    return played


def _need_session(book: SessionBook, name: str) -> None:
    if book.current is None:
        raise StepError(f"{name} needs a session, but no new_session came before it")


def _current(book: SessionBook) -> int:
    assert book.current is not None
    return book.current


__all__ = ["PING", "AgentTarget", "FuzzDriver", "Played", "PromptCaps", "SessionBook", "Spawner",
           "StepDriver", "perform", "play"]
