"""The agent role's step player: :class:`StepDriver`, the client driver plus the whole step
vocabulary of :mod:`conformance.agent.steps` (``$defs/agentStep`` of the case schema). The
case runner, the proxy role and the fuzzer (its ``FuzzDriver`` subclass) all play steps
with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from conformance.agent.driver import ClientDriver
from conformance.agent.steps import StepError
from conformance.transcript import Entry


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
