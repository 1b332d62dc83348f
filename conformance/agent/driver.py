# long: one state machine over one connection; v1 and v2 differ by a branch inside each step
"""The driver that plays the client: runs a case's steps against a live agent.

It performs the handshake (v1 or v2 as asked), answers every agent->client
request, and waits only on messages: each wait ends when the awaited message
arrives, or after ``timeout`` seconds with a ``timeout`` event in the
transcript. It never grades anything; checkers read the transcript afterwards.

Why this module stays over ~400 lines: :class:`ClientDriver` is one state
machine over one connection, and protocol v1 and v2 differ only in a branch or
two inside each step (the handshake's fields, how a turn ends, load or resume),
so splitting by version would write each step twice. The exceptions and
:class:`Cutoff` above it are what the runner, the plugin and the fuzzer catch
and pass in; they belong with the waits that raise and honour them.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance import TOOL_NAME, __version__, model
from conformance.lifecycle import CaseAborted, CaseCut, CaseNotPlayable, Cutoff
from conformance.profiles import PROFILES
from conformance.results import Reason
from conformance.timers import record as record_timer
from conformance.transcript import Entry, Transcript
from conformance.transport import DEFAULT_GRACE, TargetExited, TargetProcess, TargetTimeout

TURN_TIMEOUT_FACTOR = 6  # default --turn-timeout: this many times --timeout


# Seconds of silence that close a cancelled turn or a replay (catalogue MID-A-09's
# grace window), so late updates are attributed to what they trail.
GRACE = 0.25


CUT_POLL = 0.25  # seconds between looks at the case's Cutoff while a wait lasts

# A cancelled turn gets session/cancel at its first agent output, or, when none has come,
# this share of --timeout after the prompt: a turn that waits, silent, for the cancel is
# cancelled and graded, not failed as a hang. Half the silence a wait allows: late enough
# that a busy machine's slow first chunk is not overtaken, early enough to be answered.
CANCEL_SHARE = 0.5


class DriveAborted(CaseAborted):
    """The target hung or died: the case stops; what was recorded is still graded.

    ``fault`` names the target fault and the step it happened at ("went silent at the
    session/prompt response"), or is empty when the abort says nothing about later
    cases. The runner stops a protocol version when consecutive cases end with the
    same fault (see ``runner.Shortcut``).
    """


class DriveTimeout(DriveAborted):
    """The target went silent (or never stopped writing) past the wait's limit."""


class SameForEveryCase(DriveAborted):
    """A fault every later case of this protocol version would repeat, known from one
    case (the first handshake never answered, a v2 claim spoken in v1): the runner
    does not wait for a second case to show it."""

    every_case = True


class DriveCut(DriveAborted, CaseCut):
    """The case was cut from outside (``--deadline``, a signal, or a run that no longer
    needs it); ``reason`` says which. Not the target's fault."""


class NotTestable(CaseNotPlayable):
    """The target cannot take this case (v2 unsupported, no session/load, manual auth)."""


class NegotiationFailed(NotTestable):
    """The agent did not negotiate the version the case plays, or did not speak the one it
    answered (an error to ``initialize``; a v1 turn after answering 2; v2 updates after
    answering 1). Every case of the version would repeat it: they are not run, and the
    case's transcript shows it to ``TARGET/negotiation/agent`` (fail), once."""

    every_case = True

    def __init__(self, what: str) -> None:
        super().__init__(f"not run: {what}", Reason.NOT_RUN)


class RequestRefused(NotTestable):
    """The agent answered a request the case needs (``session/new``, ``session/prompt``,
    ``session/load``, ``session/resume``) with an error: the case is not run, and the
    error is its reason."""

    def __init__(self, method: str, error: str) -> None:
        super().__init__(f"not run: the agent refused {method} ({error})", Reason.NOT_RUN)
        self.method = method


#: What a prompt step's ``invalid_key`` sends as ``idempotencyKey`` (outside 1 to 255).
INVALID_KEYS = {"empty": "", "too-long": "k" * 256}


@dataclass
class AgentInfo:
    protocol: int | None = None
    name: str | None = None
    version: str | None = None
    load_session: bool = False
    resume: bool = False
    auth_methods: list[Any] = field(default_factory=list)
    no_session: bool = False  # v2: capabilities without the session marker
    addressed: list[str] = field(default_factory=list)  # v2: drafted ID-addressed methods


NO_SESSION_CAPABILITY = ("the agent negotiated v2 but does not advertise capabilities.session "
                         "(the v2 session methods are opt-in): its session cases do not apply")


class ClientDriver:
    """Plays the ACP client over a TargetProcess, one connection at a time."""

    def __init__(self, argv: Sequence[str], transcript: Transcript, *, protocol: int,
                 timeout: float, cwd: str, env: Mapping[str, str] | None = None,
                 turn_timeout: float | None = None, cutoff: Cutoff | None = None,
                 grace: float | None = None) -> None:
        self.argv = list(argv)
        self.grace = grace if grace else GRACE  # MID-A-09's grace window (--grace)
        self.transcript = transcript
        self.protocol = protocol
        self.timeout = timeout  # longest silence in a wait
        # Longest wait overall, even while lines keep coming (a stream that never ends).
        self.turn_timeout = turn_timeout if turn_timeout else TURN_TIMEOUT_FACTOR * timeout
        self.cwd = cwd
        self.env = dict(env or {})
        self.proc: TargetProcess | None = None
        self.exit_seen = False  # this connection's early exit is recorded (see _exited)
        self.conn = -1
        self.ids = itertools.count(0)
        self.info = AgentInfo()
        self.session: str | None = None
        self.cancelled: set[str] = set()
        self.responses: dict[Any, Entry] = {}
        self.cutoff = cutoff or Cutoff()
        self.unmatched = 0  # responses under an id the driver never sent
        self.last_rid = -1
        self.v2_update: str | None = None  # the first v2-only update of a v1 connection
        # Whether a turn spoken in the other version ends the case (TARGET/negotiation/agent);
        # off for a proxy, whose adapting is graded by its own rules.
        self.check_spoken_version = True
        # v2 prompts in flight (see prompt): the IDs their responses named (None: none),
        # the idle updates and the echoed user-message IDs seen since the first was sent.
        self.flight: list[Any] = []
        self.idles = 0
        self.echoed: set[Any] = set()
        # v2: a turn was accepted (a prompt response, an echo, a running state, agent output)
        # since the last idle that ended one. An idle without it is a state report (a real
        # agent reports idle as a prompt arrives, and after a resume): no turn's end.
        self.turn_running = False
        # v2 session/prompt idempotencyKey (catalogue K.4), under a profile that has it (the
        # transcript header names the run's profile): one fresh key per prompt, repeated by
        # retry_prompt.
        profile = PROFILES.get(str(transcript.header.get("profile", "")))
        self.idempotency_keys = bool(profile and profile.idempotency_keys)
        self.last_prompt: dict[str, Any] | None = None

    # -- process ---------------------------------------------------------
    def start(self) -> None:
        self.conn += 1
        self.exit_seen = False
        self.proc = TargetProcess(self.argv, self.transcript, conn=self.conn, src="agent",
                                  env=self.env, grace=min(DEFAULT_GRACE, self.timeout),
                                  write_timeout=self.timeout)
        self.initialize()

    def stop(self, grace: float | None = None) -> None:
        if self.proc is not None:
            if self.proc.exit_info is None and not self.exit_seen and (
                    self.proc.stdout_closed.is_set() or self.proc.exited.is_set()):
                self._exited("the next step (the suite had not closed its stdin)")  # on its own
            self.proc.close(grace)
            self.proc = None

    # -- handshake -------------------------------------------------------
    def initialize(self) -> None:
        if self.protocol >= 2:
            params: dict[str, Any] = {
                "protocolVersion": 2, "info": {"name": TOOL_NAME, "version": __version__},
                "capabilities": {}}
        else:
            params = {"protocolVersion": 1,
                      "clientCapabilities": {"fs": {"readTextFile": False,
                                                    "writeTextFile": False},
                                             "terminal": False},
                      "clientInfo": {"name": TOOL_NAME, "version": __version__}}
        try:
            result = self.request("initialize", params, waiting_for="the initialize response")
        except _RpcError as err:  # the spec answers an unsupported version with the latest
            raise NegotiationFailed(f"the agent answered the v{self.protocol} initialize with "
                                    f"an error ({err})") from None
        except DriveTimeout as exc:
            if self.conn != 0:
                raise
            raise SameForEveryCase(
                f"the agent never answered initialize ({exc})",
                f"the agent did not answer the v{self.protocol} initialize") from None
        if not isinstance(result, dict):
            raise DriveAborted("initialize failed")
        pv = result.get("protocolVersion")
        self.info.protocol = pv if isinstance(pv, int) else None
        if self.protocol >= 2 and pv != 2:
            self.note("v2 unsupported", {"answered_protocolVersion": pv})
            raise NotTestable(f"v2 unsupported: the agent answered protocolVersion {pv!r}",
                              Reason.VERSION_UNSUPPORTED)
        if self.protocol < 2 and pv != 1:
            raise NotTestable(f"v1 unsupported: the agent answered protocolVersion {pv!r}",
                              Reason.VERSION_UNSUPPORTED)
        info = result.get("info") or result.get("agentInfo") or {}
        if isinstance(info, dict):
            self.info.name, self.info.version = info.get("name"), info.get("version")
        caps = result.get("capabilities") or result.get("agentCapabilities") or {}
        if not isinstance(caps, dict):
            caps = {}
        if self.protocol >= 2:
            session_caps = caps.get("session")
            self.info.load_session = False
            self.info.resume = isinstance(session_caps, dict)
            # A v2-shaped result (its capabilities object) without the session marker: the
            # agent made no session promise (catalogue Appendix I). A result without that
            # object is no v2 result at all: driven as it is, its faults reported.
            self.info.no_session = (isinstance(result.get("capabilities"), dict)
                                    and not isinstance(session_caps, dict))
            self.info.addressed = model.addressed_methods(caps)
        else:
            self.info.load_session = caps.get("loadSession") is True
            scaps = caps.get("sessionCapabilities") or {}
            self.info.resume = isinstance(scaps, dict) and scaps.get("resume") is not None
        methods = result.get("authMethods")
        self.info.auth_methods = methods if isinstance(methods, list) else []

    def authenticate(self) -> None:
        """Agents with an ``agent`` method get it; others need a person."""
        for m in self.info.auth_methods:
            if isinstance(m, dict) and m.get("type", "agent") == "agent":
                mid = m.get("id") or m.get("methodId")
                method = "auth/login" if self.protocol >= 2 else "authenticate"
                self.request(method, {"methodId": mid}, waiting_for=f"the {method} response")
                return
        raise NotTestable("needs manual auth: the agent offers no automatic auth method")

    # -- session steps ----------------------------------------------------
    def new_session(self) -> str:
        if self.protocol >= 2 and self.info.no_session:
            # v2 session methods are opt-in behind the capabilities.session marker (catalogue
            # Appendix I): an agent without it made no session promise to test.
            raise NotTestable(NO_SESSION_CAPABILITY, Reason.NO_CAPABILITY)
        params: dict[str, Any] = {"cwd": self.cwd, "mcpServers": []}
        try:
            result = self.request("session/new", params, waiting_for="the session/new response")
        except _RpcError as err:
            if err.code == -32000 and self.info.auth_methods:
                self.authenticate()
                result = self.request("session/new", params,
                                      waiting_for="the session/new response")
            else:
                raise RequestRefused("session/new", str(err)) from None
        sid = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(sid, str):
            raise DriveAborted("session/new returned no sessionId")
        self.session = sid
        return sid

    def prompt(self, text: str, *, legacy_message_id: str | None = None,
               meta_message_id: str | None = None, cancel: bool = False,
               cancel_after: int | None = None, in_flight: bool = False,
               invalid_key: str | None = None) -> Any:
        """Play one turn; the error the agent answered the prompt with, or None.

        The one way the agent role cancels a turn: ``cancel`` sends ``session/cancel`` at
        the agent's first output (or, when none comes, after a share of ``--timeout``);
        ``cancel_after`` once that many of the turn's updates have arrived (0: right after
        the request). Either way the turn then gets MID-A-09's grace window.

        v2 ``in_flight``: wait only for the prompt's acceptance, so the next prompt is sent
        while this one runs; the next prompt without it then waits for every accepted
        prompt's turn to end: one idle each, or an idle after the echoes of all the IDs
        their responses named (an agent may queue them and end them with one idle).

        ``invalid_key`` (``empty``, ``too-long``): under a profile with keys, send that
        ``idempotencyKey`` (outside 1 to 255 characters) instead of a fresh one."""
        sid = self._sid()
        params: dict[str, Any] = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        fuzz = False
        if legacy_message_id is not None:
            params["messageId"] = legacy_message_id
            fuzz = True
        if meta_message_id is not None:
            params["_meta"] = {"messageId": meta_message_id}
            fuzz = True
        if self.idempotency_keys and self.protocol >= 2:
            params["idempotencyKey"] = INVALID_KEYS.get(str(invalid_key),
                                                        f"key-{secrets.token_hex(12)}")
        self.last_prompt = params
        rid = self._send_request("session/prompt", params, fuzz=fuzz)
        cancel_at = time.monotonic() + CANCEL_SHARE * self.timeout
        cancelling = cancel or cancel_after is not None
        in_flight = in_flight and self.protocol >= 2
        state: dict[str, bool] = {"idle": False, "agent_output": False, "cancel_sent": False,
                                  "state_seen": False, "v1_turn": False, "all_echoed": False}
        updates = [0]  # the turn's session/update notifications so far (for cancel_after)

        def send_cancel() -> None:
            state["cancel_sent"] = True
            self.cancelled.add(sid)
            self.notify("session/cancel", {"sessionId": sid})

        if cancel_after == 0:
            send_cancel()
        response: list[Entry] = []  # the prompt response, once it arrives
        flight = self.flight  # earlier in-flight prompts: the IDs their responses named
        needed: list[Any] = list(flight)

        if not flight:
            self.turn_running = False  # no turn of this session runs before this prompt

        def on_update(entry: Entry, update: dict[str, Any]) -> None:
            kind = update.get("sessionUpdate")
            updates[0] += 1
            if (cancel_after is not None and not state["cancel_sent"]
                    and updates[0] >= cancel_after):
                send_cancel()
            if kind == "state_update":
                state["state_seen"] = True
            if kind in ("agent_message_chunk", "agent_thought_chunk", "agent_message",
                        "agent_thought"):
                state["agent_output"] = True
            if kind in ("user_message", "user_message_chunk"):
                self.echoed.add(update.get("messageId"))
            if rid in self.responses or kind in model.WITH_SESSION_KINDS or kind in (
                    "tool_call", "tool_call_update") or (
                    kind == "state_update" and update.get("state") == "running"):
                self.turn_running = True
            if (kind == "state_update" and update.get("state") == "idle"
                    and self.turn_running):
                self.turn_running = False
                state["idle"] = True
                self.idles += 1
                if response and needed and all(m in self.echoed for m in needed):
                    state["all_echoed"] = True  # (this prompt's ID among them: answered)

        def done() -> bool:
            if cancel and cancel_after is None and not state["cancel_sent"] and (
                    state["agent_output"] or time.monotonic() >= cancel_at):
                if not state["agent_output"]:
                    self.note("cancel sent before any agent output",
                              {"after_seconds": CANCEL_SHARE * self.timeout})
                    self._clock("cancel timer", CANCEL_SHARE * self.timeout, "--timeout",
                                "half of --timeout: no agent output came to cancel at")
                send_cancel()
            if rid in self.responses and not response:
                response.append(self.responses[rid])
                if isinstance(response[0].msg, dict) and "result" in response[0].msg:
                    self.turn_running = True  # accepted: the next idle may end its turn
                result = response[0].msg.get("result") if isinstance(
                    response[0].msg, dict) else None
                mid = result.get("messageId") if isinstance(result, dict) else None
                if isinstance(mid, str):
                    needed.append(mid)
            if not response:
                return False
            if self.protocol >= 2:
                resp = response[0]
                if isinstance(resp.msg, dict) and "error" in resp.msg:
                    return True
                result = resp.msg.get("result") if isinstance(resp.msg, dict) else None
                if (self.check_spoken_version and isinstance(result, dict)
                        and "stopReason" in result and not state["state_seen"]):
                    state["v1_turn"] = True  # a v1 turn end: no idle will come
                    return True
                if in_flight:
                    return True
                if flight:  # this turn and every earlier one in flight
                    return self.idles >= len(flight) + 1 or state["all_echoed"]
                return bool(state["idle"])
            return True

        try:
            self.pump(done, on_update=on_update, waiting_for=(
                "the prompt to end (idle state_update)" if self.protocol >= 2
                else "the session/prompt response"))
        except DriveTimeout as exc:
            result = response[0].msg.get("result") if response and isinstance(
                response[0].msg, dict) else None
            if self.protocol >= 2 and isinstance(result, dict) and "stopReason" in result:
                raise SameForEveryCase(
                    "the agent negotiated v2 but ended the turn the v1 way (stopReason in the "
                    f"session/prompt response, no idle state_update) ({exc})",
                    "the agent answered protocolVersion 2, then ended a turn the v1 way"
                ) from None
            raise
        finally:
            self.cancelled.discard(sid)
        self.responses.pop(rid, None)
        if state["v1_turn"]:
            raise NegotiationFailed("the agent answered protocolVersion 2, then ended a turn "
                                    "the v1 way (stopReason in the session/prompt response, no "
                                    "state_update)")
        msg = response[0].msg if response else None
        result = msg.get("result") if isinstance(msg, dict) else None
        if (self.check_spoken_version and self.protocol < 2 and isinstance(result, dict)
                and "stopReason" not in result):
            self.settle(why="after a v1 prompt response without stopReason")  # v2 updates?
        if self.v2_update is not None and self.check_spoken_version:
            raise NegotiationFailed(f"the agent answered protocolVersion 1, then sent a v2 "
                                    f"{self.v2_update}")
        error = msg.get("error") if isinstance(msg, dict) and "error" in msg else None
        if in_flight:  # its turn goes on: the next prompt waits for it too
            if error is None:  # a refused prompt starts no turn
                flight.extend(needed[len(flight):] or [None])  # None: a response without an ID
        else:
            late = [m for m in needed if isinstance(m, str) and m not in self.echoed]
            if late and self.protocol >= 2 and not cancelling and self.proc is not None:
                # Idle came, but not the echo of an ID a response named (an agent that
                # queued the prompt echoes it when its turn starts): a grace window records
                # a late echo before the next step.
                self.settle(why="for a late echo of a prompt")
            flight.clear()
            self.idles = 0
            self.echoed.clear()
        if cancelling:
            self.settle(why="after a cancelled turn")
        return error

    def retry_prompt(self) -> Any:
        """v2: send the last prompt again, same content and same ``idempotencyKey`` (a client
        whose response was lost), and wait for its response only: a retry starts no turn.
        The error the agent answered it with, or None."""
        if self.last_prompt is None:
            raise DriveAborted("a retry with no prompt before it")
        rid = self._send_request("session/prompt", dict(self.last_prompt))
        self.pump(lambda: rid in self.responses, on_update=self._flight_update,
                  waiting_for="the retried prompt's response")
        msg = self.responses.pop(rid).msg
        if not self.flight:
            self.settle(why="after a retried prompt")  # what it inserts lands before the next step
        return msg.get("error") if isinstance(msg, dict) and "error" in msg else None

    def _flight_update(self, entry: Entry, update: dict[str, Any]) -> None:
        """While prompts are in flight and another request waits: their echoes and idles
        count for the next prompt, which waits for their turns to end."""
        if update.get("sessionUpdate") in ("user_message", "user_message_chunk"):
            self.echoed.add(update.get("messageId"))
        if (update.get("sessionUpdate") == "state_update" and update.get("state") == "idle"
                and self.turn_running):  # an idle with no turn running is a state report
            self.turn_running = False
            self.idles += 1

    def settle(self, quiet: float | None = None,
               on_update: Callable[[Entry, dict[str, Any]], None] | None = None,
               why: str = "") -> None:
        """Catalogue MID-A-09: keep a short grace window after a cancelled turn.

        Lines keep being handled until ``quiet`` seconds (``--grace``) pass with none, so
        an update the agent sends after its ``cancelled`` answer lands in that turn's
        tail, not in the next turn. The window ends on its clock: the transcript header
        records it (conformance.timers), ``why`` saying what it closed.
        """
        assert self.proc is not None
        quiet = self.grace if quiet is None else quiet
        deadline = time.monotonic() + self.turn_timeout  # an agent that never stops writing
        quiet_until = time.monotonic() + quiet
        while (now := time.monotonic()) < deadline:
            self._check_cut()
            if now >= quiet_until:
                self._clock("grace window", quiet, "--grace", why, live=on_update is not None)
                return
            try:
                entry = self.proc.receive(min(quiet_until - now, CUT_POLL))
            except TargetTimeout:
                continue
            except TargetExited:  # on its own, mid-case: no quiet end of the window
                raise self._exited(f"the grace window to close ({why or 'quiet'})") from None
            self._handle(entry, on_update)
            if self.proc.unrecorded_lines:
                self.note("grace window cut at the recording cap: the agent kept writing",
                          {"max_entries": self.proc.max_entries})
                return
            quiet_until = time.monotonic() + quiet
        self.note("grace window cut at --turn-timeout: the agent kept writing",
                  {"turn_timeout": self.turn_timeout})

    def _clock(self, timer: str, seconds: float, option: str, why: str,
               live: bool = False) -> None:
        """A wait ended on its clock: the header says which, how long, and where."""
        record_timer(self.transcript.header, timer, seconds, option, why,
                     len(self.transcript.entries) - 1, live)

    def _check_cut(self) -> None:
        """Stop the case when its Cutoff says so (recorded, so grading knows why it ended)."""
        reason = self.cutoff.reason()
        if reason:
            self.transcript.add(max(self.conn, 0), "harness", "harness", event="note",
                                data={"note": "interrupted", "cut": reason})
            raise DriveCut(reason)

    def load(self) -> None:
        sid = self._sid()
        if self.protocol >= 2:
            raise NotTestable("session/load does not exist in v2 (use resume)")
        if not self.info.load_session:
            raise NotTestable("the agent does not advertise loadSession", Reason.NO_CAPABILITY)
        self.request("session/load", {"sessionId": sid, "cwd": self.cwd, "mcpServers": []},
                     waiting_for="the session/load response")
        self.settle(why="after session/load")  # a replay that trails the response

    def resume(self, replay: str | None, *, while_streaming: bool = False) -> None:
        """``session/resume`` of the current session. ``while_streaming`` (v2, after an
        ``in_flight`` prompt): first wait for an ``agent_message_chunk`` of that turn, so the
        request reaches the agent while it streams on this connection (catalogue K.3)."""
        sid = self._sid()
        if not self.info.resume:
            raise NotTestable("the agent does not advertise session resume",
                              Reason.NO_CAPABILITY)
        params: dict[str, Any] = {"sessionId": sid, "cwd": self.cwd}
        if self.protocol < 2:
            params["mcpServers"] = []
        elif replay == "start":
            params["replayFrom"] = {"type": "start"}
        elif replay == "null":  # an explicit null: no replay either
            params["replayFrom"] = None
        flight = self._flight_update if self.flight else None
        if while_streaming and self.flight:
            streamed = [False]

            def on_update(entry: Entry, update: dict[str, Any]) -> None:
                self._flight_update(entry, update)
                if update.get("sessionUpdate") == "agent_message_chunk":
                    streamed[0] = True  # its answer streams (a thought may come first)

            self.pump(lambda: streamed[0] or self.idles > 0, on_update=on_update,
                      waiting_for="an agent_message_chunk of the prompt in flight")
        rid = self._send_request("session/resume", params)
        self.pump(lambda: rid in self.responses, on_update=flight,
                  waiting_for="the session/resume response")
        msg = self.responses.pop(rid).msg
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            raise _RpcError(err.get("code"), str(err.get("message")), "session/resume")
        self.settle(on_update=flight, why="after session/resume")

    def address_unknown_ids(self) -> None:
        """MID-V2-16 (catalogue K.8): when the agent advertises ``session.rewind``, call
        ``session/rewind`` and ``session/edit_prompt`` on the current session with message
        IDs it never sent there: one never seen, a near miss of one it sent (its letters'
        case flipped) and one of another session of the case. Each answer is data, graded by
        checks/addressed.py; the drafted inject and fork methods are not driven."""
        if "session.rewind" not in self.info.addressed:
            self.note("ID-addressed methods not driven", {"advertised": self.info.addressed})
            return
        sid = self._sid()
        sent = self._sent_ids()
        mine = sent.get(sid, set())
        ids = ["msg-never-sent-by-the-agent"]
        ids += sorted(m.swapcase() for m in mine
                      if m.isascii() and m.swapcase() != m and m.swapcase() not in mine)[:1]
        ids += sorted(m for s, ms in sent.items() if s != sid for m in ms - mine)[:1]
        for mid in ids:
            for method, params in (
                    ("session/rewind", {"sessionId": sid, "toMessageId": mid}),
                    ("session/edit_prompt", {"sessionId": sid, "messageId": mid,
                                             "content": [{"type": "text", "text": "An edit."}]})):
                rid = self._send_request(method, params)
                self.pump(lambda rid=rid: rid in self.responses,  # type: ignore[misc]
                          waiting_for=f"the {method} response")
                self.responses.pop(rid)

    def _sent_ids(self) -> dict[str, set[str]]:
        """The message IDs the agent sent so far, by session (its message updates)."""
        out: dict[str, set[str]] = {}
        for e in self.transcript.entries:
            msg = e.msg
            if e.src != "agent" or not isinstance(msg, dict) or msg.get("method") != "session/update":
                continue
            params = msg.get("params")
            params = params if isinstance(params, dict) else {}
            update = params.get("update")
            update = update if isinstance(update, dict) else {}
            mid, sid = update.get("messageId"), params.get("sessionId")
            if isinstance(mid, str) and isinstance(sid, str):
                out.setdefault(sid, set()).add(mid)
        return out

    def close_session(self) -> None:
        self.request("session/close", {"sessionId": self._sid()},
                     waiting_for="the session/close response")

    def _sid(self) -> str:
        if self.session is None:
            raise DriveAborted("no session (the case lacks a new_session step)")
        return self.session

    # -- JSON-RPC ----------------------------------------------------------
    def _send_request(self, method: str, params: Any, *, fuzz: bool = False) -> int:
        assert self.proc is not None
        rid = self.last_rid = next(self.ids)
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, fuzz=fuzz)
        return rid

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _send(self, msg: dict[str, Any], *, fuzz: bool = False) -> None:
        assert self.proc is not None
        try:
            self.proc.send(msg, fuzz=fuzz)
        except TargetTimeout:  # recorded by the transport as a timeout event
            raise DriveTimeout("timeout: the target stopped reading its input") from None

    def request(self, method: str, params: Any, *, waiting_for: str) -> Any:
        rid = self._send_request(method, params)
        self.pump(lambda: rid in self.responses, waiting_for=waiting_for)
        entry = self.responses.pop(rid)
        msg = entry.msg
        if "error" in msg:
            err = msg["error"] if isinstance(msg["error"], dict) else {}
            raise _RpcError(err.get("code"), str(err.get("message")), method)
        return msg.get("result")

    def note(self, what: str, data: dict[str, Any]) -> None:
        self.transcript.add(self.conn, "harness", "harness", event="note",
                            data={"note": what, **data})

    def pump(self, done: Callable[[], bool], *, waiting_for: str,
             on_update: Callable[[Entry, dict[str, Any]], None] | None = None) -> None:
        """Handle incoming lines until ``done()``.

        Each silence may last ``timeout`` seconds and the whole wait
        ``turn_timeout`` seconds, so a target that streams forever ends the wait too.
        """
        assert self.proc is not None
        proc = self.proc
        deadline = time.monotonic() + self.turn_timeout
        silent_until = time.monotonic() + self.timeout
        lines = cut_lines = 0
        unmatched = self.unmatched
        while not done():
            self._check_cut()
            now = time.monotonic()
            flood = proc.unrecorded_lines > 0
            try:
                if flood or now >= min(deadline, silent_until):
                    raise TargetTimeout()
                entry = proc.receive(min(min(silent_until, deadline) - now, CUT_POLL))
            except TargetTimeout:
                if not flood and time.monotonic() < min(deadline, silent_until):
                    continue  # a look at the Cutoff, not the end of the wait
                overall = not flood and time.monotonic() >= deadline
                self.transcript.add(self.conn, "harness", "harness", event="timeout",
                                    data={"timeout": self.timeout, "waiting_for": waiting_for,
                                          "deadline": self.turn_timeout if overall else None,
                                          "flood": proc.max_entries if flood else None,
                                          "lines": lines,
                                          "stderr_tail": proc.stderr_text()[-1000:]})
                what = ("flooded past the recording cap" if flood
                        else "kept writing past --turn-timeout" if overall
                        else "went silent")
                if self.unmatched > unmatched:
                    what = f"answered under response ids that match no request, then {what}"
                elif cut_lines:
                    what = f"wrote a line past the line cap, then {what}"
                raise DriveTimeout(f"timeout waiting for {waiting_for}" + (
                    f" (--turn-timeout {self.turn_timeout:g} s)" if overall else "") + (
                    f" (cut at the recording cap of {proc.max_entries} lines)" if flood else ""),
                    f"{what} at {waiting_for}") from None
            except TargetExited:
                raise self._exited(waiting_for) from None
            lines += 1
            cut_lines += entry.truncated is not None
            silent_until = time.monotonic() + self.timeout
            self._handle(entry, on_update)

    def _exited(self, waiting_for: str) -> DriveAborted:
        """The target closed its output or exited on its own, mid-case (a wait, a grace
        window, or before the suite closed its stdin): recorded as an ``early-exit`` event
        with its evidence (TARGET/exit), once; the abort that ends the case."""
        assert self.proc is not None
        proc, self.exit_seen = self.proc, True
        rc = proc.wait_exit(min(1.0, self.timeout))
        proc.drain_stderr(min(0.5, self.timeout))
        self.transcript.add(self.conn, "harness", "harness", event="early-exit",
                            data={"waiting_for": waiting_for, "returncode": rc,
                                  "signal": None if rc is None or rc >= 0 else -rc,
                                  "output_held": proc.output_held,
                                  "stderr_tail": proc.stderr_text()[-1000:]})
        what = "closed its output" if rc is None else "exited"
        return DriveAborted(f"target exited while waiting for {waiting_for}",
                            f"{what} at {waiting_for}")

    def _handle(self, entry: Entry,
                on_update: Callable[[Entry, dict[str, Any]], None] | None) -> None:
        """Act on every message of one line (a v2 batch holds several)."""
        if entry.error is not None or entry.msg is None:
            return  # recorded; the framing checker grades it
        for msg in entry.msg if isinstance(entry.msg, list) else [entry.msg]:
            self._dispatch(entry, msg, on_update)

    def _dispatch(self, entry: Entry, msg: Any,
                  on_update: Callable[[Entry, dict[str, Any]], None] | None) -> None:
        if not isinstance(msg, dict):
            return
        if model.is_response(msg):
            rid = msg["id"]
            if type(rid) is int and 0 <= rid <= self.last_rid:  # 1.0, true and "1" match none
                self.responses[rid] = Entry(entry.seq, entry.t, entry.conn, entry.src,
                                            entry.stream, msg=msg)
            else:
                self.unmatched += 1
            return
        method = msg.get("method")
        if not isinstance(method, str):
            return
        if "id" in msg:
            self._answer(msg)
        elif method == "session/update":
            params = msg.get("params")
            update = params.get("update") if isinstance(params, dict) else None
            if not isinstance(update, dict):
                return
            if (self.protocol < 2 and self.v2_update is None
                    and update.get("sessionUpdate") in model.V2_ONLY_UPDATES):
                self.v2_update = str(update["sessionUpdate"])
            if on_update is not None:
                on_update(entry, update)

    def _answer(self, msg: dict[str, Any]) -> None:
        """Answer an agent->client request exactly once, with the same id."""
        assert self.proc is not None
        method, rid = msg["method"], msg["id"]
        raw_params = msg.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        result: Any
        if method == "session/request_permission":
            sid = params.get("sessionId")
            raw_options = params.get("options")
            options: list[Any] = raw_options if isinstance(raw_options, list) else []
            allow = [o for o in options if isinstance(o, dict)
                     and str(o.get("kind", "")).startswith("allow")]
            if sid in self.cancelled or not (allow or options):
                result = {"outcome": {"outcome": "cancelled"}}
            else:
                choice = (allow or options)[0]
                result = {"outcome": {"outcome": "selected", "optionId": choice.get("optionId")}}
        elif method == "elicitation/create":
            result = {"action": "cancel"}
        else:
            self._send({"jsonrpc": "2.0", "id": rid,
                        "error": {"code": -32601, "message": "Method not found"}})
            return
        self._send({"jsonrpc": "2.0", "id": rid, "result": result})


class _RpcError(Exception):
    def __init__(self, code: Any, message: str, method: str = "") -> None:
        super().__init__(f"error {code}: {message}")
        self.code = code
        self.method = method

