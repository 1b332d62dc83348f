"""The four model API shapes the scripted server speaks.

Each shape reads what it needs from a request (the tools the agent declared,
which turn and which tool round the request belongs to) into a neutral
:class:`Request`, and renders a neutral :class:`Plan` (reasoning, text and tool
items with their upstream IDs) as that API's streaming events or as its
non-streaming JSON body. Only the fields agents actually read are produced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

# Tools that only look at the working directory, with arguments that work.
# Argument names are adapted to the declared schema (see ``fit_arguments``).
HARMLESS_TOOLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("glob", {"pattern": "*"}),
    ("list_directory", {"dir_path": "."}),
    ("list", {"path": "."}),
    ("ls", {"path": "."}),
    ("LS", {"path": "."}),
    ("list_dir", {"path": "."}),
    ("shell", {"command": ["ls"]}),
    ("exec_command", {"cmd": "ls"}),
    ("shell_command", {"command": "ls"}),
)


@dataclass
class Request:
    """What the server needs to know about one request, whatever its API shape."""

    api: str
    model: str = ""
    stream: bool = True
    tools: dict[str, Any] = field(default_factory=dict)  # name -> parameters schema
    turn: int = 0  # user prompts in the conversation so far
    round: int = 0  # tool-result rounds since the last user prompt
    last_user: str = ""
    wants_json: bool = False  # structured output asked (a side request, not a turn)


@dataclass
class Item:
    kind: str  # "reasoning" | "text" | "tool"
    id: str
    text: str = ""
    deltas: list[str] = field(default_factory=list)
    name: str = ""
    call_id: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        if self.kind == "tool":
            return {"kind": "tool", "id": self.id, "call_id": self.call_id, "name": self.name,
                    "arguments": self.arguments}
        return {"kind": self.kind, "id": self.id, "text": self.text}


@dataclass
class Plan:
    response_id: str
    items: list[Item]
    pace: float = 0.0

    @property
    def has_tool(self) -> bool:
        return any(i.kind == "tool" for i in self.items)


def fit_arguments(args: dict[str, Any], schema: Any) -> dict[str, Any]:
    """Fit harmless arguments to a declared parameter schema (renamed or extra fields)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return dict(args)
    props: dict[str, Any] = schema["properties"]
    out = {k: v for k, v in args.items() if k in props}
    for name in schema.get("required") or []:
        if name in out or not isinstance(name, str):
            continue
        prop = props.get(name)
        typ = str(prop.get("type", "string") if isinstance(prop, dict) else "string").lower()
        low = name.lower()
        if "pattern" in low or "glob" in low:
            out[name] = "*"
        elif "command" in low or low == "cmd":
            out[name] = ["ls"] if typ == "array" else "ls"
        elif "path" in low or "dir" in low:
            out[name] = "."
        elif typ == "array":
            out[name] = []
        elif typ in ("integer", "number"):
            out[name] = 1
        elif typ == "boolean":
            out[name] = False
        else:
            out[name] = ""
    return out


def split_deltas(text: str, chunks: int | None) -> list[str]:
    """Split text into stream deltas: one per word by default, or ``chunks`` even pieces."""
    if not text:
        return [""]
    if chunks is None:
        pieces = re.findall(r"\S+\s*|\s+", text)
        return pieces or [text]
    n = max(1, min(chunks, len(text)))
    size, rest = divmod(len(text), n)
    out, i = [], 0
    for k in range(n):
        j = i + size + (1 if k < rest else 0)
        out.append(text[i:j])
        i = j
    return out


def _text_of(content: Any) -> str:
    """Plain text of a message content in any of the shapes (string or list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict):
                t = part.get("text")
                if isinstance(t, str):
                    texts.append(t)
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return ""


def _usage_counts(text_len: int) -> tuple[int, int]:
    return 10, max(1, text_len // 4)


class Shape:
    """One API shape: recognise its path, read a request, render a plan."""

    name = ""
    per_item_ids = False  # True: every output item has its own upstream ID (Responses)
    id_prefix: ClassVar[dict[str, str]] = {"response": "resp", "reasoning": "rs", "text": "msg", "tool": "fc",
                 "call": "call"}

    def matches(self, path: str) -> bool:
        raise NotImplementedError

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        raise NotImplementedError

    def events(self, plan: Plan, req: Request) -> Iterator[bytes]:
        raise NotImplementedError

    def complete(self, plan: Plan, req: Request) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def sse(data: Any, event: str | None = None) -> bytes:
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        head = f"event: {event}\n" if event else ""
        return f"{head}data: {text}\n\n".encode()


class ChatCompletions(Shape):
    """OpenAI Chat Completions (``/v1/chat/completions``), used by OpenAI-compatible SDKs."""

    name = "openai-chat"
    id_prefix: ClassVar[dict[str, str]] = {"response": "chatcmpl", "reasoning": "chatcmpl", "text": "chatcmpl",
                 "tool": "call", "call": "call"}

    def matches(self, path: str) -> bool:
        return path.endswith("/chat/completions")

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        req = Request(self.name, str(body.get("model", "")), body.get("stream") is True)
        for t in body.get("tools") or []:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                req.tools[fn["name"]] = fn.get("parameters")
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        last_user = -1
        for i, m in enumerate(messages):
            if m.get("role") == "user":
                req.turn += 1
                last_user = i
                req.last_user = _text_of(m.get("content"))
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
        prompt, completion = _usage_counts(out_len)
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
        prompt, completion = _usage_counts(len(text))
        return {"id": plan.response_id, "object": "chat.completion", "created": 0,
                "model": req.model or "scripted",
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}


class Responses(Shape):
    """OpenAI Responses (``/v1/responses``): typed output items, each with its own ID."""

    name = "openai-responses"
    per_item_ids = True

    def matches(self, path: str) -> bool:
        return path.endswith("/responses")

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        req = Request(self.name, str(body.get("model", "")), body.get("stream") is True)
        for t in body.get("tools") or []:
            if isinstance(t, dict) and isinstance(t.get("name"), str):
                req.tools[t["name"]] = t.get("parameters")
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        items = [i for i in items or [] if isinstance(i, dict)]
        last_user = -1
        for n, item in enumerate(items):
            if item.get("role") == "user" and item.get("type", "message") == "message":
                text = _text_of(item.get("content"))
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
        prompt, completion = _usage_counts(out_len)
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


class AnthropicMessages(Shape):
    """Anthropic Messages (``/v1/messages``): content blocks in one message."""

    name = "anthropic-messages"
    id_prefix: ClassVar[dict[str, str]] = {"response": "msg", "reasoning": "msg", "text": "msg", "tool": "toolu",
                 "call": "toolu"}

    def matches(self, path: str) -> bool:
        return path.endswith("/messages")

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        req = Request(self.name, str(body.get("model", "")), body.get("stream") is True)
        for t in body.get("tools") or []:
            if isinstance(t, dict) and isinstance(t.get("name"), str):
                req.tools[t["name"]] = t.get("input_schema")
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
            req.last_user = _text_of(content)
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
        prompt, completion = _usage_counts(out_len)
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
        for n, (item, block) in enumerate(zip(plan.items, self._blocks(plan, False))):
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


class Gemini(Shape):
    """Gemini ``models/{model}:streamGenerateContent`` (SSE) and ``:generateContent``."""

    name = "gemini"
    id_prefix: ClassVar[dict[str, str]] = {"response": "gresp", "reasoning": "gresp", "text": "gresp", "tool": "gcall",
                 "call": "gcall"}

    def matches(self, path: str) -> bool:
        return bool(re.search(r"/models/[^/]+:(stream)?[gG]enerateContent$", path))

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        m = re.search(r"/models/([^/:]+):", path)
        req = Request(self.name, m.group(1) if m else "", "streamGenerateContent" in path)
        for t in body.get("tools") or []:
            for fd in (t.get("functionDeclarations") or []) if isinstance(t, dict) else []:
                if isinstance(fd, dict) and isinstance(fd.get("name"), str):
                    req.tools[fd["name"]] = fd.get("parametersJsonSchema") or fd.get(
                        "parameters")
        contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
        last_user = -1
        for n, c in enumerate(contents):
            parts = [p for p in c.get("parts") or [] if isinstance(p, dict)]
            if c.get("role", "user") == "user" and any("text" in p for p in parts) \
                    and not any("functionResponse" in p for p in parts):
                req.turn += 1
                last_user = n
                req.last_user = _text_of(parts)
        req.round = sum(1 for c in contents[last_user + 1:]
                        if any("functionResponse" in p for p in c.get("parts") or []
                               if isinstance(p, dict)))
        cfg = body.get("generationConfig") or {}
        req.wants_json = isinstance(cfg, dict) and (
            cfg.get("responseMimeType") == "application/json"
            or "responseJsonSchema" in cfg or "responseSchema" in cfg)
        return req

    def _chunk(self, plan: Plan, req: Request, parts: list[dict[str, Any]],
               finish: str | None = None, out_len: int = 0) -> dict[str, Any]:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            cand["finishReason"] = finish
        prompt, completion = _usage_counts(out_len)
        return {"candidates": [cand],
                "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                                  "totalTokenCount": prompt + completion},
                "modelVersion": req.model or "scripted", "responseId": plan.response_id}

    def events(self, plan: Plan, req: Request) -> Iterator[bytes]:
        pending: list[dict[str, Any]] = []
        out_len = 0
        for item in plan.items:
            if item.kind == "tool":
                pending.append({"functionCall": {"name": item.name, "args": item.arguments}})
                continue
            for d in item.deltas:
                part: dict[str, Any] = {"text": d}
                if item.kind == "reasoning":
                    part["thought"] = True
                yield self.sse(self._chunk(plan, req, [part]))
            out_len += len(item.text)
        yield self.sse(self._chunk(plan, req, pending or [{"text": ""}], "STOP", out_len))

    def complete(self, plan: Plan, req: Request) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        for item in plan.items:
            if item.kind == "tool":
                parts.append({"functionCall": {"name": item.name, "args": item.arguments}})
            elif item.kind == "reasoning":
                parts.append({"text": item.text, "thought": True})
            else:
                parts.append({"text": item.text})
        return self._chunk(plan, req, parts, "STOP", sum(len(i.text) for i in plan.items))


SHAPES: tuple[Shape, ...] = (ChatCompletions(), Responses(), AnthropicMessages(), Gemini())


def shape_for(path: str) -> Shape | None:
    for shape in SHAPES:
        if shape.matches(path):
            return shape
    return None
