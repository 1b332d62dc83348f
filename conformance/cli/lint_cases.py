"""``lint-cases``: the case files against the requirement catalogue."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from conformance.cli.listing import build_list_parser
from conformance.cli.options import EXIT_FAIL, EXIT_OK


def cmd_lint_cases(ns: argparse.Namespace) -> int:
    """Lint the case files: schema, unique IDs, known rules, catalogue coverage."""
    from conformance import cases as casemod
    from conformance.checks import all_rules
    from conformance.requirements import lint

    cases = casemod.load_dir(ns.cases)  # schema and duplicate IDs: CaseError, exit 2
    problems = lint(cases, all_rules())
    for p in problems:
        print(p)
    print(f"{len(cases)} cases, {len(problems)} problem(s)")
    return EXIT_FAIL if problems else EXIT_OK


def main(args: Sequence[str]) -> int:
    return cmd_lint_cases(build_list_parser().parse_args(list(args)))
