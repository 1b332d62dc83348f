"""``list``: cases, rules and bundled model scripts, or the traceability matrix."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from conformance.cli.options import EXIT_OK, Parser


def build_list_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance list",
                                description="List cases and requirements.")
    p.add_argument("--cases", type=Path, metavar="DIR", help="case directory (default: bundled)")
    p.add_argument("--traceability", action="store_true",
                   help="map every catalogue requirement to its cases, rules, checkers and "
                        "broken fixtures, with what is excluded and why")
    return p


def cmd_list(ns: argparse.Namespace) -> int:
    from conformance import cases as casemod
    from conformance.checks import all_rules

    if ns.traceability:
        from conformance.report.catalogue import format_traceability, traceability

        print(format_traceability(traceability(casemod.load_dir(ns.cases))))
        return EXIT_OK
    cases = casemod.load_dir(ns.cases)  # a bad case file: one error line, nothing printed
    print("Cases:")
    for c in cases:
        versions = "/".join(f"v{p}" for p in c.protocols)
        print(f"  {c.id:<32} {c.role:<6} {versions:<6} {', '.join(c.requirements)}")
        print(f"  {'':<32} {c.description}")
    print("\nRules (requirement/sub-rule, grade of a violation, versions, side):")
    for rid, rule in sorted(all_rules().items()):
        versions = "/".join(f"v{p}" for p in rule.versions)
        print(f"  {rid:<40} {rule.outcome.value:<5} {versions:<6} {rule.role:<6} {rule.title}")
    _list_model_scripts()
    return EXIT_OK


def _list_model_scripts() -> None:
    from conformance.modelserver.cases import bundled_scripts
    from conformance.modelserver.script import load_script

    print("\nModel scripts (--model-script NAME):")
    for name, path in bundled_scripts().items():
        print(f"  {name:<32} {load_script(path).description}")


def main(args: Sequence[str]) -> int:
    return cmd_list(build_list_parser().parse_args(list(args)))
