"""One broken agent and one broken client, bundled for ``acp-conformance demo --broken``.

They are the two bugs most often shipped, each one override of the reference
target (the same as ``fixtures/agents/per_turn_counter.py`` and
``fixtures/clients/case_insensitive.py``, which the tests prove rule by rule):

* the agent takes its message IDs from a counter that restarts at every
  prompt (``msg_1``, ``msg_2``, ...), so every turn reuses the previous turn's
  IDs: MID-A-02 fails;
* the client compares message IDs case-insensitively, so ``msg-a1`` and
  ``MSG-A1`` become one message: MID-C-02 fails.

``python -m conformance.reference.broken agent`` runs the agent on stdio;
``python -m conformance.reference.broken client --agent-cmd CMD`` the client.
"""

from __future__ import annotations

import sys

from conformance.reference.agent import ReferenceAgent
from conformance.reference.agent import main as agent_main

TYPE_CHECKING = False  # no typing at run time (wire.py says why)
if TYPE_CHECKING:
    from collections.abc import Hashable
    from typing import Any


class PerTurnCounterAgent(ReferenceAgent):
    """Message IDs from a counter that restarts at every prompt (MID-A-02)."""

    NAME = "acp-conformance-broken-agent"  # what it says in initialize
    counter = 0

    def user_message_id(self, params: dict[str, Any]) -> str:
        self.counter = 0  # a new prompt: the counter starts again
        return super().user_message_id(params)

    def new_message_id(self, kind: str) -> str:
        self.counter += 1
        return f"msg_{self.counter}"


def _client_class() -> type:
    from conformance.client.reference import ReferenceClient

    class CaseInsensitiveClient(ReferenceClient):
        """Message IDs compared case-insensitively (MID-C-02)."""

        NAME = "acp-conformance-broken-client"  # what it says in initialize

        def key(self, kind: str, message_id: str) -> Hashable:
            return (kind, message_id.casefold())

    return CaseInsensitiveClient


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["agent"]:
        return agent_main(args[1:], agent_class=PerTurnCounterAgent)
    if args[:1] == ["client"]:
        from conformance.client.reference.terminal import main as client_main

        return client_main(args[1:], client_class=_client_class())
    print("usage: python -m conformance.reference.broken agent | client --agent-cmd CMD",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
