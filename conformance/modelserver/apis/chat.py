"""The OpenAI Chat Completions API shape."""

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


class ChatCompletions(Shape):
    """OpenAI Chat Completions (``/v1/chat/completions``), used by OpenAI-compatible SDKs."""

    name = "openai-chat"
    id_prefix: ClassVar[dict[str, str]] = {
        "response": "chatcmpl", "reasoning": "chatcmpl", "text": "chatcmpl", "tool": "call",
        "call": "call"}

    def matches(self, path: str) -> bool:
        return path.endswith("/chat/completions")

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        req = Request(self.name, str(body.get("model", "")), body.get("stream") is True)
        req.declare([t.get("function") for t in body.get("tools") or [] if isinstance(t, dict)],
                    "parameters")
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        last_user = -1
        for i, m in enumerate(messages):
            if m.get("role") == "user":
                req.turn += 1
                last_user = i
                req.last_user = text_of(m.get("content"))
        req.round = sum(1 for m in messages[last_user + 1:]
                        if m.get("role") == "assistant" and m.get("tool_calls"))
        fmt = body.get("response_format")
        req.wants_json = isinstance(fmt, dict) and fmt.get("type") in ("json_object",
                                                                        "json_schema")
        return req

    def _chunk(self, plan: Plan, req: Request, delta: dict[str, Any],
               finish: str | None = None) -> bytes:
        return self.sse({"id": plan.response_id, "object": "chat.completion.chunk",
                         "created": 0, "model": req.model or "scripted",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    def events(self, plan: Plan, req: Request) -> Iterator[bytes]:
        yield self._chunk(plan, req, {"role": "assistant", "content": ""})
        tool_index = 0
        out_len = 0
        for item in plan.items:
            if item.kind == "reasoning":
                for d in item.deltas:
                    yield self._chunk(plan, req, {"reasoning_content": d})
            elif item.kind == "text":
                for d in item.deltas:
                    yield self._chunk(plan, req, {"content": d})
                out_len += len(item.text)
            else:
                args = json.dumps(item.arguments)
                yield self._chunk(plan, req, {"tool_calls": [{
                    "index": tool_index, "id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": ""}}]})
                yield self._chunk(plan, req, {"tool_calls": [{
                    "index": tool_index, "function": {"arguments": args}}]})
                tool_index += 1
        yield self._chunk(plan, req, {}, "tool_calls" if plan.has_tool else "stop")
        prompt, completion = usage_counts(out_len)
        yield self.sse({"id": plan.response_id, "object": "chat.completion.chunk", "created": 0,
                        "model": req.model or "scripted", "choices": [],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                  "total_tokens": prompt + completion}})
        yield self.sse("[DONE]")

    def complete(self, plan: Plan, req: Request) -> dict[str, Any]:
        text = "".join(i.text for i in plan.items if i.kind == "text")
        message: dict[str, Any] = {"role": "assistant", "content": text}
        reasoning = "".join(i.text for i in plan.items if i.kind == "reasoning")
        if reasoning:
            message["reasoning_content"] = reasoning
        calls = [{"id": i.call_id, "type": "function",
                  "function": {"name": i.name, "arguments": json.dumps(i.arguments)}}
                 for i in plan.items if i.kind == "tool"]
        if calls:
            message["tool_calls"] = calls
        prompt, completion = usage_counts(len(text))
        return {"id": plan.response_id, "object": "chat.completion", "created": 0,
                "model": req.model or "scripted",
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}
