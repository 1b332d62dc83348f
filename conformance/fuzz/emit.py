"""Counterexamples as cases: ``fuzz --emit-case FILE.yaml`` and ``replay --emit-case``.

The fuzzer's steps are the agent cases' drive steps (one vocabulary,
``$defs/agentStep`` of the case schema), so a shrunk agent counterexample is
written as a case file as it is: its steps as the drive, the broken rule as
its requirement and check, the protocol version (and a v2 rule profile other
than the default) it broke under. A counterexample found behind the scripted
model server carries its model script: written beside the file as
``model/<case id>.yaml``, where the case runner looks for it, and named by the
case's ``model`` key. A client counterexample (a generated stream) becomes a
client case of one turn that the agent double plays as it was generated. The
file passes ``lint-cases`` among the bundled cases and, run with ``--cases
DIR``, fails the same rule on the same target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.agent.steps import validate


@dataclass(frozen=True)
class Counterexample:
    """What a case is written from: a shrunk failure or a regression file."""

    requirement: str
    protocol: int
    steps: list[Any]
    fingerprint: str
    message: str
    profile: str | None = None
    model: dict[str, Any] | None = None
    source: str = ""  # how it was found, for the description
    role: str = "agent"
    stream: dict[str, Any] | None = None  # client: the generated stream (client_fuzz)


def of_failure(f: Any, fingerprint: str, profile: str, source: str) -> Counterexample:
    """A :class:`conformance.fuzz.grading.Failure` of either fuzzer."""
    return Counterexample(f.requirement, f.protocol, list(f.steps), fingerprint,
                          f.finding.message, profile, f.model, source, f.role, f.stream)


def of_regression(reg: Any) -> Counterexample:
    """A regression file (:class:`conformance.fuzz.regressions.Regression`)."""
    return Counterexample(reg.requirement, reg.protocol, list(reg.steps or []),
                          reg.fingerprint, str(reg.header.get("finding", {}).get("message", "")),
                          reg.header.get("profile"), reg.model, f"regression {reg.path.name}",
                          reg.role, reg.stream)


def case_id(c: Counterexample) -> str:
    return f"fuzz-{c.fingerprint}"


def case_of(c: Counterexample) -> dict[str, Any]:
    """The case (a dict of the case schema) that plays ``c``."""
    from conformance import profiles

    if c.role == "agent":
        validate(c.steps)  # StepError: not the step vocabulary
    message = " ".join(c.message.split())[:160] or "a rule broke"
    applies: dict[str, Any] = {"protocols": [c.protocol], "role": c.role}
    if c.protocol >= 2 and c.profile and c.profile != profiles.DEFAULT_PROFILE:
        applies["profiles"] = [c.profile]
    case: dict[str, Any] = {
        "id": case_id(c),
        "description": f"Fuzz counterexample ({c.source or 'acp-conformance fuzz'}): "
                       f"{c.requirement} broke over v{c.protocol}: {message}",
        "requirements": [c.requirement],
        "applies": applies,
        "drive": list(c.steps),
        "checks": [c.requirement],
    }
    if c.role == "client":  # one turn: the double plays the generated stream
        stream = c.stream or {}
        # found in persistent mode needing earlier turns: those first, on the same client
        parts = [(f"fuzz-{i}", h) for i, h in enumerate(stream.get("history") or (), 1)]
        turns: list[dict[str, Any]] = []
        for name, part in [*parts, ("fuzz", stream)]:
            turn: dict[str, Any] = {"turn": name, "updates": list(part.get("steps", []))}
            if part.get("prompt"):
                turn["prompt"] = part["prompt"]
            if "echo" in part:
                turn["echo"] = bool(part["echo"])
            turns.append(turn)
        case["drive"] = ["start", *({"play": t["turn"]} for t in turns)]
        case["stream"] = turns
    if c.model is not None:
        case["model"] = case_id(c)
    return case


def write(path: Path, found: Sequence[Counterexample]) -> list[Path]:
    """Write one case file with a case per counterexample (and their model scripts);
    the paths written. ValueError (one line) when there is nothing to write or the file
    cannot be written."""
    import yaml

    if not found:
        raise ValueError(f"--emit-case {path}: no counterexample to write")
    path = Path(path)
    if path.suffix not in (".yaml", ".yml"):
        raise ValueError(f"--emit-case {path}: the case file must end in .yaml")
    unique: dict[str, Counterexample] = {}
    for c in found:
        unique.setdefault(case_id(c), c)
    rules = sorted({c.requirement for c in unique.values()})
    doc = {"area": f"Fuzz counterexamples ({', '.join(rules)})",
           "cases": [case_of(c) for c in unique.values()]}
    written = []
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for c in unique.values():
            if c.model is not None:
                script = path.parent / "model" / f"{case_id(c)}.yaml"
                script.parent.mkdir(exist_ok=True)
                script.write_text("# The model script of a fuzz counterexample: what the model "
                                  "said when the rule broke.\n"
                                  + yaml.safe_dump(c.model, sort_keys=False, allow_unicode=True),
                                  encoding="utf-8")
                written.append(script)
        path.write_text("# Written by acp-conformance from shrunk fuzz counterexamples; the "
                        "steps are the case\n# schema's step vocabulary "
                        "($defs/agentStep). Run with --cases on this folder.\n"
                        + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100),
                        encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--emit-case {path}: cannot write: {exc.strerror}") from None
    _check(path)
    written.insert(0, path)
    return written


def _check(path: Path) -> None:
    """The file written is a valid case file (the case schema, the client-case rules); a
    counterexample it cannot express is an error naming the file and line."""
    from conformance.cases import CaseError, load_file
    from conformance.client.script import check_case

    try:
        for case in load_file(path):
            check_case(case)
    except CaseError as exc:
        raise ValueError(f"--emit-case: the case written does not validate: {exc}") from None


__all__ = ["Counterexample", "case_id", "case_of", "of_failure", "of_regression", "write"]
