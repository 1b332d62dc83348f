"""ID-addressed methods (MID-V2-16, catalogue K.8): a ``messageId`` the client sends back
must name a message of that session.

The methods that take one are drafted, not in a schema crate yet (rewind and
edit_prompt, inject with revoke and replace, the message-scoped fork), so the rule is
recorded as info under every profile until an agent advertises one of them; the suite
does not drive them yet.
"""

from __future__ import annotations

from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.events import Frame
from conformance.results import Reason

# capabilities.session members of the drafts whose methods take a messageId
DRAFTED = ("rewind", "inject")


def addressed_methods(capabilities: Any) -> list[str]:
    """The drafted ID-addressed methods an ``initialize`` result's capabilities advertise."""
    session = model.as_object(model.as_object(capabilities).get("session"))
    found = [f"session.{name}" for name in DRAFTED if name in session]
    if "messageId" in model.as_object(session.get("fork")):
        found.append("session.fork.messageId")
    return found


@register
class AddressedMethods(Checker):
    quiet_repeats = True
    rules = (
        Rule("MID-V2-16/advertised"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.initialize: set[tuple[int, str]] = set()

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        msg = e.msg
        if not isinstance(msg, dict) or "id" not in msg:
            return
        if e.src == "client" and msg.get("method") == "initialize":
            self.initialize.add((e.conn, repr(msg["id"])))
        elif e.src == "agent" and "method" not in msg:
            if (e.conn, repr(msg["id"])) not in self.initialize:
                return
            self.initialize.discard((e.conn, repr(msg["id"])))
            result = model.as_object(msg.get("result"))
            methods = addressed_methods(result.get("capabilities"))
            if not methods and result.get("protocolVersion") == 2:
                # an optional method the agent does not offer: its choice, not a gap
                self.not_applicable("MID-V2-16/advertised", "the agent advertises no method "
                                    "that takes a messageId (session.rewind, session.inject, "
                                    "session.fork.messageId)", Reason.NO_CAPABILITY)
            if methods and result.get("protocolVersion") == 2:
                self.exercised("MID-V2-16/advertised")
                self.found("MID-V2-16/advertised", f"the agent advertises {', '.join(methods)}: "
                           "a messageId it takes must name a message of the session (-32002, "
                           "reason unknown_message_id otherwise); not driven yet",
                           key=tuple(methods), entries=[e.seq], actual=methods)
