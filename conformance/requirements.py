"""The requirement register (conformance/data/requirements.yaml) and the case lint.

The lint proves the suite covers the catalogue: every MUST/SHOULD requirement
that concerns a side is cited by a case of that side whose checks exist, or is
excluded with a reason; every case cites only known requirements and checks
only registered rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from conformance.profiles import PROFILES
from conformance.results import Outcome

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
    text: str = ""  # the normative sentence(s) graded, as the catalogue states them
    source: str = ""  # where they come from: spec page, schema definition
    snapshot: str = ""  # which revision of those sources
    rules: tuple[str, ...] = ()  # its sub-rules, each graded in ``load_grades()``
    tck: tuple[str, ...] = ()  # the official TCK's IDs for the same rule (acp-tck)

    @property
    def normative(self) -> bool:
        return self.level in NORMATIVE


@cache
def _register_text() -> str:
    """The register file, read once a process: its revision and its entries are one text."""
    return (resources.files("conformance") / "data" / "requirements.yaml").read_text("utf-8")


def catalogue_revision() -> str:
    """The register's revision, as reports name it: ``sha256:`` and the first 12 hex
    digits of the register file. Two runs graded against the same register agree."""
    import hashlib

    return "sha256:" + hashlib.sha256(_register_text().encode("utf-8")).hexdigest()[:12]


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` through libyaml's loader when PyYAML has it (the same data, about
    8x faster: every process that grades or reports reads the suite's YAML, each fuzz
    worker included); through the pure-Python one else."""
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)


@cache
def _entries() -> tuple[dict[str, Any], ...]:
    return tuple(safe_load(_register_text()))


def load_register(*, suite: bool = False) -> dict[str, Requirement]:
    """The catalogue's requirements by ID; with ``suite``, the suite's own rule families
    (``TARGET``, ``SCHEMA``: level ``suite``) too. A dict of the caller's own (the
    requirements are made once a process: a run asks for them several times)."""
    return dict(_requirements(suite))


@cache
def _requirements(suite: bool) -> tuple[tuple[str, Requirement], ...]:
    return tuple((d["id"], Requirement(
        d["id"], d["title"], d["level"], tuple(d["versions"]), tuple(d["parties"]),
        dict(d.get("excluded", {})), d.get("text", ""), d.get("source", ""),
        d.get("snapshot", ""), tuple(d.get("rules") or ()), tuple(d.get("tck", ()))))
        for d in _entries() if suite or d["level"] != "suite")


@dataclass(frozen=True)
class Grades:
    """The grade of a violation of one sub-rule: per profile and protocol version, and
    what an option changes it to (``cross-turn-reuse=warn``, ``strict-ids``). The register
    holds them; checkers only look them up, so ``list`` states what a report shows."""

    rule: str
    requirement: str
    by_profile: dict[str, dict[int, Outcome]]
    options: dict[str, Outcome] = field(default_factory=dict)

    def of(self, profile: str, protocol: int,
           modifiers: frozenset[str] = frozenset()) -> Outcome:
        for option, grade in self.options.items():
            if option in modifiers:
                return grade
        versions = self.by_profile[profile]
        return versions.get(protocol) or versions[max(versions)]

    def as_data(self) -> dict[str, Any]:
        """``{profile: {"1": grade, "2": grade}}``, as ``list --json`` prints it."""
        return {p: {str(v): g.value for v, g in sorted(vs.items())}
                for p, vs in self.by_profile.items()}


@dataclass(frozen=True)
class RuleRecord:
    """Everything the suite states about one sub-rule, from its register entry: checkers
    hold only the inference that finds a breach, and look the rest up here."""

    id: str
    requirement: str
    title: str  # what a pass row says
    role: str  # the side it grades: agent | client | proxy
    versions: tuple[int, ...]  # the protocol versions it applies to
    untested: str  # the "not testable: ..." text when no traffic reached it
    # the v2 profiles that grade it (empty: every profile); under another it is
    # not_applicable (allowed_by_profile) with ``profile_note`` as its reason
    profiles: tuple[str, ...] = ()
    profile_note: str = ""

    def applies_under(self, profile: str) -> bool:
        return not self.profiles or profile in self.profiles


DEFAULT_UNTESTED = "the transcript never showed the situation this rule is about"


@cache
def load_rule_records() -> dict[str, RuleRecord]:
    """Every sub-rule's record (title, role, versions, untested text, profiles)."""
    out: dict[str, RuleRecord] = {}
    for d in _entries():
        for rule, spec in (d.get("rules") or {}).items():
            spec = spec if isinstance(spec, dict) and "grade" in spec else {}
            profiles = tuple(spec.get("profiles") or ())
            unknown = [p for p in profiles if p not in PROFILES]
            if unknown:
                raise ValueError(f"register: {rule}: unknown profiles {unknown}")
            out[rule] = RuleRecord(
                rule, d["id"], spec.get("title", d["title"]), spec.get("role", d["parties"][0]),
                tuple(spec.get("versions") or d["versions"]),
                spec.get("untested", DEFAULT_UNTESTED), profiles, spec.get("profile_note", ""))
    return out


GRADE_WORDS = {o.value: o for o in (Outcome.FAIL, Outcome.WARN, Outcome.INFO)}


def _grade_word(word: Any, where: str) -> Outcome:
    if word not in GRADE_WORDS:
        raise ValueError(f"register: {where}: grade {word!r} is not one of fail, warn, info")
    return GRADE_WORDS[word]


def _expand(spec: Any, versions: tuple[int, ...], where: str) -> dict[str, dict[int, Outcome]]:
    """A register grade (``fail``; ``{"1": warn, "2": fail}``; ``{profile: ...}``) for
    every profile and version."""
    def per_version(s: Any) -> dict[int, Outcome]:
        if isinstance(s, dict):
            got = {int(v): _grade_word(g, where) for v, g in s.items()}
            if set(got) != set(versions):
                raise ValueError(f"register: {where}: grades for v{sorted(got)}, "
                                 f"the requirement has v{list(versions)}")
            return got
        return {v: _grade_word(s, where) for v in versions}

    if isinstance(spec, dict) and spec and all(str(k) in PROFILES for k in spec):
        if set(spec) != set(PROFILES):
            raise ValueError(f"register: {where}: grades name {sorted(spec)}, "
                             f"the profiles are {sorted(PROFILES)}")
        return {p: per_version(spec[p]) for p in PROFILES}
    return {p: per_version(spec) for p in PROFILES}


@cache
def load_grades() -> dict[str, Grades]:
    """Every sub-rule's grades, from the register."""
    out: dict[str, Grades] = {}
    for d in _entries():
        versions = tuple(d["versions"])
        for rule, spec in (d.get("rules") or {}).items():
            options: dict[str, Outcome] = {}
            if isinstance(spec, dict) and ("grade" in spec or "grades" in spec):
                options = {k: _grade_word(g, rule) for k, g in (spec.get("options") or {}).items()}
                spec = spec.get("grade", spec.get("grades"))
            out[rule] = Grades(rule, d["id"], _expand(spec, versions, rule), options)
    return out


def case_problems(cases: Iterable[Any], rules: Iterable[str]) -> list[str]:
    """What the cases themselves get wrong: a requirement the register does not know, a
    rule no checker implements in ``checks`` or ``exclude`` (a typo such as MID-A-99
    would otherwise grade nothing and pass). Each names the case's file and line."""
    register = load_register()
    # a name a rule implements: the rule's ID or one of its families (MID-A-02/x/y: MID-A-02,
    # MID-A-02/x and MID-A-02/x/y)
    implemented = {"/".join(parts[:n]) for parts in (r.split("/") for r in rules)
                   for n in range(1, len(parts) + 1)}
    problems: list[str] = []
    for case in cases:
        for req in case.requirements:
            base = req.split("/", 1)[0]
            if base not in register and base not in SUITE_FAMILIES:
                problems.append(f"{_at(case, req)}: case {case.id} cites unknown requirement {req}")
        for check in case.checks:
            if check not in implemented:
                problems.append(f"{_at(case, check)}: case {case.id} checks {check}, "
                                "which no registered rule implements")
        for rule, _ in getattr(case, "exclude", ()):
            if rule not in implemented:
                problems.append(f"{_at(case, rule)}: case {case.id} excludes {rule}, "
                                "which no registered rule implements")
    return problems


def _at(case: Any, rule: str) -> str:
    """Where ``case`` names ``rule``: its file and line."""
    line_of = getattr(case, "line_of", None)
    return str(line_of(rule) if line_of is not None else case.source)


def lint(cases: Iterable[Any], rules: dict[str, Any]) -> list[str]:
    """Problems with the cases against the register and the checkers (empty = clean)."""
    register = load_register()
    cases = list(cases)
    problems = case_problems(cases, rules)
    covered: dict[str, set[str]] = {}  # side (a case's role) -> the requirements its cases cover
    for case in cases:
        for req in case.requirements:
            covered.setdefault(case.role, set()).add(req.split("/", 1)[0])
    for req in register.values():
        for side in sorted(req.parties):
            if not req.normative:
                continue
            if req.id in covered.get(side, set()):
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
