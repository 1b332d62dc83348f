"""Model scripts: what the scripted model says, per request, as plain YAML data.

A script is a list of replies. The model answers the *k*-th request of a turn
with ``replies[k]``: *k* counts the tool-result rounds since the user's last
prompt, read from the request itself, so the answer depends only on what the
agent sent (no hidden state, the same on every run). A request past the end of
the list gets the last reply with its tool calls removed, so a turn always ends.

Example::

    format: 1
    description: reasoning, text and a tool call, then text after the tool result
    ids: unique          # upstream item IDs: unique, or repeat the same IDs on every reply
    replies:
      - say:
          - reasoning: "The user wants a listing."
          - text: "Let me look at the folder (turn {turn})."
          - tool: auto     # one harmless tool picked from the tools the agent declared
      - say:
          - text: "The folder is listed above (turn {turn})."

``{turn}`` is the number of user prompts in the request and ``{request}`` the
server's request counter, so replayed messages can be told apart by content.

A prompt can get its own replies: ``when: [{prompt: REGEX, replies: [...]}]``
is tried in order against the user's last prompt before ``replies``.

A turn can get its own replies too: ``turns: [[...], [...]]`` answers the
*t*-th user prompt of the conversation with ``turns[t-1]`` (by round, as
above); turns past the list fall back to ``when`` and ``replies``. A reply may
name its response ID (``id``) and a part its item ID (``id``); without one the
server makes a fresh ID (or repeats one, with ``ids: repeat``). The fuzzer
draws scripts of this form (:func:`conformance.strategies.model_scripts`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from conformance.cases import CaseError, compose_with_lines, read_input

SCRIPT_FORMAT = 1

# The script schema is small and owned here (kept as data beside the loader).
SCRIPT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "replies"],
    "properties": {
        "format": {"const": SCRIPT_FORMAT},
        "description": {"type": "string"},
        "ids": {"enum": ["unique", "repeat"]},
        "pace": {"type": "number", "minimum": 0, "maximum": 5},
        "replies": {"$ref": "#/$defs/replies"},
        "turns": {"type": "array", "items": {"$ref": "#/$defs/replies"}},
        "when": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["prompt", "replies"],
            "properties": {"prompt": {"type": "string", "minLength": 1},
                           "replies": {"$ref": "#/$defs/replies"}}}},
    },
    "$defs": {
        "replies": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/reply"}},
        "reply": {
            "type": "object", "additionalProperties": False, "required": ["say"],
            "properties": {
                "say": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/part"}},
                "pace": {"type": "number", "minimum": 0, "maximum": 5},
                "id": {"type": "string"},
            },
        },
        "part": {
            "oneOf": [
                {"type": "object", "additionalProperties": False, "required": ["text"],
                 "properties": {"text": {"type": "string"}, "id": {"type": "string"},
                                "chunks": {"type": "integer", "minimum": 1, "maximum": 500}}},
                {"type": "object", "additionalProperties": False, "required": ["reasoning"],
                 "properties": {"reasoning": {"type": "string"}, "id": {"type": "string"},
                                "chunks": {"type": "integer", "minimum": 1, "maximum": 500}}},
                {"type": "object", "additionalProperties": False, "required": ["tool"],
                 "properties": {"id": {"type": "string"}, "tool": {"oneOf": [
                     {"const": "auto"},
                     {"type": "object", "additionalProperties": False,
                      "properties": {
                          "choose": {"type": "array", "minItems": 1,
                                     "items": {"type": "string"}},
                          "arguments": {"type": "object"}}}]}}},
            ]
        },
    },
}


class ScriptError(CaseError):
    """A model script that cannot be used (bad input, exit 2); names file and line."""


@dataclass(frozen=True)
class Part:
    kind: str  # "reasoning" | "text" | "tool"
    text: str = ""
    chunks: int | None = None  # how many deltas to stream the text in (default: per word)
    choose: tuple[str, ...] = ()  # tool names to prefer, in order ("" = the built-in list)
    arguments: Mapping[str, Any] | None = None
    id: str | None = None  # the upstream item ID (None: the server makes one)


@dataclass(frozen=True)
class Reply:
    parts: tuple[Part, ...]
    pace: float = 0.0  # seconds between streamed deltas
    id: str | None = None  # the upstream response ID (None: the server makes one)

    def without_tools(self) -> Reply:
        kept = tuple(p for p in self.parts if p.kind != "tool")
        return Reply(kept or (Part("text", "Done."),), self.pace, self.id)


@dataclass(frozen=True)
class ModelScript:
    replies: tuple[Reply, ...]
    ids: str = "unique"  # "unique" | "repeat"
    name: str = "default"
    description: str = ""
    when: tuple[tuple[re.Pattern[str], tuple[Reply, ...]], ...] = ()
    turns: tuple[tuple[Reply, ...], ...] = ()

    def reply_for(self, round_: int, prompt: str = "", turn: int = 0) -> Reply:
        """The reply to the ``round_``-th request of a turn (0 = answering the prompt);
        ``turn`` counts the user prompts of the conversation (1 = the first)."""
        replies = self.replies
        if 0 < turn <= len(self.turns):
            replies = self.turns[turn - 1]
        else:
            for pattern, chosen in self.when:
                if pattern.search(prompt):
                    replies = chosen
                    break
        if round_ < len(replies):
            return replies[round_]
        return replies[-1].without_tools()


def default_script() -> ModelScript:
    """Reasoning then text and one harmless tool call, then text after the tool result."""
    return ModelScript(name="default", description="reasoning, text + tool, text", replies=(
        Reply((Part("reasoning", "The user asked something; a quick look at the folder helps."),
               Part("text", "Let me look at the working directory first (turn {turn})."),
               Part("tool"))),
        Reply((Part("text", "I have listed the working directory, and that is all "
                            "(turn {turn})."),)),
    ))


def parse_script(data: Any, name: str, lines: Mapping[tuple[Any, ...], int] | None = None
                 ) -> ModelScript:
    import jsonschema

    validator = jsonschema.Draft202012Validator(SCRIPT_SCHEMA)
    errors = list(validator.iter_errors(data))
    if errors:
        err = min(errors, key=lambda e: len(list(e.absolute_path)))
        path = tuple(err.absolute_path)
        line = 1
        if lines:
            p = path
            while p and p not in lines:
                p = p[:-1]
            line = lines.get(p, 1)
        where = "/".join(map(str, path)) or "(top)"
        message = err.message
        if err.validator == "additionalProperties":
            message = f"unknown key: {err.message}"
        elif err.validator == "oneOf":
            message = "not a known part (expected text, reasoning or tool)" \
                if "say" in map(str, path) else f"invalid value: {str(err.instance)[:80]}"
        raise ScriptError(f"{name}:{line}: {where}: {message}")
    when = []
    for rule in data.get("when", []):
        try:
            pattern = re.compile(rule["prompt"])
        except re.error as exc:
            raise ScriptError(f"{name}: when: bad prompt pattern {rule['prompt']!r}: {exc}") \
                from None
        when.append((pattern, _replies(rule["replies"], data)))
    return ModelScript(_replies(data["replies"], data), data.get("ids", "unique"), name,
                       data.get("description", ""), tuple(when),
                       tuple(_replies(t, data) for t in data.get("turns", [])))


def _replies(items: list[Any], data: dict[str, Any]) -> tuple[Reply, ...]:
    replies = []
    for r in items:
        parts = []
        for p in r["say"]:
            if "text" in p:
                parts.append(Part("text", p["text"], p.get("chunks"), id=p.get("id")))
            elif "reasoning" in p:
                parts.append(Part("reasoning", p["reasoning"], p.get("chunks"), id=p.get("id")))
            else:
                tool = p["tool"]
                if tool == "auto":
                    parts.append(Part("tool", id=p.get("id")))
                else:
                    parts.append(Part("tool", choose=tuple(tool.get("choose", ())),
                                      arguments=tool.get("arguments"), id=p.get("id")))
        replies.append(Reply(tuple(parts), float(r.get("pace", data.get("pace", 0.0))),
                             r.get("id")))
    return tuple(replies)


def load_script(path: Path) -> ModelScript:
    """Load a YAML model script; a bad file is a ScriptError naming file and line."""
    name = str(path)
    text = read_input(path, "model script", ScriptError)
    try:
        data, lines = compose_with_lines(text, name)
    except CaseError as exc:
        raise ScriptError(str(exc).replace("case file", "model script")) from None
    script = parse_script(data, name, lines)
    return replace(script, name=Path(path).stem)


def dump_example() -> str:
    """The default script as YAML (for ``python -m conformance.modelserver --example``)."""
    s = default_script()
    data = {"format": SCRIPT_FORMAT, "description": s.description, "ids": s.ids,
            "replies": [{"say": [{"tool": "auto"} if p.kind == "tool" else {p.kind: p.text}
                                 for p in r.parts]} for r in s.replies]}
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
