"""The Gemini API shape."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar

from conformance.modelserver.apis.base import (
    Plan,
    Request,
    Shape,
    text_of,
    usage_counts,
)


class Gemini(Shape):
    """Gemini ``models/{model}:streamGenerateContent`` (SSE) and ``:generateContent``."""

    name = "gemini"
    id_prefix: ClassVar[dict[str, str]] = {
        "response": "gresp", "reasoning": "gresp", "text": "gresp", "tool": "gcall",
        "call": "gcall"}

    def matches(self, path: str) -> bool:
        return bool(re.search(r"/models/[^/]+:(stream)?[gG]enerateContent$", path))

    def parse(self, path: str, body: dict[str, Any]) -> Request:
        m = re.search(r"/models/([^/:]+):", path)
        req = Request(self.name, m.group(1) if m else "", "streamGenerateContent" in path)
        for t in body.get("tools") or []:
            if isinstance(t, dict):
                req.declare(t.get("functionDeclarations"), "parametersJsonSchema", "parameters")
        contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
        last_user = -1
        for n, c in enumerate(contents):
            parts = [p for p in c.get("parts") or [] if isinstance(p, dict)]
            if c.get("role", "user") == "user" and any("text" in p for p in parts) \
                    and not any("functionResponse" in p for p in parts):
                req.turn += 1
                last_user = n
                req.last_user = text_of(parts)
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
        prompt, completion = usage_counts(out_len)
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
