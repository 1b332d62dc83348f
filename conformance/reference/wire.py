"""Wire-level pieces of the reference agent: JSON types, constants, error codes, and the
one way a message is encoded to (and decoded from) a line."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any

JsonObject = dict[str, Any]
RequestId = int | str | None
# One wire line carries a single message or (v2) a batch array of messages.
WireMessage = JsonObject | list[Any]

AGENT_NAME = "acp-conformance-reference-agent"
AGENT_VERSION = "0.1.0"
SUPPORTED_VERSIONS = (1, 2)

# JSON-RPC / ACP error codes ($defs.ErrorCode in both schemas).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002

# Message kinds ("user", "agent", "thought") and their update kinds.
CHUNK_UPDATES = {
    "user": "user_message_chunk",
    "agent": "agent_message_chunk",
    "thought": "agent_thought_chunk",
}
# v2 only: whole-message upserts.
MESSAGE_UPDATES = {"user": "user_message", "agent": "agent_message", "thought": "agent_thought"}
# A prompt containing the word "long" gets a long, cancellable reply.
LONG_PROMPT = re.compile(r"\blong\b", re.IGNORECASE)

class RpcError(Exception):
    """A JSON-RPC error answer to the request being handled."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def text_block(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def joined_text(blocks: list[JsonObject]) -> str:
    return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")


def decode_line(raw: bytes) -> Any:
    """Parse one line as strict JSON (no NaN or Infinity)."""

    def reject(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(raw.decode("utf-8"), parse_constant=reject)


def encode_line(message: WireMessage) -> bytes:
    """One compact UTF-8 JSON line. Falls back to ASCII escapes for strings
    that cannot be encoded as UTF-8 (lone surrogates echoed from a prompt)."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(message, separators=(",", ":")) + "\n").encode("ascii")


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
