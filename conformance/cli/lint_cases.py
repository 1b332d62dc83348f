"""``lint-cases``: the case files against the requirement catalogue; with
``--requirement ID``, the checklist of CONTRIBUTING.md for one requirement (register,
sources, rule, case, fixture, manifest, docs), naming each step that is missing."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from conformance.cli.options import EXIT_FAIL, EXIT_OK, Parser
from conformance.usage import UsageError


def build_lint_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance lint-cases",
               description="Lint the case files against the requirement catalogue.")
    p.add_argument("--cases", type=Path, metavar="DIR",
                   help="case directory (default: bundled); a directory of extra cases is "
                        "linted for what they name (requirements, rules), not for covering "
                        "the whole catalogue")
    p.add_argument("--requirement", metavar="ID",
                   help="go through the checklist for adding this requirement (register, "
                        "sources, rule, case, fixture, manifest, docs) and name what is missing")
    return p


def cmd_lint_cases(ns: argparse.Namespace) -> int:
    """Lint the case files: schema, unique IDs, known rules, catalogue coverage."""
    from conformance import cases as casemod
    from conformance.checks import all_rules
    from conformance.requirements import case_problems, lint

    # schema and duplicate IDs: CaseError, exit 2; unknown rules are listed below
    cases = casemod.load_dir(ns.cases, known_rules=False)
    if ns.requirement:
        return checklist(ns.requirement, cases)
    if ns.cases is not None:  # a vendor's extra cases: they need not cover the catalogue
        problems = case_problems(cases, all_rules())
        scope = " (extra cases: their rules and requirements; catalogue coverage is the " \
                "bundled cases' and is not checked)"
    else:
        problems, scope = lint(cases, all_rules()), ""
    for p in problems:
        print(p)
    print(f"{len(cases)} cases, {len(problems)} problem(s){scope}")
    return EXIT_FAIL if problems else EXIT_OK


def checklist(rid: str, cases: Sequence[object]) -> int:
    """One line per step of CONTRIBUTING.md's checklist: ok, or what is missing."""
    from conformance.checks import all_rules
    from conformance.report.catalogue import _sources
    from conformance.report.traceability import repository_root, traceability
    from conformance.requirements import load_register

    register = load_register()
    if rid not in register:
        raise UsageError(f"--requirement {rid}: not in conformance/data/requirements.yaml "
                         "(step 1: register it there)")
    req = register[rid]
    rules = sorted(r for r in all_rules() if r.split("/", 1)[0] == rid)
    row = next(r for r in traceability(cases) if r.meta.id == rid)
    cited = sorted({c for ids in row.cases.values() for c in ids})
    root = repository_root()
    docs = "" if root is None else "\n".join(
        p.read_text(encoding="utf-8") for p in [root / "README.md", *(root / "docs").glob("*.md")])
    tested = [s for s in req.parties if s not in req.excluded]
    steps = [
        ("register", "conformance/data/requirements.yaml", True),
        ("sources", "conformance/data/requirement-sources.yaml", bool(_sources()[2].get(rid))),
        ("rule", "a checker in conformance/checks/ declaring a Rule " + rid, bool(rules)),
        ("case", "a case under cases/ citing it", bool(cited)),
        ("fixture", "a broken fixture under fixtures/ that breaks it",
         row.fixtures is None or bool(row.fixtures)),
        ("manifest", "its fixtures/*/manifest.yaml entry expecting " + rid,
         row.fixtures is None or bool(row.fixtures)),
        ("docs", "named in docs/agents.md, docs/client.md or docs/proxies.md",
         root is None or rid in docs),
    ]
    if not tested:  # excluded on every side: nothing to check, prove or document
        steps = steps[:2]
    missing = 0
    for name, where, ok in steps:
        missing += not ok
        print(f"{'ok' if ok else 'MISSING':<8} {name:<9} {where}")
    if not tested:
        print(f"{'':<8} {'excluded':<9} " + "; ".join(f"{s}: {w}" for s, w in req.excluded.items()))
    elif row.fixtures is None:
        print(f"{'':<8} {'':<9} (fixtures/ is not beside the package: fixture, manifest "
              "and docs not checked)")
    print(f"{rid}: {missing} step(s) missing")
    return EXIT_FAIL if missing else EXIT_OK


def main(args: Sequence[str]) -> int:
    return cmd_lint_cases(build_lint_parser().parse_args(list(args)))
