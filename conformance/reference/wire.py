"""Wire-level pieces of the reference agent: JSON types, constants, error codes, and the
one way a message is encoded to (and decoded from) a line."""

from __future__ import annotations

import os
import sys
import time

# The agent starts once per case, so its modules import no more than they use at run time:
# not typing (the types below are for the type checker; at run time they are the classes),
# and neither json nor re (see ``_codec``: the two, with the enum module re loads, were a
# third of a fixture agent's start-up).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    JsonObject = dict[str, Any]
    # One wire line carries a single message or (v2) a batch array of messages.
    WireMessage = JsonObject | list[Any]
else:
    JsonObject = dict
    WireMessage = dict | list
RequestId = int | str | None

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

MAX_KEY = 255  # the longest v2 session/prompt idempotencyKey (schema crate 1.21.2 IdempotencyKey)

# Message kinds ("user", "agent", "thought") and their update kinds.
CHUNK_UPDATES = {
    "user": "user_message_chunk",
    "agent": "agent_message_chunk",
    "thought": "agent_thought_chunk",
}
# v2 only: whole-message upserts.
MESSAGE_UPDATES = {"user": "user_message", "agent": "agent_message", "thought": "agent_thought"}


def asks_for_long(text: str) -> bool:
    """Whether a prompt holds the word "long" (any case): it gets a long, cancellable
    reply. ``re`` is loaded only for a prompt that may (most prompts never load it)."""
    if "long" not in text.lower():
        return False
    import re

    return re.search(r"\blong\b", text, re.IGNORECASE) is not None


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


class _Strict:
    """The settings of ``json.loads(text, parse_constant=reject)``, for ``_json``'s scanner."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int

    @staticmethod
    def parse_constant(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")


def _codec() -> tuple[Any, Any] | None:
    """``json``'s own C scanner and encoder maker (the ``_json`` module), used as
    ``json.loads`` and ``json.dumps`` use them, without importing ``json``: its import
    compiles regular expressions at every start. None where they are missing or are not
    what ``json`` makes of them (another Python: ``json`` then does the work)."""
    try:
        from _json import encode_basestring, encode_basestring_ascii, make_encoder, make_scanner

        def default(o: Any) -> Any:
            raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")

        def encoder(ascii_only: bool) -> Any:  # fresh markers (the cycle check) each time
            return make_encoder({}, default, encode_basestring_ascii if ascii_only
                                else encode_basestring, None, ":", ",", False, False, True)

        probe = {"a": [1, 2.5, None, True, "\u00e9\n"]}
        ascii_text = '{"a":[1,2.5,null,true,"\\u00e9\\n"]}'
        settings: Any = _Strict  # the scanner reads these attributes (typeshed says a scanner)
        scanner = make_scanner(settings)
        if ("".join(encoder(False)(probe, 0)) != ascii_text.replace("\\u00e9", "\u00e9")
                or "".join(encoder(True)(probe, 0)) != ascii_text
                or scanner(ascii_text, 0) != (probe, len(ascii_text))):
            return None
        return scanner, encoder
    except (ImportError, TypeError, ValueError, StopIteration):
        return None


_CODEC = _codec()
_BLANK = " \t\n\r"  # JSON's whitespace


def decode(text: str) -> Any:
    """``json.loads(text)``, strict: NaN and Infinity are refused. A text that is not one
    JSON value is left to ``json`` itself, so the error is the one it gives (the scanner
    builds its error from ``json.decoder`` and, before that is loaded, has none to give)."""
    if _CODEC is not None:
        start = len(text) - len(text.lstrip(_BLANK))
        try:
            value, end = _CODEC[0](text, start)
        except Exception:  # noqa: BLE001 - json says why (the scanner cannot, without it)
            pass
        else:
            if not text[end:].lstrip(_BLANK):
                return value
    import json

    return json.loads(text, parse_constant=_Strict.parse_constant)


def encode(value: Any, *, ascii_only: bool = True) -> str:
    """``json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))``."""
    if _CODEC is not None:
        return "".join(_CODEC[1](ascii_only)(value, 0))
    import json

    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))


def decode_line(raw: bytes) -> Any:
    """Parse one line as strict JSON (no NaN or Infinity)."""
    return decode(raw.decode("utf-8"))


def encode_line(message: WireMessage) -> bytes:
    """One compact UTF-8 JSON line. Falls back to ASCII escapes for strings
    that cannot be encoded as UTF-8 (lone surrogates echoed from a prompt)."""
    try:
        return (encode(message, ascii_only=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (encode(message) + "\n").encode("ascii")


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def random_hex() -> str:
    """32 random hex digits: the opaque part of every ID the agent makes."""
    return os.urandom(16).hex()


_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


class Log:
    """The agent's log on stderr, level from ``$ACP_REFERENCE_LOG_LEVEL`` (default WARNING).

    The logging module is loaded only when a line is due: importing it is a good
    part of the agent's start-up, paid by every case of a run, and the agent logs
    only when something is off (or when asked for more).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.prefix = name  # main() sets the agent class's name

    def _emit(self, level: int, msg: str, *args: Any, exc_info: bool = False) -> None:
        wanted = os.environ.get("ACP_REFERENCE_LOG_LEVEL", "WARNING").upper()
        threshold = _LEVELS.get(wanted, _LEVELS["WARNING"])
        if level < threshold:
            return
        import logging

        logger = logging.getLogger(self.name)
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(f"{self.prefix}: %(levelname)s %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(threshold)
            logger.propagate = False
        logger.log(level, msg, *args, exc_info=exc_info)

    def info(self, msg: str, *args: Any) -> None:
        self._emit(_LEVELS["INFO"], msg, *args)

    def warning(self, msg: str, *args: Any) -> None:
        self._emit(_LEVELS["WARNING"], msg, *args)

    def exception(self, msg: str, *args: Any) -> None:
        """An error with the traceback of the exception being handled."""
        self._emit(_LEVELS["ERROR"], msg, *args, exc_info=True)


log = Log("acp-reference-agent")
