"""Checkers: pure functions of a transcript, registered by requirement ID.

This package never imports the process side (transport, drivers, runner).
``base`` holds the machinery and knows no checker; importing a checker module
registers its rules, and the package imports every one of them here.
"""

from conformance.checks import identity, replay, target, turns, wire  # noqa: F401  (register)
from conformance.checks.base import Options, Rule, all_rules, grade

__all__ = ["Options", "Rule", "all_rules", "grade"]
