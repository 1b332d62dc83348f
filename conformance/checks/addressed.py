"""ID-addressed methods (MID-V2-16, catalogue K.8): a ``messageId`` the client sends back
must name a message of that session.

The methods that take one are drafted, not in a schema crate yet (rewind and
edit_prompt, inject with revoke and replace, the message-scoped fork). The rule is
recorded as info under every profile until an agent advertises one of them. When it
advertises ``session.rewind``, the case ``id-addressed-methods`` calls
``session/rewind`` and ``session/edit_prompt`` with IDs the agent never sent for the
session (never seen, a near miss of one it sent, one of another session), and the
answers are graded here: a success is a fail (``/unknown-id``), an error other than
``-32002`` with ``data.reason`` ``"unknown_message_id"`` a warn (``/error-code``: an
earlier inject draft used ``-32602``). Inject and fork are recorded, not driven.
"""

from __future__ import annotations

from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.events import Frame
from conformance.checks.wire import short
from conformance.results import Reason

# the drafted methods the suite drives, and the parameter that names the message
ADDRESSED = {"session/rewind": "toMessageId", "session/edit_prompt": "messageId"}
UNKNOWN_CODE = -32002
UNKNOWN_REASON = "unknown_message_id"


@register
class AddressedMethods(Checker):
    quiet_repeats = True
    rules = (
        Rule("MID-V2-16/advertised"),
        Rule("MID-V2-16/unknown-id"),
        Rule("MID-V2-16/error-code"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.initialize: set[tuple[int, str]] = set()
        self.emitted: dict[str, set[str]] = {}  # sessionId -> the message IDs the agent sent
        self.prompts: dict[tuple[int, str], str] = {}  # a prompt in flight -> its sessionId
        # an addressed call naming an ID the agent never sent -> (method, ID, session, seq)
        self.calls: dict[tuple[int, str], tuple[str, str, str, int]] = {}

    def on_update_frame(self, ev: Frame) -> None:
        params = ev.entry.msg["params"]  # what on_frame does for such a line
        mid = params["update"].get("messageId")
        if isinstance(mid, str):
            self.emitted.setdefault(params["sessionId"], set()).add(mid)

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        msg = e.msg
        if not isinstance(msg, dict):
            return
        params = model.as_object(msg.get("params"))
        method = msg.get("method")
        if method is not None and not isinstance(method, str):
            return  # no call this rule can read (the framing rules grade the shape)
        sid = params.get("sessionId")
        if e.src == "agent" and method == "session/update" and isinstance(sid, str):
            mid = model.as_object(params.get("update")).get("messageId")
            if isinstance(mid, str):
                self.emitted.setdefault(sid, set()).add(mid)
            return
        if "id" not in msg:
            return
        key = (e.conn, repr(msg["id"]))
        if e.src == "client" and method == "initialize":
            self.initialize.add(key)
        elif e.src == "client" and method == "session/prompt" and isinstance(sid, str):
            self.prompts[key] = sid
        elif e.src == "client" and method in ADDRESSED and isinstance(sid, str):
            mid = params.get(ADDRESSED[method])
            if isinstance(mid, str) and mid not in self.emitted.get(sid, ()):
                self.calls[key] = (str(method), mid, sid, e.seq)
        elif e.src == "agent" and method is None:
            if key in self.initialize:
                self.initialize.discard(key)
                self._initialized(msg, e.seq)
            elif key in self.prompts:
                mid = model.as_object(msg.get("result")).get("messageId")
                if isinstance(mid, str):  # the prompt response names the user message
                    self.emitted.setdefault(self.prompts[key], set()).add(mid)
                del self.prompts[key]
            elif key in self.calls:
                self._answered(msg, self.calls.pop(key), e.seq)

    def _initialized(self, msg: dict[str, Any], seq: int) -> None:
        result = model.as_object(msg.get("result"))
        if result.get("protocolVersion") != 2:
            return
        methods = model.addressed_methods(result.get("capabilities"))
        if not methods:
            # an optional method the agent does not offer: its choice, not a gap
            for rule in ("MID-V2-16/advertised", "MID-V2-16/unknown-id", "MID-V2-16/error-code"):
                self.not_applicable(rule, "the agent advertises no method that takes a "
                                    "messageId (session.rewind, session.inject, "
                                    "session.fork.messageId)", Reason.NO_CAPABILITY)
            return
        self.exercised("MID-V2-16/advertised")
        driven = [m for m in methods if m == "session.rewind"]
        rest = [m for m in methods if m not in driven]
        said = "; ".join(filter(None, [
            "session/rewind and session/edit_prompt are called with IDs it never sent"
            if driven else "", f"{', '.join(rest)} not driven yet" if rest else ""]))
        self.found("MID-V2-16/advertised", f"the agent advertises {', '.join(methods)}: a "
                   "messageId it takes must name a message of the session (-32002, reason "
                   f"unknown_message_id otherwise); {said}", key=tuple(methods), entries=[seq],
                   actual=methods)

    def _answered(self, msg: dict[str, Any], call: tuple[str, str, str, int], seq: int) -> None:
        method, mid, sid, asked = call
        self.exercised("MID-V2-16/unknown-id")
        what = f"{method} naming {short(mid, 60)!r}, a messageId the agent never sent in {sid}"
        if "error" not in msg:
            self.found("MID-V2-16/unknown-id", f"{what}, succeeded: it acted on no message of "
                       "the session, or on another one", key=(method, mid), entries=[asked, seq],
                       expected={"error": {"code": UNKNOWN_CODE,
                                           "data": {"reason": UNKNOWN_REASON}}},
                       actual=short(repr(msg.get("result")), 200))
            return
        error = model.as_object(msg.get("error"))
        self.exercised("MID-V2-16/error-code")
        reason = model.as_object(error.get("data")).get("reason")
        if error.get("code") != UNKNOWN_CODE or reason != UNKNOWN_REASON:
            self.found("MID-V2-16/error-code", f"{what}, was refused with error "
                       f"{error.get('code')!r} (reason {reason!r}), not {UNKNOWN_CODE} with "
                       f"reason {UNKNOWN_REASON!r}", key=(method, error.get("code")),
                       entries=[asked, seq],
                       expected={"code": UNKNOWN_CODE, "data": {"reason": UNKNOWN_REASON}},
                       actual={"code": error.get("code"), "reason": reason})
