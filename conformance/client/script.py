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
(:func:`conformance.strategies.chunk_streams`), deterministically.

Every text the double sends must be unique within a case, so that each
expected message can be recognised in the client's rendering; :func:`check_case`
says so with the case's file and line. A turn with ``repeats: true`` may send a
text again within its own updates (two messages that say the same thing,
catalogue K.6): the observation then counts that text's copies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from conformance.controlstream import CAUSE_RULES, CONTROL_ID, CONTROL_PREFIX

if TYPE_CHECKING:  # the agent double imports this module: it stays light
    from conformance.cases import Case

KINDS = ("user", "agent", "thought")
CHUNK_UPDATE = {"user": "user_message_chunk", "agent": "agent_message_chunk",
                "thought": "agent_thought_chunk"}
UPSERT_UPDATE = {"user": "user_message", "agent": "agent_message", "thought": "agent_thought"}
JsonObject = dict[str, Any]
CONTROL_SUFFIX = "~control"


class TurnScript(NamedTuple):
    """One turn as the double plays it: JSON-ready, protocol-specific. A named tuple: the
    double imports this module, and ``dataclasses`` (with its ``inspect``) was about a sixth
    of the double's start-up, paid by every client case."""

    name: str
    prompt: str
    echo: bool  # the double reports the prompt as a user message with its own ID
    actions: tuple[JsonObject, ...]  # {"update": {...}} | {"permission": {"title": ...}}
    # False once the client left a liveness probe unanswered in this case: the probe is
    # still sent, but the turn ends without waiting for its answer (MID-C-08 costs once).
    await_probe: bool = True
    control_of: str = ""  # this turn is the control stream of that probe turn
    control: str = ""  # the name of this turn's control stream, played right after it
    # A reload: the session/update payloads the double replays on session/load (the
    # history); ``actions`` then answer the prompt of a one-shot client that resumed.
    replay: tuple[JsonObject, ...] = ()
    reload: bool = False
    # A reload whose replay the double cuts short: it replays ``replay`` and hangs up
    # (the connection ends: no marker, no response; catalogue K.3, MID-V2-14).
    hangup: bool = False
    # A reload that follows a cut one (the client resumes again, with a fresh agent).
    after_truncated: bool = False
    # A reload that replays the live updates as they were streamed: the client's display
    # after it must match its display after the live turns (MID-C-03/live-replay-parity).
    parity: bool = False

    def to_json(self) -> JsonObject:
        return {"name": self.name, "prompt": self.prompt, "echo": self.echo,
                "actions": list(self.actions), "await_probe": self.await_probe,
                "control_of": self.control_of, "control": self.control,
                "replay": list(self.replay), "reload": self.reload, "hangup": self.hangup,
                "after_truncated": self.after_truncated, "parity": self.parity}

    @classmethod
    def from_json(cls, d: JsonObject) -> TurnScript:
        return cls(str(d["name"]), str(d["prompt"]), bool(d["echo"]), tuple(d["actions"]),
                   bool(d.get("await_probe", True)), str(d.get("control_of", "")),
                   str(d.get("control", "")), tuple(d.get("replay") or ()),
                   bool(d.get("reload", False)), bool(d.get("hangup", False)),
                   bool(d.get("after_truncated", False)), bool(d.get("parity", False)))

    def observed_fields(self) -> JsonObject:
        """What an ``observed`` harness event says about the turn it observes."""
        out: JsonObject = {"turn": self.name}
        if self.control_of:
            out["control_of"] = self.control_of
        if self.control:
            out["control"] = self.control
        if self.reload:
            out["reload"] = True
        for flag in ("hangup", "after_truncated", "parity"):
            if getattr(self, flag):
                out[flag] = True
        return out


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
        self.controls = 0

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
    from conformance.model import with_article

    if case.role not in ("client", "proxy"):
        return
    where = f"{case.source}: case {case.id}"
    turns = turns_of(case)
    if len(turns) != len(case.stream):
        raise CaseError(f"{where}: two stream turns share a name")
    if not turns:
        raise CaseError(f"{where}: a {case.role} case needs a stream of turns")
    for step in case.drive:
        if case.role == "proxy" and step == "restart":
            raise CaseError(f"{where}: proxy cases use start, play and reload steps, "
                            "not 'restart'")
        if case.role == "client" and isinstance(step, dict) and "cancel" in step:
            raise CaseError(f"{where}: cancel is a step option of proxy cases only")
        if isinstance(step, dict) and "play" in step and step["play"] not in turns:
            raise CaseError(f"{where}: play {step['play']!r} names no turn in stream "
                            f"(known: {', '.join(turns)})")
        if isinstance(step, dict) and not {"play", "reload"} & set(step):
            raise CaseError(f"{where}: client cases use start, restart, play and reload "
                            f"steps, not {next(iter(step))!r}")
        if (isinstance(step, dict) and step.get("reload") in ("truncated", "after-truncated")
                and (case.role != "client" or 1 in case.protocols)):
            raise CaseError(f"{where}: reload {step['reload']!r} is a v2 client step "
                            "(applies.protocols: [2], role: client)")
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
        if turn.get("repeats"):  # its updates' texts may repeat among themselves
            texts = texts[:1] + list(dict.fromkeys(texts[1:]))
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


def _turn_steps(case: Case, name: str, protocol: int) -> tuple[str, bool, list[JsonObject]]:
    turn = turns_of(case)[name]
    prompt = str(turn.get("prompt", default_prompt(name)))
    echo = bool(turn.get("echo", protocol >= 2))
    if "generate" in turn:
        from conformance.strategies import example_streams

        gen = turn["generate"]
        (steps,) = example_streams(protocol=protocol, seed=int(gen.get("seed", 0)), count=1,
                                   text_prefix=f"{name}-")
    else:
        steps = list(turn.get("updates", []))
    return prompt, echo, steps


def build_turn(case: Case, name: str, protocol: int, ids: _Ids | None = None, *,
               controls: bool = True) -> TurnScript:
    """The turn ``name`` of ``case``; with ``controls``, it names the control stream that a
    case checking a cause-specific rule plays right after it."""
    prompt, echo, steps = _turn_steps(case, name, protocol)
    control = f"{name}{CONTROL_SUFFIX}" if controls and wants_controls(case) else ""
    return TurnScript(name, prompt, echo, tuple(expand_steps(steps, protocol, ids)),
                      control=control)


def build_control(case: Case, name: str, protocol: int, ids: _Ids) -> TurnScript:
    """The control stream of turn ``name``: the same arrangement with ordinary IDs.

    Every distinct string ID (look-alikes, ``""``, odd and long IDs) becomes its own plain
    ID, numbered in order of first appearance, so equal IDs stay equal and distinct ones
    distinct; a v1 ``null`` or wrongly typed ID is omitted (both read as absent,
    MID-S-02, MID-S-03); in v2 a chunk without a string ID gets an ID of its own. Texts
    carry the prefix ``Ctrl `` so both streams can be told apart on the screen. The
    reference reducer expects the same display for both: a client that shows them
    differently does so because of the property the probe has and the control lacks."""
    prompt, echo, steps = _turn_steps(case, name, protocol)
    ids.controls += 1
    tag = ids.controls
    plain: dict[str, str] = {}
    fresh = [0]

    def new_id() -> str:
        fresh[0] += 1
        return f"{CONTROL_ID}{tag}-{fresh[0]:03d}"

    def control_step(step: JsonObject) -> JsonObject:
        kind = step_kind(step)
        out = dict(step)
        if kind in KINDS or kind == "upsert":
            _, value = step_id(step)
            out.pop("id", None)
            out.pop("id_repeat", None)
            if isinstance(value, str):
                out["id"] = plain.setdefault(value, new_id())
            elif protocol >= 2:
                out["id"] = new_id()
        if kind in KINDS or kind in ("tool_call", "permission"):
            out[kind] = CONTROL_PREFIX + str(step[kind])
        elif kind == "upsert" and isinstance(step.get("content"), list):
            out["content"] = [CONTROL_PREFIX + v if isinstance(v, str) else v
                              for v in step["content"]]
        elif kind == "batch":
            out["batch"] = [control_step(inner) for inner in step["batch"]]
        return out

    controlled = [control_step(step) for step in steps]
    return TurnScript(f"{name}{CONTROL_SUFFIX}", CONTROL_PREFIX + prompt, echo,
                      tuple(expand_steps(controlled, protocol, ids)), control_of=name)


def wants_controls(case: Case) -> bool:
    """A case that checks a rule naming a specific cause plays a control after each turn."""
    return any(str(c).split("/", 1)[0] in CAUSE_RULES for c in case.checks)


TRUNCATED_AFTER = 3  # messages a truncated replay gets through before the agent hangs up


def build_reload(mode: str, played: list[TurnScript], protocol: int = 1) -> TurnScript:
    """A reload step: the turns played so far replayed as the history of the session
    (each prompt as a user message, then the turn's updates; permission requests are not
    replayed), with every message ID replaced by a fresh one (``fresh-ids``, MID-A-08
    allows it) or kept (``same-ids``, ``same-ids-chunks``, ``as-live``). v1 replays the
    chunks as they were streamed (``session/load``); v2 replays each message as one
    whole-message update, the form of the catalogue's flow for ``session/resume`` with
    ``replayFrom``, or, in ``same-ids-chunks`` and ``as-live``, rebuilds it from its chunks
    (every other update where it was live) after the whole-message update of the same ID
    with ``content: []`` that the v2 draft requires first (MID-V2-12, catalogue
    Appendix I). ``truncated`` (v2): three messages, user IDs kept (MID-V2-11), agent and
    thought IDs fresh (MID-A-08), then the double hangs up; ``after-truncated``, the next
    resume, replays them all so. A one-shot client that resumed gets one agent message."""
    fresh: dict[str, str] = {}
    renew = {"fresh-ids": "reloaded-", "truncated": "cut-", "after-truncated": "reloaded-"}

    def rid(value: Any, kind: str) -> Any:
        if mode not in renew or not isinstance(value, str):
            return value
        if kind == "user" and mode != "fresh-ids":
            return value  # a replayed user message keeps its ID (MID-V2-11)
        return fresh.setdefault(value, f"{renew[mode]}{len(fresh) + 1}")

    kind_of = {v: k for k, v in CHUNK_UPDATE.items()} | {v: k for k, v in UPSERT_UPDATE.items()}
    replay: list[JsonObject] = []
    for t in played:
        replay.append({"sessionUpdate": "user_message_chunk",
                       "messageId": rid(f"{t.name}-user", "user"),
                       "content": text_block(t.prompt)})
        for action in t.actions:
            for update in action.get("batch") or [action.get("update")]:
                if not isinstance(update, dict):
                    continue
                update = dict(update)
                if "messageId" in update:
                    kind = kind_of.get(str(update.get("sessionUpdate")), "")
                    update["messageId"] = rid(update["messageId"], kind)
                replay.append(update)
    if protocol >= 2:
        chunks = mode in ("same-ids-chunks", "as-live")
        replay = as_primed_chunks(replay) if chunks else as_upserts(replay)
    if mode == "truncated":
        replay = _first_messages(replay, TRUNCATED_AFTER)
    after = {"update": {"sessionUpdate": "agent_message_chunk", "messageId": f"after-{mode}",
                        "content": text_block(f"After the reload ({mode}). ")}}
    return TurnScript(f"reload-{mode}", f"Continue after the reload ({mode}).", False,
                      (after,), replay=tuple(replay), reload=True,
                      hangup=mode == "truncated", after_truncated=mode == "after-truncated",
                      parity=mode == "as-live")


def _first_messages(updates: list[JsonObject], count: int) -> list[JsonObject]:
    """The updates up to (not including) the first update of message ``count + 1``."""
    seen: set[tuple[Any, Any]] = set()
    out: list[JsonObject] = []
    for update in updates:
        key = (update.get("sessionUpdate"), update.get("messageId"))
        if "messageId" in update and key not in seen:
            if len(seen) == count:
                break
            seen.add(key)
        out.append(update)
    return out


def as_primed_chunks(updates: list[JsonObject]) -> list[JsonObject]:
    """The updates as streamed, each message's first one preceded by its whole-message
    update with ``content: []`` (the v2 draft's replay primer: a client that still holds
    the live content under that ID starts the message again from nothing)."""
    kind_of = {v: k for k, v in CHUNK_UPDATE.items()} | {v: k for k, v in UPSERT_UPDATE.items()}
    out: list[JsonObject] = []
    primed: set[tuple[str, Any]] = set()
    for update in updates:
        kind = kind_of.get(str(update.get("sessionUpdate")))
        mid = update.get("messageId")
        if kind is not None and isinstance(mid, str) and (kind, mid) not in primed:
            primed.add((kind, mid))
            out.append({"sessionUpdate": UPSERT_UPDATE[kind], "messageId": mid, "content": []})
        out.append(update)
    return out


def as_upserts(updates: list[JsonObject]) -> list[JsonObject]:
    """Chunks folded into one whole-message update per (kind, messageId), where the message
    first appears; a whole-message update with content replaces what came before; other
    updates (tool calls) stay where they were."""
    kind_of = {v: k for k, v in CHUNK_UPDATE.items()} | {v: k for k, v in UPSERT_UPDATE.items()}
    out: list[JsonObject] = []
    whole: dict[tuple[str, Any], JsonObject] = {}
    for update in updates:
        kind = kind_of.get(str(update.get("sessionUpdate")))
        mid = update.get("messageId")
        if kind is None or not isinstance(mid, str):
            out.append(update)
            continue
        message = whole.get((kind, mid))
        if message is None:
            message = whole[(kind, mid)] = {"sessionUpdate": UPSERT_UPDATE[kind],
                                            "messageId": mid, "content": []}
            out.append(message)
        content = update.get("content")
        if update["sessionUpdate"] == UPSERT_UPDATE[kind]:
            if isinstance(content, list):
                message["content"] = list(content)
        elif isinstance(content, dict):
            message["content"].append(content)
    return out


def new_ids() -> _Ids:
    return _Ids()
