"""One selector grammar for ``--case``, ``--acp-case``, baseline entries and ``list``.

A selector is a case ID (``ids-across-turns``), a requirement ID (``MID-A-02``), a
sub-rule ID (``MID-A-02/cross-turn-reuse``), or a glob of any of them (``'load-*'``,
``'MID-A-0*'``). A case is selected when the selector names it, a requirement it
cites, or a sub-rule of one. A selector that selects nothing is an input error that
says what was probably meant and where every name is listed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

LIST_HINT = "'acp-conformance list' shows every case and rule"


def is_glob(selector: str) -> bool:
    return any(ch in selector for ch in "*?[")


def names(case: Any, rules: Iterable[str]) -> set[str]:
    """Every name a selector may use for ``case``: its ID, the requirements it cites
    (with and without a sub-rule) and the sub-rules of those requirements."""
    bases = {r.split("/", 1)[0] for r in case.requirements}
    return ({case.id} | set(case.requirements) | bases
            | {r for r in rules if r.split("/", 1)[0] in bases})


def matches(selector: str, names_of_case: set[str]) -> bool:
    if is_glob(selector):
        return any(fnmatchcase(n, selector) for n in names_of_case)
    return selector in names_of_case


def suggestions(selector: str, known: Iterable[str]) -> list[str]:
    """What a selector that matched nothing probably meant: names it starts (as a glob when
    it starts several), then near spellings."""
    known = sorted(set(known))
    plain = selector.rstrip("*?")
    starts = [n for n in known if plain and n.lower().startswith(plain.lower())]
    if len(starts) > 1 and not is_glob(selector):
        out = [f"'{plain}*'"] + starts[:3]
    else:
        out = starts[:3]
    for n in difflib.get_close_matches(selector, known, n=3, cutoff=0.6):
        if n not in out:
            out.append(n)
    return out[:4]


def miss(selector: str, known: Iterable[str], what: str = "case or requirement") -> str:
    """The error text for a selector that matched nothing."""
    hint = suggestions(selector, known)
    meant = ""
    if hint:
        meant = "did you mean " + (", ".join(hint[:-1]) + " or " + hint[-1]
                                   if len(hint) > 1 else hint[0]) + "? "
    return f"unknown {what}: {selector} ({meant}{LIST_HINT})"


def nearest(selected: Iterable[str], runnable: Iterable[str], n: int = 3) -> list[str]:
    """The case IDs that would run nearest to those ``selected`` (close spellings first,
    then the first that would run): the hint of a selection that plans nothing."""
    known = sorted(set(runnable))
    out: list[str] = []
    for s in selected:
        for m in difflib.get_close_matches(s, known, n=n, cutoff=0.4):
            if m not in out:
                out.append(m)
    out += [k for k in known if k not in out]
    return out[:n]


def all_rule_ids() -> list[str]:
    from conformance.checks import all_rules

    return sorted(all_rules())
