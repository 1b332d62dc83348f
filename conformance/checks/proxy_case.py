"""A proxy case as recorded, graded from its two transcripts: the proxy rules
(:func:`conformance.checks.proxy.grade_proxy`) on both sides, the agent role's
always-graded rules on the client side. :func:`conformance.grading.grade_sides` calls
it for a case recorded on two sides, live and in ``check``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from conformance.checks.base import Options
from conformance.checks.proxy import REQUIREMENTS, grade_proxy
from conformance.checks.target import AGENT_NEGOTIATION, NEGOTIATION
from conformance.results import Finding, Outcome, Reason
from conformance.transcript import Entry

#: How the grading of a recorded case grades one side with the one-transcript checkers:
#: (entries, rules, protocol, with the official schemas) -> findings (agent role).
GradeOne = Callable[[list[Entry], list[str], int, bool], list[Finding]]


def grade_case(sent: Iterable[Entry], received: Iterable[Entry], *, front: int, behind: int,
               adapter: bool, options: Options, rules: Sequence[str] | None, one: GradeOne,
               not_played: tuple[str, Reason] | None = None,
               requirements: Sequence[str] = (), cut: bool = False) -> list[Finding]:
    """A proxy case as recorded: the proxy rules (:func:`grade_proxy`) on both sides, and
    the agent role's always-graded rules (framing, liveness) on the client side
    ``received``, which speaks ``front`` (``behind`` the agent side's version), graded by
    ``one`` (the checkers on one transcript: :func:`conformance.grading.grade_sides`).
    ``rules`` None grades every proxy rule. A case the proxy could not take past the handshake
    (``not_played``: the note shown and its reason) grades the handshake (MID-P-05: it
    may be the proxy's doing) and says why for the rest; in a ``cut`` case what was
    never reached is cut, not merely untested."""
    from conformance.checks import ALWAYS

    received, sent = list(received), list(sent)
    proxy_rules = None if rules is None else [r for r in rules
                                               if r.split("/", 1)[0] in REQUIREMENTS]
    others = list(ALWAYS["agent"]) if rules is None else [
        r for r in rules if r.split("/", 1)[0] not in REQUIREMENTS]
    if not_played is not None:
        why, reason = not_played
        rows = [f for f in grade_proxy(sent, received, protocol=behind, adapter=adapter,
                                       options=options, select=["MID-P-05"])
                if f.outcome not in (Outcome.PASS, Outcome.NOT_APPLICABLE)]
        rows += [Finding(r, Outcome.NOT_APPLICABLE, why, reason=reason)
                 for r in requirements or REQUIREMENTS
                 if not any(f.requirement == r for f in rows)]
        rows += [f for f in one(received, [NEGOTIATION], front, False)
                 if f.outcome not in (Outcome.PASS, Outcome.NOT_APPLICABLE)]
        return rows
    found = grade_proxy(sent, received, protocol=behind, adapter=adapter, options=options,
                        select=proxy_rules)
    if others:
        # A declared v2-to-v1 adapter passes on to its v1 side what v1 cannot express: that
        # is MID-V2-10's to grade, not a version it answered and did not speak.
        found += [f for f in one(received, others, front, True)
                  if not (adapter and f.requirement == AGENT_NEGOTIATION)]
    if cut:  # what a cut case never reached is cut, not merely untested
        found = [dataclasses.replace(f, reason=Reason.CUT)
                 if f.outcome is Outcome.NOT_APPLICABLE and f.reason in (None,
                                                                        Reason.NOT_TESTABLE)
                 else f for f in found]
    return found
