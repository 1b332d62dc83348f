"""The requirement register (conformance/data/requirements.yaml) and the case lint.

The lint proves the suite covers the catalogue: every MUST/SHOULD requirement
that concerns a side is cited by a case of that side whose checks exist, or is
excluded with a reason; every case cites only known requirements and checks
only registered rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

NORMATIVE = ("MUST", "MUST NOT", "SHOULD", "SHOULD NOT")
# The suite's own rule families: target faults and official-schema validation.
SUITE_FAMILIES = ("TARGET", "SCHEMA")


@dataclass(frozen=True)
class Requirement:
    id: str
    title: str
    level: str
    versions: tuple[int, ...]
    parties: tuple[str, ...]
    excluded: dict[str, str] = field(default_factory=dict)

    @property
    def normative(self) -> bool:
        return self.level in NORMATIVE


def load_register() -> dict[str, Requirement]:
    text = (resources.files("conformance") / "data" / "requirements.yaml").read_text("utf-8")
    out = {}
    for d in yaml.safe_load(text):
        out[d["id"]] = Requirement(d["id"], d["title"], d["level"], tuple(d["versions"]),
                                   tuple(d["parties"]), dict(d.get("excluded", {})))
    return out


def lint(cases: Iterable[Any], rules: dict[str, Any]) -> list[str]:
    """Problems with the cases against the register and the checkers (empty = clean)."""
    register = load_register()
    problems: list[str] = []
    covered: dict[str, set[str]] = {"agent": set(), "client": set()}
    for case in cases:
        for req in case.requirements:
            base = req.split("/", 1)[0]
            if base not in register and base not in SUITE_FAMILIES:
                problems.append(f"{case.source}: case {case.id} cites unknown requirement {req}")
            covered[case.role].add(base)
        for check in case.checks:
            if not any(r == check or r.startswith(check + "/") for r in rules):
                problems.append(f"{case.source}: case {case.id} checks {check}, "
                                "which no registered rule implements")
    for req in register.values():
        for side in ("agent", "client"):
            if side not in req.parties or not req.normative:
                continue
            if req.id in covered[side]:
                continue
            if side in req.excluded:
                continue
            problems.append(f"{req.id} ({req.level}, {side} side) is neither covered by a "
                            f"{side} case nor excluded with a reason")
    for rid in rules:
        base = rid.split("/", 1)[0]
        if base not in register and base not in SUITE_FAMILIES:
            problems.append(f"rule {rid} names a requirement missing from the register")
    return problems
