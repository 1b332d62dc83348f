"""Our own model of the ACP shapes that carry message identity.

Written from the requirement catalogue, not copied from the official schema
(which a user may pass with ``--schema-dir`` for full validation). It knows
which ``sessionUpdate`` kinds are messages, what form they take, and how to
read a ``messageId`` without trusting its type.
"""

from __future__ import annotations

from typing import Any

CHUNK_KINDS: dict[str, str] = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}
UPSERT_KINDS: dict[str, str] = {  # v2 whole-message updates
    "user_message": "user",
    "agent_message": "agent",
    "agent_thought": "thought",
}
MESSAGE_KINDS: dict[str, str] = {**CHUNK_KINDS, **UPSERT_KINDS}
#: Updates that exist only in v2: an agent that answered protocolVersion 1 and sends one
#: speaks the other version (TARGET/negotiation/agent).
V2_ONLY_UPDATES = frozenset({"state_update", *UPSERT_KINDS})
# SDK 2.4.0's inter-session messages (catalogue Appendix I, MID-S-04 addition): a fourth
# kind, "session", with its own ID space; message kinds only under a profile that has them
# (``Profile.session_messages``).
SESSION_CHUNK_KINDS: dict[str, str] = {"session_message_chunk": "session"}
SESSION_UPSERT_KINDS: dict[str, str] = {"session_message": "session"}
SESSION_KINDS: dict[str, str] = {**SESSION_CHUNK_KINDS, **SESSION_UPSERT_KINDS}
WITH_SESSION_KINDS: dict[str, str] = {**MESSAGE_KINDS, **SESSION_KINDS}
KINDS = ("user", "agent", "thought")  # the message kinds of every profile


def update_kind(update: dict[str, Any]) -> str | None:
    """An update's kind as the driver reads it: its sessionUpdate when that is a string
    (any other value is the shape rules' to grade; looked up in a set, it would raise)."""
    kind = update.get("sessionUpdate")
    return kind if isinstance(kind, str) else None


def with_article(word: object) -> str:
    """``word`` with its indefinite article, for finding texts built from values:
    "an agent message", "a user_message_chunk", "an 8-character messageId"."""
    text = str(word)
    digits = text[: len(text) - len(text.lstrip("0123456789"))]
    if digits:  # eight, eighteen, eleven, eighty, eleven thousand ...
        an = digits[0] == "8" or (len(digits) % 3 == 2 and digits[:2] in ("11", "18"))
    else:
        lower = text.lower()
        an = lower[:1] in ("a", "e", "i", "o", "u") and not lower.startswith(
            ("uni", "use", "usa", "usu", "uti", "eu", "one"))
    return f"{'an' if an else 'a'} {text}"


def message_kinds(session_messages: bool) -> dict[str, str]:
    """The update kinds that are messages, by kind name (with ``session`` or without)."""
    return WITH_SESSION_KINDS if session_messages else MESSAGE_KINDS


def is_chunk(update_type: str) -> bool:
    return update_type in CHUNK_KINDS or update_type in SESSION_CHUNK_KINDS
NEAR_MISS_KEYS = ("message_id", "messageID", "MessageId", "messageid", "MessageID", "message-id")
LEGACY_PROMPT_KEYS = ("messageId", "userMessageId")


def names_message_id(key: str) -> bool:
    """A ``_meta`` key that names a message ID, whatever its spelling: ``messageId``,
    ``message_id``, ``messageID``, ``userMessageId``, ``user_message_id``, ``message-id``...
    (``_meta`` is free-form, so a client's own ID may travel under any of them)."""
    return "".join(c for c in key.lower() if c.isalnum()).endswith("messageid")

# States of a messageId field, as read off the wire.
ABSENT = "absent"
NULL = "null"
STRING = "string"
WRONG_TYPE = "wrong-type"

LONG_ID = 1024  # C-13: agents warn above this many characters


def id_state(update: dict[str, Any]) -> tuple[str, Any]:
    if "messageId" not in update:
        return ABSENT, None
    value = update["messageId"]
    if value is None:
        return NULL, None
    if isinstance(value, str):
        return STRING, value
    return WRONG_TYPE, value


def as_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (typed for the checker)."""
    return value if isinstance(value, dict) else {}


# capabilities.session members of the v2 drafts whose methods take a messageId (K.8)
DRAFTED_ADDRESSED = ("rewind", "inject")


def addressed_methods(capabilities: Any) -> list[str]:
    """The drafted ID-addressed methods an ``initialize`` result's capabilities advertise
    (``session.rewind``, ``session.inject``, ``session.fork.messageId``)."""
    session = as_object(as_object(capabilities).get("session"))
    found = [f"session.{name}" for name in DRAFTED_ADDRESSED if name in session]
    if "messageId" in as_object(session.get("fork")):
        found.append("session.fork.messageId")
    return found


def as_array(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def block_text(block: Any) -> str:
    """The text a content block shows (empty for non-text blocks)."""
    if isinstance(block, dict):
        text = block.get("text")
        if isinstance(text, str):
            return text
    return ""


def blocks_text(blocks: Any) -> str:
    if isinstance(blocks, list):
        return "".join(block_text(b) for b in blocks)
    return block_text(blocks)


def is_request(msg: Any) -> bool:
    return isinstance(msg, dict) and "method" in msg and "id" in msg


def is_response(msg: Any) -> bool:
    return isinstance(msg, dict) and "method" not in msg and "id" in msg and (
        "result" in msg or "error" in msg)


def jsonrpc_problem(msg: Any) -> str | None:
    """Why a parsed line is not a JSON-RPC 2.0 message (None when it is one)."""
    if not isinstance(msg, dict):
        return f"a JSON {json_type(msg)}, not a JSON-RPC object"
    if msg.get("jsonrpc") != "2.0":
        return "missing or wrong \"jsonrpc\": \"2.0\""
    if "params" in msg and not isinstance(msg["params"], (dict, list)):
        return "\"params\" is neither an object nor an array"  # JSON-RPC 2.0, section 4.2
    if "method" in msg:
        if not isinstance(msg["method"], str):
            return "\"method\" is not a string"
        rid = msg.get("id")
        if "id" in msg and (not isinstance(rid, (str, int)) or isinstance(rid, bool)):
            return "request \"id\" is neither a string nor an integer"
        return None
    if "id" in msg and ("result" in msg or "error" in msg):
        return None
    return "neither a request, a notification nor a response"
