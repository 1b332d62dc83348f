"""The agent double's engine reports what it did in the order it did it.

The suite observes a client's screen once the double reports the end of a turn or a
reload; the transcript must then already hold every line the client was shown. Under
load, a ``load-end`` reported ahead of the replay it ends let the observation land in
the transcript before the replayed lines, and a client that shows a reloaded history
twice was graded "not testable" instead of MID-C-07.
"""

from __future__ import annotations

from typing import Any

from conformance.client.double_engine import DoubleEngine
from conformance.client.script import TurnScript

REPLAY = tuple({"sessionUpdate": "agent_message_chunk", "messageId": f"r{i}",
                "content": {"type": "text", "text": f"replayed {i}"}} for i in range(3))


def order(items: list[tuple[str, Any]]) -> list[str]:
    return [item["event"] if kind == "event" else
            item.get("method") or f"response {item.get('id')}" for kind, item in items]


def test_a_reload_is_reported_as_load_replay_answer_load_end() -> None:
    reload = TurnScript("reload", "", False, (), replay=REPLAY, reload=True)
    engine = DoubleEngine(protocol=1, next_turn=lambda: reload, load_session=True)
    engine.feed({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": 1}})
    engine.take()
    engine.feed({"jsonrpc": "2.0", "id": 4, "method": "session/load",
                 "params": {"sessionId": "sess-1", "cwd": "/", "mcpServers": []}})
    assert order(engine.take()) == ["load", "session/update", "session/update",
                                    "session/update", "response 4", "load-end"]
    assert engine.take() == []  # taken once


def test_events_and_lines_keep_their_order_across_calls() -> None:
    engine = DoubleEngine(protocol=1, next_turn=lambda: None)
    engine.feed({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": 1}})
    engine.feed({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                 "params": {"cwd": "/", "mcpServers": []}})
    taken = order(engine.take())
    assert taken.index("response 0") < taken.index("response 1")
    assert "session" in taken
