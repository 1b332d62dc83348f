"""What a proxy case grades (its scope). The grading of a recorded proxy case, from its
two transcripts and what the client side's header records, is the one grading every
recorded case gets (:func:`conformance.grading.grade_sides`, live and in ``check``);
the rules themselves are :mod:`conformance.checks.proxy`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from conformance.grading import Scope

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
