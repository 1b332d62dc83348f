"""A generated stream as a client case: the one case a client fuzz run plays (a turn, or a
turn after the earlier turns it needs on the same client process), and what one run of it
gave. The client fuzzer (:mod:`conformance.fuzz.client_fuzz`) and its persistent mode
(:mod:`conformance.fuzz.client_persistent`) both build their cases here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conformance.checks import all_rules
from conformance.transcript import Transcript

PROMPT = "Please play the generated turn."


@dataclass
class StreamRun:
    transcript: Transcript
    findings: list[Any]
    note: str = ""


def client_rules() -> list[str]:
    return sorted(r for r, rule in all_rules().items() if rule.role == "client")


def stream_case(protocol: int, stream: Mapping[str, Any]) -> Any:
    """A client case of one turn that plays ``stream``: start, the turn, stop. A stream
    found in persistent mode that needs the earlier runs on its client process carries
    them (``"history"``: earlier turns, each ``{"prompt", "steps"}``): they are played
    first, each a turn of its own on the same client process, and ``stream`` after them
    (:mod:`conformance.fuzz.client_persistent`)."""
    from conformance.cases import Case

    def turn_of(name: str, part: Mapping[str, Any]) -> dict[str, Any]:
        turn = {"turn": name, "prompt": part.get("prompt", PROMPT),
                "updates": list(part["steps"])}
        if "echo" in part:
            turn["echo"] = bool(part["echo"])
        return turn

    history = list(stream.get("history") or ())
    turns = [turn_of(f"fuzz-{i}", part) for i, part in enumerate(history, 1)]
    turns.append(turn_of("fuzz", stream))
    drive = ("start", *({"play": t["turn"]} for t in turns))
    return Case(id="fuzz", description="a generated stream", requirements=(),
                protocols=(protocol,), role="client", profiles=None,
                drive=drive, checks=tuple(client_rules()),
                stream=tuple(turns), area="fuzz", source="fuzz")
