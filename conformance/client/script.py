"""What the agent double plays: client cases' ``stream`` turns, expanded per protocol.

A client case (``applies.role: client``) lists named turns under ``stream``
and plays them with ``{play: NAME}`` drive steps. Each turn's ``updates`` are
small steps written for people; :func:`expand_turn` turns them into the exact
``session/update`` payloads (and permission requests) the double sends::

    {agent: "Alpha. ", id: a-1}          agent_message_chunk, messageId "a-1"
    {thought: "Hm. "}                    agent_thought_chunk, no messageId key
    {user: "Hi. ", id: null}             user_message_chunk, messageId null
    {agent: "X. ", id: 42}               a wrongly typed ID (v1 fuzz)
    {agent: "X. ", id_repeat: {text: x, times: 65536}}   a 64 KiB ID
    {upsert: agent, id: a-1, content: ["C. "], meta: {k: 1}}   v2 whole-message update
    {tool_call: "Read a file"}           a tool call, announced then completed
    {permission: "Read a file"}          session/request_permission; waits for the answer
    {raw: {sessionUpdate: ...}}          any update object, sent as is
    {batch: [{agent: ...}, ...]}         v2: these updates in one JSON-RPC batch line

A turn may instead be drawn from Hypothesis: ``{turn: f, generate: {seed: 3}}``
(:func:`conformance.fuzz.strategies.chunk_streams`), deterministically.

Every text the double sends must be unique within a case, so that each
expected message can be recognised in the client's rendering; :func:`check_case`
says so with the case's file and line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the agent double imports this module: it stays light
    from conformance.cases import Case

KINDS = ("user", "agent", "thought")
CHUNK_UPDATE = {"user": "user_message_chunk", "agent": "agent_message_chunk",
                "thought": "agent_thought_chunk"}
UPSERT_UPDATE = {"user": "user_message", "agent": "agent_message", "thought": "agent_thought"}
JsonObject = dict[str, Any]


@dataclass(frozen=True)
class TurnScript:
    """One turn as the double plays it: JSON-ready, protocol-specific."""

    name: str
    prompt: str
    echo: bool  # the double reports the prompt as a user message with its own ID
    actions: tuple[JsonObject, ...]  # {"update": {...}} | {"permission": {"title": ...}}

    def to_json(self) -> JsonObject:
        return {"name": self.name, "prompt": self.prompt, "echo": self.echo,
                "actions": list(self.actions)}

    @classmethod
    def from_json(cls, d: JsonObject) -> TurnScript:
        return cls(str(d["name"]), str(d["prompt"]), bool(d["echo"]), tuple(d["actions"]))


def text_block(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def step_kind(step: JsonObject) -> str:
    for key in ("user", "agent", "thought", "upsert", "tool_call", "permission", "raw", "batch"):
        if key in step:
            return key
    raise ValueError(f"unknown stream step {step!r}")  # the case schema makes this unreachable


def step_id(step: JsonObject) -> tuple[bool, Any]:
    """(present, value) of a step's messageId, ``id_repeat`` expanded."""
    if "id_repeat" in step:
        rep = step["id_repeat"]
        return True, str(rep["text"]) * int(rep["times"])
    if "id" in step:
        return True, step["id"]
    return False, None


class _Ids:
    def __init__(self) -> None:
        self.tools = 0

    def tool(self) -> str:
        self.tools += 1
        return f"call-{self.tools}"


def expand_steps(steps: Iterable[JsonObject], protocol: int, ids: _Ids | None = None
                 ) -> list[JsonObject]:
    """Human steps -> the double's actions for ``protocol``."""
    ids = ids or _Ids()
    out: list[JsonObject] = []
    for step in steps:
        kind = step_kind(step)
        if kind in KINDS:
            update: JsonObject = {"sessionUpdate": CHUNK_UPDATE[kind]}
            present, value = step_id(step)
            if present:
                update["messageId"] = value
            update["content"] = text_block(str(step[kind]))
            if "meta" in step:
                update["_meta"] = step["meta"]
            out.append({"update": update})
        elif kind == "upsert":
            update = {"sessionUpdate": UPSERT_UPDATE[step["upsert"]]}
            present, value = step_id(step)
            if present:
                update["messageId"] = value
            if "content" in step:
                update["content"] = _content(step["content"])
            if "meta" in step:
                update["_meta"] = step["meta"]
            out.append({"update": update})
        elif kind == "tool_call":
            tid = ids.tool()
            title = str(step["tool_call"])
            first = "tool_call_update" if protocol >= 2 else "tool_call"
            out.append({"update": {"sessionUpdate": first, "toolCallId": tid, "title": title,
                                   "kind": "read",
                                   "status": "in_progress" if protocol >= 2 else "pending"}})
            out.append({"update": {"sessionUpdate": "tool_call_update", "toolCallId": tid,
                                   "status": "completed"}})
        elif kind == "batch":  # v2: one line carrying a JSON-RPC batch of these updates
            inner = expand_steps(step["batch"], protocol, ids)
            out.append({"batch": [a["update"] for a in inner if "update" in a]})
        elif kind == "permission":
            out.append({"permission": {"title": str(step["permission"]), "toolCallId": ids.tool()}})
        else:
            out.append({"update": dict(step["raw"])})
    return out


def _content(value: Any) -> Any:
    """Upsert content: strings become text blocks; anything else is sent as written."""
    if isinstance(value, list):
        return [text_block(v) if isinstance(v, str) else v for v in value]
    return value


def step_texts(step: JsonObject) -> list[str]:
    kind = step_kind(step)
    if kind in KINDS:
        return [str(step[kind])]
    if kind == "batch":
        return [t for inner in step["batch"] for t in step_texts(inner)]
    if kind == "upsert" and isinstance(step.get("content"), list):
        return [v if isinstance(v, str) else str(v.get("text", "")) for v in step["content"]
                if isinstance(v, (str, dict))]
    return []


def turns_of(case: Case) -> dict[str, JsonObject]:
    return {str(t["turn"]): t for t in case.stream}


def check_case(case: Case) -> None:
    """Client-case rules the JSON Schema cannot say, as one-line errors with file:line."""
    from conformance.cases import CaseError
    from conformance.results import with_article

    if case.role != "client":
        return
    where = f"{case.source}: case {case.id}"
    turns = turns_of(case)
    if len(turns) != len(case.stream):
        raise CaseError(f"{where}: two stream turns share a name")
    if not turns:
        raise CaseError(f"{where}: a client case needs a stream of turns")
    for step in case.drive:
        if isinstance(step, dict) and "play" in step and step["play"] not in turns:
            raise CaseError(f"{where}: play {step['play']!r} names no turn in stream "
                            f"(known: {', '.join(turns)})")
        if isinstance(step, dict) and "play" not in step:
            raise CaseError(f"{where}: client cases use start, restart and play steps, "
                            f"not {next(iter(step))!r}")
        if isinstance(step, str) and step not in ("start", "restart"):
            raise CaseError(f"{where}: client cases use start, restart and play steps, "
                            f"not {step!r}")
    seen: dict[str, str] = {}
    for name, turn in turns.items():
        texts = [str(turn.get("prompt", default_prompt(name)))]
        for step in turn.get("updates", []):
            if step_kind(step) in ("upsert", "batch") and 1 in case.protocols:
                raise CaseError(f"{where}: turn {name!r} has {with_article(step_kind(step))} step; "
                                "those exist only in v2 (applies.protocols: [2])")
            texts += step_texts(step)
        for text in texts:
            if not text:
                raise CaseError(f"{where}: turn {name!r} sends an empty text; every text "
                                "must be recognisable in the client's output")
            if text in seen:
                raise CaseError(f"{where}: the text {text!r} is sent twice (turns {seen[text]!r} "
                                f"and {name!r}); texts must be unique so messages can be told "
                                "apart in the client's output")
            if "\n" in text or "\r" in text:
                raise CaseError(f"{where}: turn {name!r}: texts are one line each: {text!r}")
            seen[text] = name


def default_prompt(name: str) -> str:
    return f"Please play turn {name}."


def build_turn(case: Case, name: str, protocol: int, ids: _Ids | None = None) -> TurnScript:
    turn = turns_of(case)[name]
    prompt = str(turn.get("prompt", default_prompt(name)))
    echo = bool(turn.get("echo", protocol >= 2))
    if "generate" in turn:
        from conformance.fuzz.strategies import example_streams

        gen = turn["generate"]
        (steps,) = example_streams(protocol=protocol, seed=int(gen.get("seed", 0)), count=1,
                                   text_prefix=f"{name}-")
    else:
        steps = list(turn.get("updates", []))
    return TurnScript(name, prompt, echo, tuple(expand_steps(steps, protocol, ids)))


def new_ids() -> _Ids:
    return _Ids()
