"""A checker of v2 JSON-RPC frames routed by what they are: a request or notification the
client sent, a response the agent sent, or a ``session/update`` it sent."""

from __future__ import annotations

from typing import Any

from conformance.checks.base import Checker
from conformance.checks.events import Frame


class FrameChecker(Checker):
    """Subclasses set ``on`` (their profile grades them) and define the three handlers."""

    on = True

    def on_update_frame(self, ev: Frame) -> None:
        if self.on and ev.protocol >= 2:
            e = ev.entry
            self._update(e.conn, e.seq, e.msg)

    def on_frame(self, ev: Frame) -> None:
        if not self.on or ev.protocol < 2:
            return
        e = ev.entry
        msg = e.msg
        if e.stream not in ("stdout", "stdin") or not isinstance(msg, dict):
            return
        if e.src == "client":
            self._client(e.conn, e.seq, msg)
        elif "method" not in msg and "id" in msg:
            self._response(e.conn, e.seq, msg)
        elif msg.get("method") == "session/update":
            self._update(e.conn, e.seq, msg)

    def _client(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        """A frame the client sent."""

    def _response(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        """A response the agent sent."""

    def _update(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        """A session/update the agent sent."""
