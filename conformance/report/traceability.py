"""The traceability matrix: every catalogue requirement, with the rules and checkers that
grade it, the cases that cite or check it and the broken fixtures that prove it can fail.

Derived data, like :mod:`conformance.report.catalogue` (whose register view it reads):
the HTML and Markdown reports, ``list --traceability`` and ``lint-cases`` render it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from conformance.report.catalogue import (
    SHOULD_LEVELS,
    SUITE_LEVEL,
    RequirementMeta,
    requirements,
    source_commit,
)
from conformance.report.coverage import MUST_LEVELS
from conformance.requirements import safe_load

_REQ_ID = re.compile(r"^(MID-(S|A|C|V2|P)-[0-9]{2}|TARGET)(/[a-z0-9-]+)?$")


@dataclass
class TraceRow:
    meta: RequirementMeta
    rules: list[str]  # sub-rule IDs that grade it
    checkers: list[str]  # checker classes, "module.Class"
    cases: dict[str, list[str]]  # role -> case IDs that cite or check it
    fixtures: list[str] | None  # broken fixtures expected to trip it; None: manifests absent
    sides: dict[str, str]  # party -> "tested" | "excluded: why" | "not covered" | ...


def repository_root() -> Path | None:
    """The source tree the package runs from, if any (fixtures are not installed)."""
    import conformance

    root = Path(conformance.__file__).resolve().parent.parent
    return root if (root / "fixtures").is_dir() else None


def fixture_expectations(root: Path | None = None) -> dict[str, set[str]] | None:
    """Fixture label ("agents/per_turn_counter") -> the rule IDs its manifest expects."""
    root = root if root is not None else repository_root()
    if root is None:
        return None
    out: dict[str, set[str]] = {}
    for manifest in sorted((root / "fixtures").glob("*/manifest.yaml")):
        try:
            data = safe_load(manifest.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        # agents/manifest.yaml lists `fixtures` by name, clients/manifest.yaml `clients` by file
        for key in ("fixtures", "clients"):
            for fx in data.get(key) or [] if isinstance(data, dict) else []:
                name = fx.get("name") or str(fx.get("file", "")).removesuffix(".py") \
                    if isinstance(fx, dict) else None
                if name:
                    out[f"{manifest.parent.name}/{name}"] = set(_ids_in(fx.get("expect")))
    return out


def _ids_in(node: Any) -> Iterable[str]:
    if isinstance(node, str):
        if _REQ_ID.match(node):
            yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _ids_in(v)
    elif isinstance(node, list):
        for v in node:
            yield from _ids_in(v)


def traceability(cases: Sequence[Any], *, fixtures: dict[str, set[str]] | None = None,
                 use_manifests: bool = True) -> list[TraceRow]:
    """Every catalogue requirement -> its rules, checkers, cases and broken fixtures."""
    from conformance.checks import ALWAYS
    from conformance.checks.base import REGISTRY, all_rules

    rules = all_rules()
    if fixtures is None and use_manifests:
        fixtures = fixture_expectations()
    rows = []
    for rid, m in requirements().items():
        own = sorted(r for r in rules if r.split("/", 1)[0] == rid)
        checkers = sorted({f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
                           for cls in REGISTRY for r in cls.rules if r.requirement == rid})
        graded_always = {role for role, always in ALWAYS.items()
                         if any(r.split("/", 1)[0] == rid for r in always)}
        by_role: dict[str, list[str]] = {}
        versions: dict[str, set[int]] = {}  # role -> the protocol versions its cases cover
        for c in cases:
            if c.role in graded_always:
                by_role[c.role] = ["every case"]
            elif any(r.split("/", 1)[0] == rid for r in (*c.requirements, *c.checks)):
                by_role.setdefault(c.role, []).append(c.id)
            else:
                continue
            versions.setdefault(c.role, set()).update(c.protocols)
        fx = None if fixtures is None else sorted(
            name for name, ids in fixtures.items() if any(i.split("/", 1)[0] == rid for i in ids))
        sides = {}
        for party in m.parties or ("agent",):
            if party in m.excluded:
                sides[party] = f"excluded: {m.excluded[party]}"
            elif by_role.get(party):
                missing = [v for v in m.versions if v not in versions.get(party, set())]
                sides[party] = "tested" if not missing else (
                    "tested in " + "/".join(f"v{v}" for v in m.versions if v not in missing)
                    + "; not covered in " + "/".join(f"v{v}" for v in missing))
            elif party not in ("agent", "client"):
                sides[party] = "excluded: the suite tests agents and clients only"
            elif m.level in MUST_LEVELS + SHOULD_LEVELS or m.level == SUITE_LEVEL:
                sides[party] = "not covered"
            else:
                sides[party] = f"not covered ({m.level}, not required)"
        for party, reason in m.excluded.items():
            sides.setdefault(party, f"excluded: {reason}")
        rows.append(TraceRow(m, own, checkers, by_role, fx, sides))
    return rows


def format_traceability(rows: Sequence[TraceRow]) -> str:
    """Plain text for ``acp-conformance list --traceability``."""
    lines = [] if any(r.fixtures is not None for r in rows) else [
        "(the broken fixtures that prove each rule can fail are in the suite's source "
        "repository, fixtures/, not in this install)", ""]
    for r in rows:
        versions = "/".join(f"v{v}" for v in r.meta.versions)
        lines.append(f"{r.meta.id}  [{r.meta.level}, {versions}]  {r.meta.title}")
        if r.meta.tck:
            lines.append(f"  official TCK: {', '.join(r.meta.tck)}")
        for party, status in r.sides.items():
            lines.append(f"  {party + ':':<8} {status}")
        for role, ids in sorted(r.cases.items()):
            lines.append(f"  cases ({role}): {', '.join(ids)}")
        if r.rules:
            lines.append(f"  rules: {', '.join(r.rules)}")
        if r.checkers:
            lines.append(f"  checkers: {', '.join(r.checkers)}")
        if r.fixtures is None:
            pass  # an installed suite: said once, below
        elif r.fixtures:
            lines.append(f"  fixtures: {', '.join(r.fixtures)}")
        elif r.rules:
            lines.append("  fixtures: none")
        if r.meta.sources:
            lines.append(f"  sources: {', '.join(s.path for s in r.meta.sources)}")
    commit = source_commit()
    lines.append("")
    lines.append(f"sources are files of the upstream ACP repository at commit {commit[:12]}")
    return "\n".join(lines)
