"""The reference client as an in-process adapter (``conformance.client.adapter.ClientAdapter``)."""

from __future__ import annotations

import os
from collections.abc import Callable

from conformance.client.reference.client import JsonObject, ReferenceClient


class ReferenceAdapter:
    """The reference client as an in-process adapter."""

    client_class: type[ReferenceClient] = ReferenceClient

    def __init__(self, max_protocol: int = 2) -> None:
        self.max_protocol = max_protocol
        self.client: ReferenceClient | None = None

    def start(self, send: Callable[[JsonObject], None]) -> None:
        self.client = self.client_class(send, max_protocol=self.max_protocol, cwd=os.getcwd())
        self.client.start()

    def receive(self, message: JsonObject) -> None:
        assert self.client is not None
        self.client.receive(message)

    def prompt(self, text: str) -> None:
        assert self.client is not None
        self.client.prompt(text)

    def messages(self) -> list[JsonObject]:
        assert self.client is not None
        return self.client.shown()

    def load(self, session_id: str) -> None:
        assert self.client is not None
        if self.client.connected:
            self.client.load(session_id)
        else:  # the suite gives the client's next messages to a fresh agent
            self.client.reconnect(session_id)

    def disconnected(self) -> None:
        assert self.client is not None
        self.client.connection_lost()

    def close(self) -> None:
        self.client = None


def make_client() -> ReferenceAdapter:
    """Factory for ``--client-adapter conformance.client.reference:make_client``."""
    return ReferenceAdapter()
