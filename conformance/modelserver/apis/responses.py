"""The OpenAI Responses API shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from conformance.modelserver.apis.base import (
    Item,
    Plan,
    Request,
    Shape,
    text_of,
    usage_counts,
)


class Responses(Shape):
    """OpenAI Responses (``/v1/responses``): typed output items, each with its own ID."""

    name = "openai-responses"
    per_item_ids = True

    def matches(self, path: str) -> bool:
        return path.endswith("/responses")

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        req = Request(self.name, str(body.get("model", "")), body.get("stream") is True)
        req.declare(body.get("tools"), "parameters")
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        items = [i for i in items or [] if isinstance(i, dict)]
        last_user = -1
        for n, item in enumerate(items):
            if item.get("role") == "user" and item.get("type", "message") == "message":
                text = text_of(item.get("content"))
                if text.lstrip().startswith("<"):  # injected context, not a prompt
                    continue
                req.turn += 1
                last_user = n
                req.last_user = text
        rounds, in_outputs = 0, False
        for item in items[last_user + 1:]:
            is_output = str(item.get("type", "")).endswith("_call_output")
            if is_output and not in_outputs:
                rounds += 1
            in_outputs = is_output
        req.round = rounds
        fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) \
            else None
        req.wants_json = isinstance(fmt, dict) and fmt.get("type") == "json_schema"
        return req

    def _response(self, plan: Plan, req: Request, status: str,
                  output: list[dict[str, Any]]) -> dict[str, Any]:
        out_len = sum(len(i.text) for i in plan.items)
        prompt, completion = usage_counts(out_len)
        resp: dict[str, Any] = {"id": plan.response_id, "object": "response", "created_at": 0,
                                "status": status, "model": req.model or "scripted",
                                "output": output}
        if status == "completed":
            resp["usage"] = {"input_tokens": prompt, "output_tokens": completion,
                             "total_tokens": prompt + completion,
                             "input_tokens_details": {"cached_tokens": 0},
                             "output_tokens_details": {"reasoning_tokens": 0}}
        return resp

    @staticmethod
    def _item(item: Item, done: bool) -> dict[str, Any]:
        status = "completed" if done else "in_progress"
        if item.kind == "reasoning":
            return {"id": item.id, "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": item.text}] if done else []}
        if item.kind == "text":
            return {"id": item.id, "type": "message", "status": status, "role": "assistant",
                    "content": [{"type": "output_text", "text": item.text, "annotations": []}]
                    if done else []}
        return {"id": item.id, "type": "function_call", "status": status,
                "call_id": item.call_id, "name": item.name,
                "arguments": json.dumps(item.arguments) if done else ""}

    def events(self, plan: Plan, req: Request) -> Iterator[bytes]:
        seq = iter(range(1 << 30))

        def ev(kind: str, **data: Any) -> bytes:
            return self.sse({"type": kind, "sequence_number": next(seq), **data}, kind)

        yield ev("response.created", response=self._response(plan, req, "in_progress", []))
        yield ev("response.in_progress", response=self._response(plan, req, "in_progress", []))
        for n, item in enumerate(plan.items):
            yield ev("response.output_item.added", output_index=n,
                     item=self._item(item, False))
            if item.kind == "reasoning":
                part = {"type": "summary_text", "text": ""}
                yield ev("response.reasoning_summary_part.added", item_id=item.id,
                         output_index=n, summary_index=0, part=part)
                for d in item.deltas:
                    yield ev("response.reasoning_summary_text.delta", item_id=item.id,
                             output_index=n, summary_index=0, delta=d)
                yield ev("response.reasoning_summary_text.done", item_id=item.id,
                         output_index=n, summary_index=0, text=item.text)
                yield ev("response.reasoning_summary_part.done", item_id=item.id,
                         output_index=n, summary_index=0,
                         part={"type": "summary_text", "text": item.text})
            elif item.kind == "text":
                yield ev("response.content_part.added", item_id=item.id, output_index=n,
                         content_index=0,
                         part={"type": "output_text", "text": "", "annotations": []})
                for d in item.deltas:
                    yield ev("response.output_text.delta", item_id=item.id, output_index=n,
                             content_index=0, delta=d)
                yield ev("response.output_text.done", item_id=item.id, output_index=n,
                         content_index=0, text=item.text)
                yield ev("response.content_part.done", item_id=item.id, output_index=n,
                         content_index=0,
                         part={"type": "output_text", "text": item.text, "annotations": []})
            else:
                args = json.dumps(item.arguments)
                yield ev("response.function_call_arguments.delta", item_id=item.id,
                         output_index=n, delta=args)
                yield ev("response.function_call_arguments.done", item_id=item.id,
                         output_index=n, arguments=args)
            yield ev("response.output_item.done", output_index=n, item=self._item(item, True))
        yield ev("response.completed", response=self._response(
            plan, req, "completed", [self._item(i, True) for i in plan.items]))

    def complete(self, plan: Plan, req: Request) -> dict[str, Any]:
        return self._response(plan, req, "completed", [self._item(i, True) for i in plan.items])
