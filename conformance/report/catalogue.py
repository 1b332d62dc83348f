"""The catalogue's view of a run: requirement verdicts and the certification
statement (the traceability matrix, which reads the same register, is
:mod:`conformance.report.traceability`).

Everything here is derived data: the requirement register
(``conformance/data/requirements.yaml``), the upstream sources of each
requirement (``conformance/data/requirement-sources.yaml``), the registered
rules, the cases, the broken-fixture manifests and a RunResult. The HTML,
Markdown and console reports and ``list --traceability`` render it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from conformance.report.coverage import MUST_LEVELS, exercised_musts, partial, say
from conformance.report.heading import grouped_notes, shown_command
from conformance.requirements import safe_load
from conformance.results import SEVERITY, Finding, Outcome, Reason, RunResult, worst

SHOULD_LEVELS = ("SHOULD", "SHOULD NOT")
# Requirements the suite adds to the catalogue: they grade the target as a process.
SUITE = {"TARGET": "the target stays up and answers every wait within the timeout"}
SUITE_LEVEL = "MUST (suite)"


@dataclass(frozen=True)
class Source:
    path: str  # file in the upstream repository, or a page outside it (its address)
    url: str


def _source(repo: str, commit: str, path: str) -> Source:
    """A file of the upstream repository at the catalogue's commit, or (an address) a text
    that is not in it at that commit: an RFD page, a crate's docs, a pull request."""
    if path.startswith("https://"):
        return Source(path, path)
    return Source(path, f"{repo}/blob/{commit}/{path}")


@dataclass(frozen=True)
class RequirementMeta:
    id: str
    title: str
    level: str  # MUST, MUST NOT, SHOULD, SHOULD NOT, MAY, informative, MUST (suite)
    versions: tuple[int, ...] = (1, 2)
    parties: tuple[str, ...] = ()
    excluded: dict[str, str] = field(default_factory=dict)
    sources: tuple[Source, ...] = ()
    tck: tuple[str, ...] = ()  # the official TCK's requirement IDs for the same rule

    @property
    def is_must(self) -> bool:
        return self.level in MUST_LEVELS or self.level == SUITE_LEVEL

    @property
    def is_should(self) -> bool:
        return self.level in SHOULD_LEVELS


@lru_cache(maxsize=1)
def _sources() -> tuple[str, str, dict[str, tuple[str, ...]]]:
    text = (resources.files("conformance") / "data" / "requirement-sources.yaml").read_text("utf-8")
    data = safe_load(text)
    return (str(data["repository"]), str(data["commit"]),
            {k: tuple(v or ()) for k, v in data["sources"].items()})


def source_commit() -> str:
    return _sources()[1]


@lru_cache(maxsize=1)
def _metas() -> tuple[RequirementMeta, ...]:
    from conformance.requirements import load_register

    repo, commit, paths = _sources()
    out = [RequirementMeta(r.id, r.title, r.level, r.versions, r.parties, dict(r.excluded),
                           tuple(_source(repo, commit, p)
                                 for p in paths.get(r.id, ())), r.tck)
           for r in load_register().values()]
    out.extend(RequirementMeta(rid, title, SUITE_LEVEL, (1, 2), ("agent", "client"))
               for rid, title in SUITE.items())
    return tuple(out)


def requirements() -> dict[str, RequirementMeta]:
    """Every requirement, in catalogue order, then the suite's own."""
    return {m.id: m for m in _metas()}


# A client row whose cause a control stream ruled out (conformance.checks.controls):
# neither pass nor fail, and not "not testable" either: the fault is reported elsewhere.
NOT_ATTRIBUTABLE = "not attributable"


def unattributable(f: Finding) -> bool:
    return f.outcome is Outcome.NOT_APPLICABLE and f.reason is Reason.NOT_ATTRIBUTABLE


#: What each reason code of a not_applicable result means, as every report explains it.
REASON_TEXT: dict[Reason, str] = {
    Reason.NOT_TESTABLE: "the traffic cannot support the inference (e.g. the target never spoke)",
    Reason.NOT_RUN: "the case did not run (a repeated fault, a refused request, --deadline)",
    Reason.NOT_ATTRIBUTABLE: "a control stream was shown the same way: no cause is named",
    Reason.VERSION_UNSUPPORTED: "the target does not speak this protocol version",
    Reason.ALLOWED_BY_PROFILE: "the selected profile allows it",
    Reason.NO_CAPABILITY: "the target does not advertise what the rule needs",
    Reason.EXCLUDED_BY_CASE: "the case file excludes the rule, with its reason",
    Reason.CUT: "the case was cut (--deadline, a signal) before the rule could be graded",
}


def reason_tally(result: RunResult) -> list[tuple[Reason, int, str]]:
    """(reason, not_applicable rows with it, the first such row's message), in vocabulary
    order: what every report shows of why results were not graded."""
    counts: dict[Reason, list[Any]] = {}
    for f in result.all_findings():
        if f.outcome is Outcome.NOT_APPLICABLE and f.reason is not None:
            entry = counts.setdefault(f.reason, [0, f.message])
            entry[0] += 1
    return [(r, int(counts[r][0]), str(counts[r][1])) for r in Reason if r in counts]


def meta(req_id: str) -> RequirementMeta:
    base = req_id.split("/", 1)[0]
    return requirements().get(base) or RequirementMeta(base, "", "unregistered")


# -- verdicts per requirement --------------------------------------------------


@dataclass
class RequirementVerdict:
    meta: RequirementMeta
    outcome: Outcome | None  # None: no finding at all (no case of this run graded it)
    counts: dict[Outcome, int] = field(default_factory=dict)
    rules: dict[str, Outcome] = field(default_factory=dict)  # sub-rule -> worst outcome
    findings: list[Finding] = field(default_factory=list)  # every finding, in run order

    checked: bool = True  # some registered rule grades it

    @property
    def shown(self) -> str:
        if self.outcome is None:
            return "not run" if self.checked else "no direct check"
        if self.outcome is Outcome.NOT_APPLICABLE:
            if self.findings and all(unattributable(f) for f in self.findings):
                return NOT_ATTRIBUTABLE
            cases_not_run = self.findings and all(f.reason is Reason.NOT_RUN
                                                  for f in self.findings)
            return "not run" if cases_not_run else "not testable"
        return str(self.outcome.value)


def requirement_verdicts(result: RunResult, *, include_unrun: bool = False) -> list[RequirementVerdict]:
    """One row per requirement, catalogue order. With ``include_unrun``, the
    requirements of the run's side that no finding mentions are listed too."""
    by_req: dict[str, list[Finding]] = {}
    for f in result.all_findings():
        by_req.setdefault(f.base_requirement, []).append(f)
    rows: list[RequirementVerdict] = []
    known = requirements()
    order = list(known) + sorted(r for r in by_req if r not in known)
    roles = set(result.role.split("/"))
    checked = {r.split("/", 1)[0] for r in _rule_ids()}
    for rid in order:
        fs = by_req.get(rid, [])
        m = known.get(rid) or meta(rid)
        if not fs:
            if include_unrun and rid in known and roles & set(m.parties) \
                    and not all(r in m.excluded for r in roles & set(m.parties)):
                rows.append(RequirementVerdict(m, None, checked=rid in checked))
            continue
        counts: dict[Outcome, int] = {}
        rules: dict[str, list[Outcome]] = {}
        for f in fs:
            counts[f.outcome] = counts.get(f.outcome, 0) + f.faults
            rules.setdefault(f.requirement, []).append(f.outcome)
        rows.append(RequirementVerdict(m, worst(counts), counts,
                                       {r: worst(os) for r, os in rules.items()}, fs))
    return rows


def _rule_ids() -> list[str]:
    from conformance.checks import all_rules

    return list(all_rules())


def run_date() -> str:
    """Today (UTC) as YYYY-MM-DD, or the day of ``SOURCE_DATE_EPOCH`` for reproducible output."""
    import datetime
    import os
    import time

    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    seconds = int(epoch) if epoch.isdigit() else time.time()
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).date().isoformat()


def failing_first(rows: Sequence[RequirementVerdict]) -> list[RequirementVerdict]:
    """Requirement rows with those that fail, then those that warn, first; otherwise in
    catalogue order (the sort is stable)."""
    rank = {Outcome.FAIL: 0, Outcome.WARN: 1}
    return sorted(rows, key=lambda v: rank.get(v.outcome, 2) if v.outcome else 2)


def prose(outcome: Outcome) -> str:
    """An outcome as a reader's words: ``not_applicable`` is "not applicable"."""
    return outcome.value.replace("_", " ")


def tally(counts: dict[Outcome, int]) -> str:
    return " ".join(f"{n} {prose(o)}" for o, n in sorted(counts.items(),
                                                         key=lambda kv: -SEVERITY[kv[0]]))


# -- the certification statement -------------------------------------------------


@dataclass
class Statement:
    tool: str
    role: str
    target: str  # the command or label the run was given
    target_name: str | None  # as the target reported itself in initialize
    target_version: str | None
    protocols: list[int]
    profile: str
    strict: bool
    date: str | None
    must: list[RequirementVerdict]
    should: list[RequirementVerdict]
    notes: list[str]
    failed: bool  # the run has at least one fail (MUST fail, or SHOULD under --strict)
    graded_against: dict[str, str] = field(default_factory=dict)  # see graded_against()
    # per protocol version: (MUST requirements the traffic exercised, those it did not)
    exercised: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict)
    partial: str = ""  # "partial: 2 of 8 MUST requirements exercised", or "" (see partial())
    repeat: int = 1  # --repeat N: how many times each case was played
    unstable: list[str] = field(default_factory=list)  # "case: rule fails in 1 of 3 runs, ..."
    interrupted: str = ""  # the signal that stopped the run ("SIGTERM"), "" when none did

    @property
    def repetitions(self) -> str:
        """What the verdict rests on, in repetitions: one line."""
        if self.repeat <= 1:
            return "each case played once"
        line = (f"each case played {self.repeat} times; a fault seen in any run counts")
        n = len(self.unstable)
        return line + (f"; {n} rule row{'s' if n != 1 else ''} varied between runs"
                       if n else "; every rule came out the same in every run")
    # --target-name/--target-version were given: what initialize reported (else None)
    reported: dict[str, Any] | None = None

    @property
    def named_as(self) -> str:
        """How the Target row qualifies the name: who gave it."""
        if self.reported is None:
            return "as reported in initialize"
        said = " ".join(str(self.reported[k]) for k in ("name", "version")
                        if self.reported.get(k))
        return f"as named for this report; initialize reported {said or 'no name'}"

    def exercised_line(self, protocol: int) -> str:
        """"18 of 22 exercised; not exercised: MID-A-07, ..." for one version."""
        done, missing = self.exercised.get(protocol, ([], []))
        line = f"{len(done)} of {len(done) + len(missing)} exercised"
        return line + (f"; not exercised: {', '.join(missing)}" if missing else "")

    @property
    def must_passed(self) -> bool:
        return not any(v.outcome is Outcome.FAIL for v in self.must)

    @property
    def verdict(self) -> str:  # the headline: no more than what was measured (coverage.py)
        if self.interrupted:
            from conformance.report.coverage import interrupted_headline

            return interrupted_headline(self.interrupted)
        return say(self.failed or not self.must_passed, self.partial)

    @staticmethod
    def summary(rows: Sequence[RequirementVerdict]) -> str:
        """"9 pass, 1 fail, 2 not testable": requirements by how they came out."""
        counts: dict[str, int] = {}
        for v in rows:
            counts[v.shown] = counts.get(v.shown, 0) + 1
        order = ["pass", "fail", "warn", "info", NOT_ATTRIBUTABLE, "not testable", "not run",
                 "no direct check"]
        return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "none"


def graded_against(result: RunResult) -> dict[str, str]:
    """What a run was graded against, so two reports can be compared: the register's
    revision, the profile's spec source and schema versions, the suite's version."""
    from conformance import profiles
    from conformance.requirements import catalogue_revision

    try:
        profile: profiles.Profile | None = profiles.get(result.profile)
    except KeyError:
        profile = None
    return {"catalogue": result.catalogue or catalogue_revision(),
            "spec_source": profile.spec_source if profile else "unknown profile",
            "schema_versions": profile.schema_versions if profile else "",
            "suite": result.tool_version}


def statement(result: RunResult) -> Statement:
    from conformance import TOOL_NAME

    rows = requirement_verdicts(result, include_unrun=True)
    info = result.target_info or {}
    name, version = info.get("name"), info.get("version")
    notes = grouped_notes(result)
    if result.cut:
        notes.insert(0, f"run cut: {result.cut}")
    if result.interrupted:
        unplayed = sum(c.reason is Reason.NOT_RUN and c.cut == result.interrupted
                       for c in result.cases)
        notes.insert(0, f"run interrupted by {result.interrupted}: "
                        f"{len(result.cases) - unplayed} case(s) graded, {unplayed} not run")
    for why in reversed(result.unfinished.values()):
        notes.insert(0, f"not tested: {why}")
    return Statement(
        tool=f"{TOOL_NAME} {result.tool_version}", role=result.role,
        target=shown_command(result.target),
        target_name=None if name is None else str(name),
        target_version=None if version is None else str(version),
        protocols=list(result.protocols), profile=result.profile, strict=result.strict,
        date=getattr(result, "date", None) or None,
        must=[v for v in rows if v.meta.is_must], should=[v for v in rows if v.meta.is_should],
        notes=notes, failed=result.failed, graded_against=graded_against(result),
        exercised=exercised_musts(result), partial=partial(result),
        repeat=getattr(result, "repeat", 1),
        unstable=list(dict.fromkeys(f"{f.case}: {f.requirement} {f.repeats.text}"
                                    for f in result.unstable() if f.repeats is not None)),
        interrupted=result.interrupted,
        reported=info.get("reported") if isinstance(info.get("reported"), dict) else None)
