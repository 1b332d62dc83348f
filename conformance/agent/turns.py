"""Turn tracking of the driver that plays the client: a prompt's turn, from the request
to its end (a v1 response, a v2 idle), cancels and MID-A-09's grace window after them,
v2 prompts in flight and their echoes, and a retried prompt with its idempotency key.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.agent.connection import Connection
from conformance.agent.faults import (
    DriveAborted,
    DriveTimeout,
    NegotiationFailed,
    NotTestable,
    SameForEveryCase,
)
from conformance.profiles import Profile
from conformance.transcript import Entry

# A cancelled turn gets session/cancel at its first agent output, or, when none has come,
# this share of --timeout after the prompt: a turn that waits, silent, for the cancel is
# cancelled and graded, not failed as a hang. Half the silence a wait allows: late enough
# that a busy machine's slow first chunk is not overtaken, early enough to be answered.
CANCEL_SHARE = 0.5
# A request a case races with a turn's output (a load or resume while a prompt streams) is
# sent at the turn's first agent message chunk; a turn that writes none for this share of
# --timeout (one silent until it is cancelled) gives no race to play: the case is not
# testable, said on its clock, rather than a hang (the silence a wait allows is --timeout).
STREAM_SHARE = 0.8


#: What a prompt step's ``invalid_key`` sends as ``idempotencyKey`` (outside 1 to 255).
INVALID_KEYS = {"empty": "", "too-long": "k" * 256}


@dataclass
class Turn:
    """What one :meth:`Turns.prompt` has seen of its turn so far."""

    idle: bool = False  # an idle state_update ended the running turn
    agent_output: bool = False  # a chunk or message of the agent's
    cancel_sent: bool = False
    state_seen: bool = False  # any state_update
    v1_turn: bool = False  # v2 negotiated, but the turn ended the v1 way
    all_echoed: bool = False  # an idle after the echoes of every ID awaited
    updates: int = 0  # the turn's session/update notifications so far (for cancel_after)
    response: Entry | None = None  # the prompt response, once it arrives
    needed: list[Any] = field(default_factory=list)  # IDs whose echoes end the turns waited on


class Turns(Connection):
    """The connection plus turn tracking: prompts, cancels and v2 prompts in flight.

    ``profile`` is the run's: under one with idempotency keys (catalogue K.4) every v2
    prompt carries a fresh ``idempotencyKey``."""

    def __init__(self, *args: Any, profile: Profile | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
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
        # v2 session/prompt idempotencyKey (catalogue K.4), under a profile that has it: one
        # fresh key per prompt, repeated by retry_prompt.
        self.idempotency_keys = bool(profile and profile.idempotency_keys)
        self.last_prompt: dict[str, Any] | None = None
        # v1: a prompt left in flight (see prompt): its request ID until its response came
        self.flight_v1: int | None = None

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

        v1 ``in_flight``: wait only for the turn's first agent message chunk (its answer
        streams), so the next step's request (a ``load``) reaches the agent while the turn
        runs; the next step waits for the prompt's response (:meth:`finish_flight_v1`).

        ``invalid_key`` (``empty``, ``too-long``): under a profile with keys, send that
        ``idempotencyKey`` (outside 1 to 255 characters) instead of a fresh one."""
        self.finish_flight_v1()
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
        if in_flight and self.protocol < 2 and not (cancel or cancel_after is not None):
            return self._in_flight_v1(rid)
        cancel_at = time.monotonic() + CANCEL_SHARE * self.timeout
        cancelling = cancel or cancel_after is not None
        in_flight = in_flight and self.protocol >= 2
        flight = self.flight  # earlier in-flight prompts: the IDs their responses named
        turn = Turn(needed=list(flight))

        def send_cancel() -> None:
            turn.cancel_sent = True
            self.cancelled.add(sid)
            self.notify("session/cancel", {"sessionId": sid})

        if cancel_after == 0:
            send_cancel()

        if not flight:
            self.turn_running = False  # no turn of this session runs before this prompt

        def on_update(entry: Entry, update: dict[str, Any]) -> None:
            kind = model.update_kind(update)
            turn.updates += 1
            if (cancel_after is not None and not turn.cancel_sent
                    and turn.updates >= cancel_after):
                send_cancel()
            if kind == "state_update":
                turn.state_seen = True
            if kind in ("agent_message_chunk", "agent_thought_chunk", "agent_message",
                        "agent_thought"):
                turn.agent_output = True
            if kind in ("user_message", "user_message_chunk"):
                self._echoed(update)
            if rid in self.responses or kind in model.WITH_SESSION_KINDS or kind in (
                    "tool_call", "tool_call_update") or (
                    kind == "state_update" and update.get("state") == "running"):
                self.turn_running = True
            if (kind == "state_update" and update.get("state") == "idle"
                    and self.turn_running):
                self.turn_running = False
                turn.idle = True
                self.idles += 1
                if turn.response is not None and turn.needed and all(
                        m in self.echoed for m in turn.needed):
                    turn.all_echoed = True  # (this prompt's ID among them: answered)

        def done() -> bool:
            if cancel and cancel_after is None and not turn.cancel_sent and (
                    turn.agent_output or time.monotonic() >= cancel_at):
                if not turn.agent_output:
                    self.note("cancel sent before any agent output",
                              {"after_seconds": CANCEL_SHARE * self.timeout})
                    self._clock("cancel timer", CANCEL_SHARE * self.timeout, "--timeout",
                                "half of --timeout: no agent output came to cancel at")
                send_cancel()
            if rid in self.responses and turn.response is None:
                turn.response = self.responses[rid]
                if isinstance(turn.response.msg, dict) and "result" in turn.response.msg:
                    self.turn_running = True  # accepted: the next idle may end its turn
                result = turn.response.msg.get("result") if isinstance(
                    turn.response.msg, dict) else None
                mid = result.get("messageId") if isinstance(result, dict) else None
                if isinstance(mid, str):
                    turn.needed.append(mid)
            if turn.response is None:
                return False
            if self.protocol >= 2:
                resp = turn.response
                if isinstance(resp.msg, dict) and "error" in resp.msg:
                    return True
                result = resp.msg.get("result") if isinstance(resp.msg, dict) else None
                if (self.check_spoken_version and isinstance(result, dict)
                        and "stopReason" in result and not turn.state_seen):
                    turn.v1_turn = True  # a v1 turn end: no idle will come
                    return True
                if in_flight:
                    return True
                if flight:  # this turn and every earlier one in flight
                    return self.idles >= len(flight) + 1 or turn.all_echoed
                return turn.idle
            return True

        try:
            self.pump(done, on_update=on_update, waiting_for=(
                "the prompt to end (idle state_update)" if self.protocol >= 2
                else "the session/prompt response"))
        except DriveTimeout as exc:
            result = turn.response.msg.get("result") if turn.response is not None and isinstance(
                turn.response.msg, dict) else None
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
        if turn.v1_turn:
            raise NegotiationFailed("the agent answered protocolVersion 2, then ended a turn "
                                    "the v1 way (stopReason in the session/prompt response, no "
                                    "state_update)")
        msg = turn.response.msg if turn.response is not None else None
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
                flight.extend(turn.needed[len(flight):] or [None])  # None: a response without an ID
        else:
            late = [m for m in turn.needed if isinstance(m, str) and m not in self.echoed]
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

    def wait_for_stream(self, over: Callable[[], bool],
                        on_update: Callable[[Entry, dict[str, Any]], None] | None = None
                        ) -> None:
        """Wait for an ``agent_message_chunk`` of the prompt in flight (its answer streams;
        a thought may come first), or until ``over()`` (its turn ended), so the next request
        reaches the agent while it writes. None within ``STREAM_SHARE`` of --timeout:
        NotTestable, with the timer recorded."""
        streamed = [False]

        def seen(entry: Entry, update: dict[str, Any]) -> None:
            if on_update is not None:
                on_update(entry, update)
            if update.get("sessionUpdate") == "agent_message_chunk":
                streamed[0] = True

        limit = STREAM_SHARE * self.timeout
        give_up = time.monotonic() + limit
        self.pump(lambda: streamed[0] or over() or time.monotonic() >= give_up, on_update=seen,
                  waiting_for="an agent_message_chunk of the prompt in flight")
        if streamed[0] or over():
            return
        self._clock("stream wait", limit, "--timeout",
                    "no agent message chunk of the prompt in flight to race the request with")
        raise NotTestable(f"the prompt in flight wrote no agent_message_chunk within {limit:g} s "
                          f"({STREAM_SHARE:g} of --timeout): the request this case races with "
                          "a streaming turn could not be sent while it streams (a turn silent "
                          "until cancelled?); a longer --timeout waits longer")

    def _in_flight_v1(self, rid: int) -> Any:
        """v1 ``in_flight`` (see prompt): the error the agent answered with when the response
        came before any agent message chunk, else None with the prompt left in flight."""
        self.wait_for_stream(lambda: rid in self.responses)
        if rid not in self.responses:
            self.flight_v1 = rid
            return None
        msg = self.responses.pop(rid).msg
        return msg.get("error") if isinstance(msg, dict) and "error" in msg else None

    def finish_flight_v1(self) -> None:
        """v1: wait for the response of a prompt left in flight (its turn's end), so no step
        after it leaves the turn open."""
        rid, self.flight_v1 = self.flight_v1, None
        if rid is None or self.proc is None:
            return
        self.pump(lambda: rid in self.responses,
                  waiting_for="the session/prompt response of the prompt in flight")
        self.responses.pop(rid)

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

    def _echoed(self, update: dict[str, Any]) -> None:
        """An echo's ID, when it is one a prompt's response can have named (a string)."""
        mid = update.get("messageId")
        if isinstance(mid, str):
            self.echoed.add(mid)

    def _flight_update(self, entry: Entry, update: dict[str, Any]) -> None:
        """While prompts are in flight and another request waits: their echoes and idles
        count for the next prompt, which waits for their turns to end."""
        kind = model.update_kind(update)
        if kind in ("user_message", "user_message_chunk"):
            self._echoed(update)
        if kind in model.WITH_SESSION_KINDS or kind in ("tool_call", "tool_call_update") or (
                kind == "state_update" and update.get("state") == "running"):
            self.turn_running = True  # the next turn in flight runs: its idle counts too
        if (kind == "state_update" and update.get("state") == "idle"
                and self.turn_running):  # an idle with no turn running is a state report
            self.turn_running = False
            self.idles += 1
