"""The reference target: a conformant ACP agent for protocol v1 and v2.

Run it with ``python -m conformance.reference.agent`` (or the
``acp-reference-agent`` script). Broken variants under ``fixtures/agents/``
subclass :class:`ReferenceAgent` and override one behaviour each.

The agent module is imported lazily, so that ``python -m
conformance.reference.agent`` does not find it already imported.
"""

from __future__ import annotations

TYPE_CHECKING = False  # no typing at run time (wire.py says why)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ReferenceAgent", "SessionStore", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from conformance.reference import agent

        return getattr(agent, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
