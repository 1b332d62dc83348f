"""Expected-failures baseline: what a given target is known to fail.

A baseline file is YAML: a list of ``case:requirement`` entries, either at the
top level or under ``expected_failures``::

    # my-agent 1.4: known gaps, each with its ticket
    expected_failures:
      - ids-across-turns@v1:MID-A-02/cross-turn-reuse   # AGENT-123
      - load-fresh-process:MID-A-07                     # every version, every sub-rule

``case`` is a case ID, optionally pinned to one protocol version (``@v1``);
``requirement`` is a requirement ID (``MID-A-07``, matching all its sub-rules)
or one sub-rule (``MID-A-07/replay-duplicate``, ``TARGET/negotiation/agent``); either may
be a glob, as every selector (``load-*:MID-A-07``, ``*:MID-A-02/cross-turn-reuse``).

A run-level fault (a version negotiated and then not spoken: ``TARGET/negotiation``,
``TARGET/negotiation/agent``) shows in whichever case of the version ran first, and
no later case of that version runs; ``--write-baseline`` lists it for the version,
``*@v2:TARGET/negotiation/agent``, with what it means and the usual fix. Listed, it is
expected and so is the version it left untested (the run's exit status is 0 for it;
the reports still say the version was not tested). Against a run:

* a fail the baseline lists is *expected*: it does not fail the run;
* a fail it does not list is *unexpected*: it fails the run;
* a listed entry whose case ran and was graded without any matching fail is
  *stale* (the target was fixed, or the entry is wrong): it fails the run, so
  the file is kept honest;
* a listed entry whose case did not run, or could not be exercised, is
  reported and changes nothing.

Certification does not read the baseline: a baselined failure is still a
failure in the statement. The baseline only decides the exit status.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from conformance.results import CaseResult, Finding, Outcome, Reason

_ENTRY = re.compile(r"^(?P<case>[a-z0-9*?\[][a-z0-9*?\[\]-]*)(?:@v(?P<v>[0-9]+))?:"
                    r"(?P<req>[A-Z*?\[][A-Z0-9*?\[\]-]*(?:/[a-z0-9*?\[\]-]+)*)$")


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class Entry:
    case: str  # case ID without the version
    protocol: int | None  # None: every version
    requirement: str  # requirement ID or sub-rule ID
    where: str  # "file:line"

    def __str__(self) -> str:
        pinned = f"@v{self.protocol}" if self.protocol is not None else ""
        return f"{self.case}{pinned}:{self.requirement}"

    def matches_case(self, case_name: str) -> bool:
        """``case_name`` is a run's case name, ``ids-across-turns@v1``."""
        cid, _, version = case_name.partition("@v")
        return fnmatchcase(cid, self.case) and (self.protocol is None
                                                 or version == str(self.protocol))

    def matches(self, finding: Finding) -> bool:
        return self.matches_case(finding.case) and (
            fnmatchcase(finding.requirement, self.requirement)
            or fnmatchcase(finding.base_requirement, self.requirement))


@dataclass
class Verdict:
    expected: list[Finding] = field(default_factory=list)  # listed fails
    unexpected: list[Finding] = field(default_factory=list)  # fails the baseline does not list
    stale: list[Entry] = field(default_factory=list)  # listed, graded, and no longer failing
    not_exercised: list[Entry] = field(default_factory=list)  # listed, case ran, not testable
    not_run: list[Entry] = field(default_factory=list)  # listed, case not in this run
    # versions no case of which ran to its end, for a fault the baseline lists: version ->
    # the listed fault (they do not fail the run; the reports still say "not tested")
    adopted: dict[int, str] = field(default_factory=dict)

    def excuses(self, unfinished: Iterable[int]) -> bool:
        """Whether every version left untested (``RunResult.unfinished``) is adopted."""
        return all(p in self.adopted for p in unfinished)

    @property
    def failed(self) -> bool:
        return bool(self.unexpected or self.stale)

    def lines(self) -> list[str]:
        """Plain lines for the console: what the baseline changed and why the run fails."""
        out = [(f"baseline: {len(self.expected)} expected failure(s), "
                f"{len(self.unexpected)} unexpected, {len(self.stale)} stale")]
        out += [f"  unexpected: {f.case}:{f.requirement}" for f in _unique(self.unexpected)]
        out += [f"  stale: {e} ({e.where}) now passes: remove it from the baseline"
                for e in self.stale]
        out += [f"  not exercised: {e} ({e.where})" for e in self.not_exercised]
        out += [f"  not run: {e} ({e.where})" for e in self.not_run]
        out += [f"  v{p} not tested, as expected: the baseline lists {rule} ({_fix(rule, p)})"
                for p, rule in sorted(self.adopted.items())]
        return out


@dataclass
class Baseline:
    path: str
    entries: list[Entry]

    def evaluate(self, cases: Iterable[CaseResult]) -> Verdict:
        cases = list(cases)
        verdict = Verdict()
        for c in cases:
            for f in c.findings:
                if f.outcome is not Outcome.FAIL:
                    continue
                if any(e.matches(f) for e in self.entries):
                    verdict.expected.append(f)
                else:
                    verdict.unexpected.append(f)
        for e in self.entries:
            ran = [c for c in cases if e.matches_case(c.case)]
            matched = [f for c in ran for f in c.findings if e.matches(f)]
            if not ran:
                verdict.not_run.append(e)
            elif any(f.outcome is Outcome.FAIL for f in matched):
                continue
            elif any(f.outcome is not Outcome.NOT_APPLICABLE for f in matched):
                verdict.stale.append(e)
            else:
                verdict.not_exercised.append(e)
        verdict.adopted = _adopted(cases, verdict)
        return verdict


def _adopted(cases: list[CaseResult], verdict: Verdict) -> dict[int, str]:
    """The versions in which no case ran to its end (as ``grading.conclude`` finds them)
    where every case that ended early has a listed fail and no fail the baseline does not
    list: the listed fault is why the version was not tested."""
    unexpected = {id(f) for f in verdict.unexpected}
    expected = {id(f) for f in verdict.expected}
    out: dict[int, str] = {}
    for p in sorted({c.protocol for c in cases}):
        mine = [c for c in cases if c.protocol == p]
        ended = [c for c in mine if c.aborted or c.reason is Reason.NOT_RUN and any(
            f.outcome is Outcome.FAIL for f in c.findings)]  # not the ones never played
        if any(c.completed for c in mine) or not ended:
            continue
        fails = [f for c in ended for f in c.findings if f.outcome is Outcome.FAIL]
        if (all(any(id(f) in expected for f in c.findings) for c in ended)
                and not any(id(f) in unexpected for f in fails)):
            out[p] = next(f.requirement for f in fails if id(f) in expected)
    return out


def load(path: Path, known_cases: Iterable[str] | None = None) -> Baseline:
    """Read and validate a baseline file; ``known_cases`` turns a typo into an error."""
    from conformance.cases import CaseError, compose_with_lines, read_input

    name = str(path)
    text = read_input(path, "baseline", BaselineError)
    if not text.strip():
        return Baseline(name, [])
    try:
        data, lines = compose_with_lines(text, name)
    except CaseError as exc:
        raise BaselineError(str(exc)) from None
    prefix: tuple[Any, ...] = ()
    if isinstance(data, dict):
        unknown = sorted(set(map(str, data)) - {"expected_failures"})
        if unknown:
            raise BaselineError(f"{name}:{lines.get((unknown[0],), 1)}: unknown key "
                                f"{unknown[0]!r} (expected 'expected_failures')")
        data, prefix = data.get("expected_failures") or [], ("expected_failures",)
    if not isinstance(data, list):
        raise BaselineError(f"{name}:1: a baseline is a list of 'case:requirement' entries")
    known = set(known_cases) if known_cases is not None else None
    entries = []
    for i, item in enumerate(data):
        line = lines.get(prefix + (i,), 1)
        where = f"{name}:{line}"
        m = _ENTRY.match(item) if isinstance(item, str) else None
        if m is None:
            raise BaselineError(f"{where}: expected 'case:requirement' "
                                f"(e.g. ids-across-turns@v1:MID-A-02), got {item!r}")
        if known is not None and not any(fnmatchcase(k, m["case"]) for k in known):
            from conformance.selectors import suggestions

            hint = suggestions(m["case"], known)
            raise BaselineError(f"{where}: unknown case {m['case']!r} ("
                                + (f"did you mean {' or '.join(hint[:3])}? " if hint else "")
                                + "'acp-conformance list' shows every case)")
        entries.append(Entry(m["case"], int(m["v"]) if m["v"] else None, m["req"], where))
    return Baseline(name, entries)


def _unique(findings: Iterable[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.case, f.requirement)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


#: Faults of the run, not of a case: what a listed one means, and its usual fix. A version
#: negotiation fault is listed for its version (``*@v2:RULE``): the case it showed in is
#: only the first of the version to run.
RUN_LEVEL = {
    "TARGET/negotiation/agent": (
        "the agent answered protocolVersion {v} and then spoke another version, so no v{v} "
        "case ran past it", "fix the agent's negotiation, or test the version it speaks "
        "(--protocol {other})"),
    "TARGET/negotiation": (
        "the protocol version was not agreed as the client asked, so no v{v} case ran "
        "past it", "fix the negotiation, or test the version agreed (--protocol {other})"),
}
#: The target's own faults in one case: what a listed one means, and its usual fix.
TARGET_FAULTS = {
    "TARGET/exit": ("the target exited while the suite waited for it",
                    "its stderr in the transcript says why it exited"),
    "TARGET/hang": ("the target went silent while the suite waited for it",
                    "answer every request; a slow target needs a longer --timeout"),
    "TARGET/shutdown": ("the target ignored SIGTERM", "exit on SIGTERM"),
    "TARGET/shutdown-slow": ("the target was slow to exit on SIGTERM", "exit sooner on SIGTERM"),
    "TARGET/output-cap": ("the target wrote more than the suite reads",
                          "bound the output (one JSON object per line)"),
    "TARGET/stderr-flood": ("the target flooded stderr", "log less to stderr"),
    "TARGET/unmatched-response": ("the target answered a request nobody sent",
                                  "answer only the requests received, with their IDs"),
}


def _fix(rule: str, version: int | None = None) -> str:
    """What a listed fault means and its usual fix, one line (the requirement: the catalogue)."""
    if rule in RUN_LEVEL:
        v = str(version) if version is not None else "N"
        other = {"1": "2", "2": "1"}.get(v, "N")
        meaning, fix = RUN_LEVEL[rule]
        return f"{meaning.format(v=v)}; usual fix: {fix.format(other=other)}"
    if rule in TARGET_FAULTS:
        meaning, fix = TARGET_FAULTS[rule]
        return f"{meaning}; usual fix: {fix}"
    base = rule.split("/", 1)[0]
    return f"fails {rule}; usual fix: meet {base} as 'acp-conformance list' states it"


def render(findings: Iterable[Finding], *, target: str, catalogue: str, date: str) -> str:
    """A baseline listing every fail of ``findings`` (``--write-baseline``): one entry per
    case and sub-rule, a run-level fault once per version (``*@v2:TARGET/negotiation/agent``),
    each under a comment of what it means and its usual fix, its first message beside it;
    headed by the target, the register revision it was graded against and the day, so a
    later reader knows what it records. A fail whose case name no entry can hold (a fuzz
    counterexample) is a comment."""
    lines = [f"# acp-conformance baseline: the failures of {_comment(target)}",
             f"# graded against catalogue {catalogue} on {date} (--write-baseline);",
             "# a listed fail does not fail the run, an entry that passes again is stale",
             "expected_failures:"]
    fails = _unique(f for f in findings if f.outcome is Outcome.FAIL)
    written: set[str] = set()
    for f in sorted(fails, key=lambda f: (f.case, f.requirement)):
        cid, _, version = f.case.partition("@v")
        v = int(version) if version.isdigit() else None
        entry = f"{f.case}:{f.requirement}"
        if f.requirement in RUN_LEVEL and v is not None:
            entry = f"*@v{v}:{f.requirement}"
        if entry in written:
            continue
        written.add(entry)
        note = _comment(f.message, 100)
        if not _ENTRY.match(entry):
            lines.append(f"  # not listable: {_comment(entry)} ({note})")
            continue
        lines.append(f"  # {_comment(_fix(f.requirement, v), 300)}")
        quoted = f"'{entry}'" if entry[0] in "*?[" else entry  # a plain * is a YAML alias
        lines.append(f"  - {quoted}   # {note}")
    if not fails:
        lines[-1] = "expected_failures: []"
    return "\n".join(lines) + "\n"


def _comment(text: str, limit: int = 200) -> str:
    """One line a YAML comment can hold."""
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[:limit - 3] + "..."
