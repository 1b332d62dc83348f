"""Shapes and fingerprints: what a counterexample is, without its literal texts or IDs.

A fingerprint hashes a rule and a shape (step kinds, block kinds, update kinds,
ID forms and which IDs are equal), so the same bug found twice gets the same
name (:mod:`conformance.fuzz.regressions` names its files by it). An agent
counterexample's steps are shaped in :mod:`conformance.agent.steps`, its model
script in :mod:`conformance.fuzz.model_side`; a client stream's shape is here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from conformance import model
from conformance.results import Finding
from conformance.transcript import Entry


def fingerprint(requirement: str, shape: Any) -> str:
    """``<rule slug>-<10 hex>``: readable, and equal for equal (rule, shape)."""
    digest = hashlib.sha256(json.dumps([requirement, shape], sort_keys=True,
                                       ensure_ascii=True).encode()).hexdigest()[:10]
    slug = re.sub(r"[^a-z0-9]+", "-", requirement.lower()).strip("-")
    return f"{slug}-{digest}"


class IdLetters:
    """Names IDs by first appearance (A, B, C...): the equality pattern, not the values."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def __call__(self, value: Any) -> str:
        state = model.json_type(value) if not isinstance(value, str) else "string"
        if state != "string":
            return state
        name = self.names.get(value)
        if name is None:
            n = len(self.names)
            name = self.names[value] = (chr(65 + n % 26) + (str(n // 26) if n >= 26 else ""))
        return name


def entry_shape(entry: Entry, letters: IdLetters) -> Any:
    """What a transcript line is, without its literal texts."""
    if entry.stream == "harness":
        return f"harness:{entry.event}"
    if entry.error is not None or entry.msg is None:
        return f"{entry.src}:unparsable"
    msgs = entry.msg if isinstance(entry.msg, list) else [entry.msg]
    shapes = [_msg_shape(m, letters) for m in msgs]
    return [f"{entry.src}:batch", shapes] if isinstance(entry.msg, list) else shapes[0]


def _msg_shape(msg: Any, letters: IdLetters) -> Any:
    if not isinstance(msg, dict):
        return model.json_type(msg)
    method = msg.get("method")
    if method is None:
        result = msg.get("result")
        keys = sorted(result) if isinstance(result, dict) else model.json_type(result)
        return ["response", "error" if "error" in msg else keys]
    raw = msg.get("params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    update = params.get("update")
    if method == "session/update" and isinstance(update, dict):
        kind = str(update.get("sessionUpdate"))
        if "messageId" not in update:
            return [kind, "absent"]
        return [kind, letters(update["messageId"])]
    return [str(method)]


def failure_shape(role: str, protocol: int, counterexample: Any, finding: Finding,
                  entries: Sequence[Entry]) -> Any:
    """The shape a fingerprint hashes: the counterexample's own shape (steps or stream,
    computed by its side) and the shape of the lines the finding points at."""
    by_seq = {e.seq: e for e in entries}
    letters = IdLetters()
    evidence = [entry_shape(by_seq[s], letters) for s in finding.entries if s in by_seq]
    return {"role": role, "protocol": protocol, "counterexample": counterexample,
            "evidence": evidence}


def _step_word(step: Mapping[str, Any], letters: IdLetters) -> str:
    for kind in ("agent", "thought", "user"):
        if kind in step:
            return f"{kind}[{_id_word(step, letters)}]"
    if "upsert" in step:
        content = step.get("content", "<absent>")
        ctype = "list" if isinstance(content, list) else (
            "absent" if content == "<absent>" else type(content).__name__)
        return f"upsert-{step['upsert']}[{_id_word(step, letters)}; content {ctype}]"
    return next(iter(step), "?")


def _id_word(step: Mapping[str, Any], letters: IdLetters) -> str:
    if "id_repeat" in step:
        rep = step["id_repeat"]
        return letters(str(rep.get("text", "")) * int(rep.get("times", 0)))
    if "id" not in step:
        return "absent"
    return letters(step["id"])


def stream_shape(stream: Mapping[str, Any]) -> list[str]:
    """A stream without its literal texts and IDs: kinds, ID forms, the equality pattern."""
    letters = IdLetters()
    return [_step_word(s, letters) for s in stream.get("steps", []) if isinstance(s, dict)]
