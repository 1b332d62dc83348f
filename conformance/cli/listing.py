"""``list``: cases, rules and bundled model scripts, or the traceability matrix."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import EXIT_OK, Parser
from conformance.profiles import DEFAULT_PROFILE
from conformance.roles import ROLES as ROLE_TABLE


def build_list_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance list",
                                description="List cases and requirements.")
    p.add_argument("selectors", nargs="*", metavar="SELECTOR",
                   help="list only what these select: a case, requirement or sub-rule ID, or "
                        "a glob of any of them ('load-*', 'MID-A-0*')")
    p.add_argument("--cases", type=Path, metavar="DIR", help="case directory (default: bundled)")
    p.add_argument("--json", action="store_true",
                   help="print the register as JSON: one object per sub-rule with its rule, "
                        "requirement, level, normative text, source and grades per profile "
                        "and protocol version")
    p.add_argument("--traceability", action="store_true",
                   help="map every catalogue requirement to its cases, rules, checkers and "
                        "broken fixtures, with what is excluded and why")
    return p


def cmd_list(ns: argparse.Namespace) -> int:
    from conformance import cases as casemod

    if ns.traceability:
        from conformance.report.traceability import format_traceability, traceability

        print(format_traceability(traceability(casemod.load_dir(ns.cases))))
        return EXIT_OK
    if ns.json:
        import json

        print(json.dumps(register_rows(), indent=2, ensure_ascii=False))
        return EXIT_OK
    cases = casemod.load_dir(ns.cases)  # a bad case file: one error line, nothing printed
    cases = casemod.select(cases, ns.selectors)  # a selector that selects nothing: exit 2
    for role in ROLES:  # grouped by side, the agent's first; every line within WIDTH
        group = [c for c in cases if c.role == role]
        if group:
            print(f"{role.capitalize()} cases:")
        for c in group:
            versions = "/".join(f"v{p}" for p in c.protocols)
            _wrapped(f"  {c.id:<32} {c.role:<6} {versions:<6} ", ", ".join(c.requirements))
            _wrapped("      ", c.description)
    print(f"\nRules (sub-rule, side, grade of a violation per version under {DEFAULT_PROFILE};"
          "\n another profile's or an option's grade where it differs):")
    rows = sorted(register_rows(), key=lambda r: (_role_rank(r["side"]), r["rule"]))
    shown = _selected_rules(ns.selectors, [r["rule"] for r in rows], cases)
    for row in rows:
        if row["rule"] not in shown:
            continue
        _wrapped(f"  {row['rule']:<33} {row['side']:<6} ", grade_words(row))
        _wrapped("      ", row["title"])
    if not ns.selectors:
        _list_model_scripts()
    return EXIT_OK



def register_rows() -> list[dict[str, Any]]:
    """Every graded sub-rule with its requirement's level, normative text and source, and
    its grades ``{profile: {"1": grade, "2": grade}}`` for the versions it applies to:
    what ``list --json`` prints, and what every report grades by."""
    from conformance.checks import all_rules
    from conformance.requirements import load_grades, load_register

    register = load_register(suite=True)
    grades = load_grades()
    rules = all_rules()
    rows = []
    for rid, g in sorted(grades.items()):
        req = register[g.requirement]
        rule = rules.get(rid)  # None: graded outside the checkers (SCHEMA/official)
        versions = rule.versions if rule else req.versions
        # a profile that does not grade the rule (its register record names the others)
        data = {p: {v: (w if rule is None or rule.record.applies_under(p)
                        else "not_applicable") for v, w in vs.items() if int(v) in versions}
                for p, vs in g.as_data().items()}
        rows.append({"rule": rid, "requirement": req.id, "level": req.level,
                     "title": rule.title if rule else req.title,
                     "side": rule.role if rule else "/".join(req.parties),
                     "versions": list(versions), "text": req.text,
                     "source": req.source, "snapshot": req.snapshot, "grades": data,
                     "options": {o: w.value for o, w in g.options.items()}})
    return rows


def grade_words(row: dict[str, Any]) -> str:
    """``v1 warn, v2 fail``, then what another profile or an option changes."""
    def words(vs: dict[str, str]) -> str:
        return ", ".join(f"v{v} {w}" for v, w in sorted(vs.items()))

    default = row["grades"][DEFAULT_PROFILE]
    out = words(default)
    for profile, vs in row["grades"].items():
        if vs != default:
            out += f" ({profile}: {words(vs)})"
    for option, w in row["options"].items():
        name, _, value = option.partition("=")
        out += f" (--{name}{' ' + value if value else ''}: {w})"
    return out


def _selected_rules(chosen: Sequence[str], rule_ids: list[str], cases: Sequence[Any]) -> set[str]:
    """The rules a listing shows: every rule; or those a selector names (``MID-A-02``,
    ``'*/cross-turn-reuse'``), and for a selector of cases the rules of their requirements."""
    from conformance import selectors

    if not chosen:
        return set(rule_ids)
    shown: set[str] = set()
    for s in chosen:
        direct = {r for r in rule_ids if selectors.matches(s, {r, r.split("/", 1)[0]})}
        if not direct:
            named = [selectors.names(c, rule_ids) for c in cases
                     if selectors.matches(s, selectors.names(c, rule_ids))]
            direct = {r for r in rule_ids if any(r in n for n in named)}
        shown |= direct
    return shown


ROLES = tuple(ROLE_TABLE)  # the roles table's order: the agent's first
WIDTH = 100  # columns


def _role_rank(role: str) -> int:
    return ROLES.index(role) if role in ROLES else len(ROLES)


def _wrapped(lead: str, text: str) -> None:
    """``lead`` then ``text``, wrapped to WIDTH columns under the text's first column."""
    import textwrap

    print("\n".join(textwrap.wrap(text, WIDTH, initial_indent=lead,
                                   subsequent_indent=" " * len(lead))) or lead.rstrip())


def _list_model_scripts() -> None:
    from conformance.modelserver.cases import bundled_scripts
    from conformance.modelserver.script import load_script

    print("\nModel scripts (--model-script NAME):")
    for name, path in bundled_scripts().items():
        _wrapped(f"  {name:<32} ", load_script(path).description)


def main(args: Sequence[str]) -> int:
    return cmd_list(build_list_parser().parse_args(list(args)))
