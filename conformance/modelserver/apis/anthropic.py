"""The Anthropic Messages API shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

from conformance.modelserver.apis.base import (
    Plan,
    Request,
    Shape,
    text_of,
    usage_counts,
)


class AnthropicMessages(Shape):
    """Anthropic Messages (``/v1/messages``): content blocks in one message."""

    name = "anthropic-messages"
    id_prefix: ClassVar[dict[str, str]] = {
        "response": "msg", "reasoning": "msg", "text": "msg", "tool": "toolu", "call": "toolu"}

    def matches(self, path: str) -> bool:
        return path.endswith("/messages")

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        req = Request(self.name, str(body.get("model", "")), body.get("stream") is True)
        req.declare(body.get("tools"), "input_schema")
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        last_user = -1
        for n, m in enumerate(messages):
            if m.get("role") != "user":
                continue
            content = m.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text"}]
            if all(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
                continue
            req.turn += 1
            last_user = n
            req.last_user = text_of(content)
        req.round = sum(1 for m in messages[last_user + 1:] if m.get("role") == "user")
        return req

    def _blocks(self, plan: Plan, done: bool) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in plan.items:
            if i.kind == "reasoning":
                out.append({"type": "thinking", "thinking": i.text if done else "",
                            "signature": f"sig-{i.id}"})
            elif i.kind == "text":
                out.append({"type": "text", "text": i.text if done else ""})
            else:
                out.append({"type": "tool_use", "id": i.call_id, "name": i.name,
                            "input": i.arguments if done else {}})
        return out

    def _message(self, plan: Plan, req: Request, done: bool) -> dict[str, Any]:
        out_len = sum(len(i.text) for i in plan.items)
        prompt, completion = usage_counts(out_len)
        return {"id": plan.response_id, "type": "message", "role": "assistant",
                "model": req.model or "scripted",
                "content": self._blocks(plan, True) if done else [],
                "stop_reason": ("tool_use" if plan.has_tool else "end_turn") if done else None,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": completion if done else 1}}

    def events(self, plan: Plan, req: Request) -> Iterator[bytes]:
        def ev(kind: str, **data: Any) -> bytes:
            return self.sse({"type": kind, **data}, kind)

        yield ev("message_start", message=self._message(plan, req, False))
        for n, (item, block) in enumerate(zip(plan.items, self._blocks(plan, False), strict=False)):
            yield ev("content_block_start", index=n, content_block=block)
            if item.kind == "reasoning":
                for d in item.deltas:
                    yield ev("content_block_delta", index=n,
                             delta={"type": "thinking_delta", "thinking": d})
                yield ev("content_block_delta", index=n,
                         delta={"type": "signature_delta", "signature": f"sig-{item.id}"})
            elif item.kind == "text":
                for d in item.deltas:
                    yield ev("content_block_delta", index=n,
                             delta={"type": "text_delta", "text": d})
            else:
                yield ev("content_block_delta", index=n,
                         delta={"type": "input_json_delta",
                                "partial_json": json.dumps(item.arguments)})
            yield ev("content_block_stop", index=n)
        done = self._message(plan, req, True)
        yield ev("message_delta", delta={"stop_reason": done["stop_reason"],
                                         "stop_sequence": None},
                 usage={"output_tokens": done["usage"]["output_tokens"]})
        yield ev("message_stop")

    def complete(self, plan: Plan, req: Request) -> dict[str, Any]:
        return self._message(plan, req, True)
