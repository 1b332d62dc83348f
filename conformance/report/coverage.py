"""What a run measured: the MUST requirements of the tested side it exercised per
protocol version (``coverage``), and the headline that claims no more than that
(``headline``: ``FAIL``, ``PASS``, or ``PASS, partial: N of M MUST requirements
exercised``). The statement, the console, JSON, JUnit, HTML and the Action's step
summary all say the same (docs/grading.md, "The headline and the coverage figure").
"""

from __future__ import annotations

from typing import Any

from conformance.results import Outcome, Reason, RunResult

MUST_LEVELS = ("MUST", "MUST NOT")


def exercised_musts(result: RunResult) -> dict[int, tuple[list[str], list[str]]]:
    """Per protocol version of the run: the MUST requirements of the tested side that
    some case of that version graded on traffic (pass, fail, warn or info), and the
    ones no case exercised (not testable, not run, or not reached). Excluded sides,
    requirements of the other version and those no rule of the side grades in that
    version (*no direct check*: no traffic can exercise them), or only under another
    profile than the run's, are left out."""
    from conformance.checks import all_rules
    from conformance.requirements import load_register

    roles = set(result.role.split("/"))
    out: dict[int, tuple[list[str], list[str]]] = {}
    for p in result.protocols:
        graded = {f.base_requirement for c in result.cases if c.protocol == p
                  for f in c.findings if f.outcome is not Outcome.NOT_APPLICABLE}
        ruled = graded | {r.id.split("/", 1)[0] for r in all_rules().values()
                          if r.role in roles and p in r.versions
                          and r.record.applies_under(result.profile)}
        musts = [m.id for m in load_register().values() if m.level in MUST_LEVELS
                 and p in m.versions and roles & set(m.parties) and m.id in ruled
                 and not all(r in m.excluded for r in roles & set(m.parties))]
        out[p] = ([r for r in musts if r in graded], [r for r in musts if r not in graded])
    return out


def counted(result: RunResult, protocol: int | None = None) -> dict[str, int]:
    """Faults by outcome (a fault seen many times counts once), in one version or the
    whole run: the one count the console, JSON, JUnit, HTML, Markdown and the certification
    bundle give. A rule's not-applicable row in a version the rule does not apply to
    ("applies to protocol v2 only": the console's "-") is no result and is not counted."""
    from conformance.checks import all_rules

    versions = {rid: tuple(rule.versions) for rid, rule in all_rules().items()}
    counts = {o.value: 0 for o in Outcome}
    for c in result.cases:
        if protocol is not None and c.protocol != protocol:
            continue
        for f in c.findings:
            if f.outcome is Outcome.NOT_APPLICABLE \
                    and c.protocol not in versions.get(f.requirement, (c.protocol,)):
                continue
            counts[f.outcome.value] += f.faults
    return counts


def coverage(result: RunResult) -> dict[int, dict[str, Any]]:
    """Per protocol version, the MUST requirements of the tested side the run exercised:
    ``exercised`` and ``musts`` (counts), the IDs ``not_exercised``, and those left out of
    ``musts`` because the target does not advertise what they need (``not_advertised``:
    an agent's optional capability is the agent's choice, not a gap in the measurement;
    a client the suite cannot reload or read without a profile is such a gap)."""
    out: dict[int, dict[str, Any]] = {}
    played = {c.protocol for c in result.cases}  # a version no case was planned in: no claim
    for p, (done, missing) in exercised_musts(result).items():
        if p not in played:
            continue
        advertised = []
        if result.role != "client":
            for r in missing:
                rows = [f for c in result.cases if c.protocol == p for f in c.findings
                        if f.base_requirement == r]
                if rows and all(f.reason is Reason.NO_CAPABILITY for f in rows):
                    advertised.append(r)
        gaps = [r for r in missing if r not in advertised]
        out[p] = {"exercised": len(done), "musts": len(done) + len(gaps),
                  "not_exercised": gaps, "not_advertised": advertised}
        if all(c.reason is Reason.VERSION_UNSUPPORTED for c in result.cases if c.protocol == p):
            out[p]["version_unsupported"] = True
    return out


def partial(result: RunResult) -> str:
    """"partial: N of M MUST requirements exercised (not exercised: MID-V2-12)" when some
    MUST of the tested side went unexercised in a version the run tested (per version when
    it tested several: "(v1 11 of 11, v2 13 of 14; not exercised: MID-V2-12)");
    "" when every one was exercised. A version the target does not speak (every case
    ``version_unsupported``: the console says so) is left out, unless it is every version
    of the run: then nothing was measured, and the headline says so."""
    cov = {p: c for p, c in coverage(result).items() if c["musts"]}
    spoken = {p: c for p, c in cov.items() if not c.get("version_unsupported")}
    cov = spoken or cov  # a version the target does not speak is said apart, unless it is all
    if all(c["exercised"] == c["musts"] for c in cov.values()):
        return ""
    done = sum(c["exercised"] for c in cov.values())
    total = sum(c["musts"] for c in cov.values())
    each = [f"v{p} {c['exercised']} of {c['musts']}"
            for p, c in sorted(cov.items())] if len(cov) > 1 else []
    missing = list(dict.fromkeys(r for _, c in sorted(cov.items()) for r in c["not_exercised"]))
    named = ", ".join(missing[:NAMED]) + (f" and {len(missing) - NAMED} more"
                                          if len(missing) > NAMED else "")
    parts = [", ".join(each)] if each else []
    parts.append(f"not exercised: {named}")
    return f"partial: {done} of {total} MUST requirements exercised ({'; '.join(parts)})"


#: How many unexercised MUST requirements the headline names before "and N more".
NAMED = 6


def say(failed: bool, gap: str) -> str:
    """The one wording of a verdict: FAIL, PASS, or "PASS, partial: ..." (``gap`` is
    :func:`partial`'s text)."""
    if failed:
        return "FAIL"
    return f"PASS, {gap}" if gap else "PASS"


def headline(result: RunResult) -> str:
    """The run's verdict as the reports say it: FAIL, PASS, "PASS, partial: ...", or
    "INTERRUPTED by SIGTERM: ..." (never a pass: the run did not end its plan)."""
    if result.interrupted:
        return interrupted_headline(result.interrupted)
    return say(result.failed, "" if result.failed else partial(result))


def interrupted_headline(signal_name: str) -> str:
    """The verdict of a run a signal stopped: not a pass, whatever was graded before it."""
    return (f"INTERRUPTED by {signal_name}: not a pass, only the cases graded before it "
            "are reported")
