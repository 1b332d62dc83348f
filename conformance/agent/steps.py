"""The steps of agent fuzzing: what the state machine records and ``replay`` re-drives.

A step is plain JSON, and the same vocabulary as the agent cases' drive steps
(``cases/*.yaml``): both are validated by ``$defs/agentStep`` of the case schema
(``conformance/data/case.schema.json``), so a counterexample can become a case::

    "start" | "restart" | "new_session" | "load" | "close_session"
    "address_unknown_ids"   # MID-V2-16: the advertised ID-addressed methods, with IDs the
                            # agent never sent for the current session (none advertised: no-op)
    {"switch": {"session": 0}}            # make the n-th created session current
    {"resume": {"replay": "start" | "none" | "null"}}   # "null": replayFrom: null
    {"resume": {"replay": "start", "while_streaming": true}}   # once an in-flight turn streams
    {"prompt": {"text": "...", "blocks": [...], "legacy_message_id": "...",
                "meta_message_id": "...", "cancel_after": 3}}   # or "cancel": true
    {"prompt": {"text": "", "retry": true}}   # the previous prompt again, same idempotencyKey
    {"prompt": {"text": "...", "invalid_key": "empty" | "too-long"}}   # a key outside 1..255

``cancel_after`` sends ``session/cancel`` once that many ``session/update``
notifications of the turn have arrived (0: right after the request); ``cancel``
sends it once the agent's output arrives. Steps act on the current session. A
regression file keeps its steps in the header, so ``replay`` can play them
against any agent.

This module is the steps as data (checked, simplified for the shrinker, shaped
for fingerprints, described for reports); :mod:`conformance.fuzz.player` plays
them against a live agent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Step = Any  # a str or a one-key dict, as documented above
STEP_NAMES = ("start", "restart", "new_session", "switch", "load", "resume", "close_session",
              "prompt", "address_unknown_ids")


class StepError(Exception):
    """A recorded step that cannot be played (malformed, or names a missing session)."""


PLAIN_TEXT = "Reply with two separate messages."  # what every prompt shrinks towards
LONG_TEXT = "Write a long story, one sentence at a time."  # ... every cancelled prompt


def simplifications(step: Step) -> list[Step]:
    """Simpler variants of one step, the biggest simplification first (for the shrinker)."""
    name, args = split(step)
    if name != "prompt":
        return []
    out: list[dict[str, Any]] = []
    if "blocks" in args:
        out.append({k: v for k, v in args.items() if k != "blocks"})
    for key in ("legacy_message_id", "meta_message_id"):
        if key in args:
            out.append({k: v for k, v in args.items() if k != key})
    cancel = args.get("cancel_after")
    if isinstance(cancel, int):
        plain = {k: v for k, v in args.items() if k != "cancel_after"}
        if plain.get("text") == LONG_TEXT:
            plain["text"] = PLAIN_TEXT
        out.append(plain)
        if cancel > 0:
            out.append({**args, "cancel_after": 0})
        if cancel > 1:
            out.append({**args, "cancel_after": cancel // 2})
    text = LONG_TEXT if isinstance(cancel, int) else PLAIN_TEXT
    if args.get("text") != text:
        simpler = {**args, "text": text}
        if "blocks" in simpler:
            simpler["blocks"] = [{"type": "text", "text": text}, *simpler["blocks"][1:]]
        out.append(simpler)
    return [{"prompt": a} for a in out]


def split(step: Step) -> tuple[str, dict[str, Any]]:
    """A step's name and arguments; StepError if it is not a step."""
    if isinstance(step, str) and step in STEP_NAMES:
        return step, {}
    if isinstance(step, dict) and len(step) == 1:
        (name, args), = step.items()
        if name in STEP_NAMES and isinstance(args, dict):
            return str(name), args
    raise StepError(f"not a fuzz step: {json.dumps(step)[:80]}")


def validate(steps: Any) -> list[Step]:
    """Check recorded steps against the case schema's step vocabulary (StepError)."""
    from conformance.cases import step_validator

    if not isinstance(steps, list) or not steps:
        raise StepError("the steps must be a non-empty list")
    validator = step_validator()
    for s in steps:
        split(s)
        if not validator.is_valid(s):
            raise StepError(f"not a fuzz step: {json.dumps(s)[:80]}")
    if steps[0] != "start":
        raise StepError("the first step must be 'start'")
    return steps


def block_kinds(spec: Mapping[str, Any]) -> list[str]:
    blocks = spec.get("blocks") or [{"type": "text"}]
    return [str(b.get("type")) if isinstance(b, dict) else "?" for b in blocks]


def shape(step: Step) -> str:
    """A step without its literal values: what a fingerprint is made of."""
    name, args = split(step)
    if name == "resume":
        return f"resume:{args.get('replay', 'none')}" + (
            "+streaming" if args.get("while_streaming") else "")
    if name == "switch":
        return f"switch:{args.get('session')}"
    if name != "prompt":
        return name
    if args.get("retry"):
        return "prompt-retry"
    out = f"prompt[{','.join(block_kinds(args))}]"
    if "legacy_message_id" in args:
        out += "+legacy-id"
    if "meta_message_id" in args:
        out += "+meta-id"
    if "cancel_after" in args or args.get("cancel"):
        out += "+cancel"
    if args.get("invalid_key"):
        out += f"+key-{args['invalid_key']}"
    return out


def describe(step: Step, limit: int = 50) -> str:
    """One readable line for a report."""
    name, args = split(step)
    if name == "start":
        return "start the agent, initialize"
    if name == "restart":
        return "stop the agent; start a fresh process, initialize"
    if name == "new_session":
        return "session/new"
    if name == "switch":
        return f"switch to session #{args.get('session')}"
    if name == "load":
        return "session/load (the current session)"
    if name == "resume":
        replay = args.get("replay", "none")
        return "session/resume" + (" replayFrom start" if replay == "start" else
                                   " replayFrom null" if replay == "null" else " (no replay)") + (
            ", while a prompt streams" if args.get("while_streaming") else "")
    if name == "close_session":
        return "session/close"
    if args.get("retry"):
        return "session/prompt again, the same idempotencyKey (its response lost)"
    text = str(args.get("text", ""))
    shown = json.dumps(text if len(text) <= limit else text[:limit] + "...", ensure_ascii=True)
    out = f"session/prompt {shown}"
    kinds = block_kinds(args)
    if len(kinds) > 1:
        out += f" + {', '.join(kinds[1:])}"
    if "legacy_message_id" in args:
        out += f", legacy params.messageId {json.dumps(args['legacy_message_id'])[:40]}"
    if "meta_message_id" in args:
        out += f", _meta.messageId {json.dumps(args['meta_message_id'])[:40]}"
    if "cancel_after" in args:
        n = args["cancel_after"]
        out += (", cancel at once" if n == 0 else f", cancel after {n} update(s)")
    elif args.get("cancel"):
        out += ", cancel once the agent answers"
    if args.get("invalid_key") == "empty":
        out += ", an empty idempotencyKey"
    elif args.get("invalid_key"):
        out += ", a 256-character idempotencyKey"
    return out


__all__ = ["LONG_TEXT", "PLAIN_TEXT", "STEP_NAMES", "Step", "StepError", "block_kinds", "describe",
           "shape", "simplifications", "split", "validate"]
