"""Checkers: pure functions of a transcript, registered by requirement ID.

This package never imports the process side (transport, drivers, runner).
``base`` holds the machinery and knows no checker; importing a checker module
registers its rules, and the package imports every one of them here.
"""

# Checkers run in the order they register: wire, the client observation checker, the rest.
from conformance.checks import wire  # noqa: F401, I001  (register)
from conformance.checks import observe  # noqa: F401  (client observation rules)
from conformance.checks import identity, replay, target, turns  # noqa: F401  (register)
from conformance.checks import addressed, drift, keys, marker, parity, restate  # noqa: F401  (App. K)
from conformance.checks import proxy  # noqa: F401  (the proxy rules, graded on two transcripts)
from conformance.checks.base import Options, Rule, all_rules, grade

#: Rules graded in every case of a role, whatever the case lists: framing and liveness
#: for agents; for clients also the wire IDs they send (MID-C-01) and staying live.
ALWAYS = {"agent": ("MID-S-06", "TARGET"),
          "client": ("MID-C-01", "MID-C-08", "MID-S-06/client-framing")}

__all__ = ["ALWAYS", "Options", "Rule", "all_rules", "grade"]
