"""Checkers: pure functions of a transcript, registered by requirement ID.

This package never imports the process side (transport, drivers, runner).
"""

from conformance.checks.base import Options, Rule, all_rules, grade

__all__ = ["Options", "Rule", "all_rules", "grade"]
