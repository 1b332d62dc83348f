"""How a recorded proxy case is graded: from its two transcripts and what the client
side's header records (the case's scope and how it ended, as :mod:`conformance.lifecycle`
writes them). The one grading a proxy case gets, live (the proxy runner) and offline
(``acp-conformance check``); the rules themselves are :mod:`conformance.checks.proxy`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from conformance.lifecycle import NEGOTIATION, Ending, Scope, shown_note
from conformance.results import Finding, Outcome, Reason, apply_strict
from conformance.transcript import Entry

AGENT_NEGOTIATION = "TARGET/negotiation/agent"  # checks.target.AgentNegotiation's rule

ROLE = "proxy"


def proxy_scope(options: Any, strict: bool, case: Any) -> Scope:
    """A proxy case grades the proxy rules its case lists (a proxy case) or every proxy
    rule (an agent case played through the proxy), and the proxy's framing and liveness
    (the agent role's always-graded rules, on the client side)."""
    from conformance.checks import ALWAYS
    from conformance.checks.proxy import REQUIREMENTS

    rules = ([c for c in case.checks if c.split("/", 1)[0] in REQUIREMENTS]
             if case.role == ROLE else list(REQUIREMENTS))
    return dataclasses.replace(Scope.of(ROLE, options, strict),
                               rules=tuple(dict.fromkeys([*rules, *ALWAYS["agent"]])))


def grade_proxy_recorded(header: Mapping[str, Any], received: Iterable[Entry],
                         sent: Iterable[Entry], *, protocol: int | None = None,
                         schema_dir: Path | None = None, strict: bool = False) -> list[Finding]:
    """Grade one proxy case: ``received`` is its client side (whose ``header`` this is),
    ``sent`` its agent side. A case the proxy could not take past the handshake grades
    the handshake (MID-P-05: it may be the proxy's doing) and says why for the rest."""
    from conformance.checks import ALWAYS, grade
    from conformance.checks.proxy import REQUIREMENTS, grade_proxy

    scope, ending = Scope.from_header(header), Ending.from_header(header)
    front = int(header.get("protocol", 1)) if protocol is None else protocol
    behind = int(header.get("agent_protocol") or front)
    adapter = header.get("adapter") is True
    options = scope.options()
    strict = strict or scope.strict
    received, sent = list(received), list(sent)
    rules = list(scope.rules) if scope.rules is not None else None
    proxy_rules = None if rules is None else [r for r in rules
                                               if r.split("/", 1)[0] in REQUIREMENTS]
    others = list(ALWAYS["agent"]) if rules is None else [
        r for r in rules if r.split("/", 1)[0] not in REQUIREMENTS]
    if ending.reason is not None:
        rows = [f for f in grade_proxy(sent, received, protocol=behind, adapter=adapter,
                                       options=options, select=["MID-P-05"])
                if f.outcome not in (Outcome.PASS, Outcome.NOT_APPLICABLE)]
        why = shown_note(ending.note, ending.reason)
        rows += [Finding(r, Outcome.NOT_APPLICABLE, why, reason=ending.reason)
                 for r in header.get("requirements") or REQUIREMENTS
                 if not any(f.requirement == r for f in rows)]
        rows += [f for f in grade(received, protocol=front, options=options,
                                  select=list(NEGOTIATION), role="agent")
                 if f.outcome not in (Outcome.PASS, Outcome.NOT_APPLICABLE)]
        return apply_strict(rows, strict)
    found = grade_proxy(sent, received, protocol=behind, adapter=adapter, options=options,
                        select=proxy_rules)
    if others:
        # A declared v2-to-v1 adapter passes on to its v1 side what v1 cannot express: that
        # is MID-V2-10's to grade, not a version it answered and did not speak.
        found += [f for f in grade(received, protocol=front, options=options, select=others,
                                   role="agent", schema_dir=schema_dir)
                  if not (adapter and f.requirement == AGENT_NEGOTIATION)]
    if ending.cut:  # what a cut case never reached is cut, not merely untested
        found = [dataclasses.replace(f, reason=Reason.CUT)
                 if f.outcome is Outcome.NOT_APPLICABLE and f.reason in (None,
                                                                        Reason.NOT_TESTABLE)
                 else f for f in found]
    return apply_strict(found, strict)
