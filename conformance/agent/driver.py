"""The driver that plays the client: runs a case's steps against a live agent.

:class:`ClientDriver` is the connection's layers together, each in its own module:
the JSON-RPC pump and its waits (:mod:`~conformance.agent.connection`), the handshake
(:mod:`~conformance.agent.handshake`) and turn tracking (:mod:`~conformance.agent.turns`);
this module adds the session steps (new, load, resume, close, and the v2 ID-addressed
methods). How a drive ends early is :mod:`~conformance.agent.faults`. It performs the
handshake (v1 or v2 as asked), answers every agent->client request, and waits only on
messages; it never grades anything: checkers read the transcript afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conformance.agent.faults import DriveAborted, NotTestable, RequestRefused, _RpcError
from conformance.agent.handshake import Handshake
from conformance.agent.turns import Turns
from conformance.lifecycle import Cutoff
from conformance.profiles import Profile
from conformance.results import Reason
from conformance.transcript import Transcript

NO_SESSION_CAPABILITY = ("the agent negotiated v2 but does not advertise capabilities.session "
                         "(the v2 session methods are opt-in): its session cases do not apply")


class ClientDriver(Handshake, Turns):
    """Plays the ACP client over a TargetProcess, one connection at a time.

    ``profile``: the run's profile (its idempotency keys, see :class:`Turns`)."""

    def __init__(self, argv: Sequence[str], transcript: Transcript, *, protocol: int,
                 timeout: float, cwd: str, env: Mapping[str, str] | None = None,
                 turn_timeout: float | None = None, cutoff: Cutoff | None = None,
                 grace: float | None = None, profile: Profile | None = None) -> None:
        super().__init__(argv, transcript, protocol=protocol, timeout=timeout, cwd=cwd,
                         env=env, turn_timeout=turn_timeout, cutoff=cutoff, grace=grace,
                         profile=profile)

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

    def load(self) -> None:
        sid = self._sid()
        if self.protocol >= 2:
            raise NotTestable("session/load does not exist in v2 (use resume)")
        if not self.info.load_session:
            raise NotTestable("the agent does not advertise loadSession", Reason.NO_CAPABILITY)
        self.request("session/load", {"sessionId": sid, "cwd": self.cwd, "mcpServers": []},
                     waiting_for="the session/load response")
        self.finish_flight_v1()  # a prompt in flight: its turn ends before the next step
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
            self.wait_for_stream(lambda: self.idles > 0, self._flight_update)
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
