"""The neutral side of the model API shapes: a request read from any API, the plan
rendered to any API, and the :class:`Shape` each API implements."""

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
    ("list_files", {"path": ".", "recursive": False}),
    ("read_file", {"path": "README.md"}),  # absent: the tool result is an error, still harmless
    ("search_files", {"path": ".", "regex": "TODO", "file_pattern": "*"}),
    ("grep", {"pattern": "TODO", "path": "."}),
    ("shell", {"command": ["ls"]}),
    ("exec_command", {"cmd": "ls"}),
    ("shell_command", {"command": "ls"}),
    ("terminal", {"command": "ls"}),
    ("bash", {"command": "ls"}),
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

    def declare(self, declarations: Any, *schema_keys: str) -> None:
        """Record the tools of ``declarations`` (each a mapping with a ``name``), with the
        parameters schema under the first of ``schema_keys`` it has."""
        for d in declarations if isinstance(declarations, list) else []:
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                self.tools[d["name"]] = next(
                    (d[k] for k in schema_keys if d.get(k) is not None), None)


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
    path = next((v for k, v in args.items() if "path" in k.lower() and isinstance(v, str)), ".")
    for name in schema.get("required") or []:
        if name in out or not isinstance(name, str):
            continue
        prop = props.get(name)
        typ = str(prop.get("type", "string") if isinstance(prop, dict) else "string").lower()
        low = name.lower()
        if "regex" in low or "query" in low or ("pattern" in low and "pattern" in args):
            out[name] = next((v for k, v in args.items() if k in ("regex", "pattern")), "TODO")
        elif "pattern" in low or "glob" in low:
            out[name] = "*"
        elif "command" in low or low == "cmd":
            out[name] = ["ls"] if typ == "array" else "ls"
        elif "path" in low or "dir" in low or "file" in low or low in ("cd", "cwd"):
            out[name] = path
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


def text_of(content: Any) -> str:
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


def usage_counts(text_len: int) -> tuple[int, int]:
    return 10, max(1, text_len // 4)


class Shape:
    """One API shape: recognise its path, read a request, render a plan."""

    name = ""
    per_item_ids = False  # True: every output item has its own upstream ID (Responses)
    id_prefix: ClassVar[dict[str, str]] = {
        "response": "resp", "reasoning": "rs", "text": "msg", "tool": "fc", "call": "call"}

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
