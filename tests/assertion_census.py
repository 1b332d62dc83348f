"""Every assertion the tests made before a change, still made after it: a census.

    python tests/assertion_census.py REV            # tests/ at git revision REV vs the work tree
    python tests/assertion_census.py REV --verbose  # and where each assertion lives

An assertion is an ``assert`` statement (keyed by its condition, the message aside), a
call of a helper whose name starts with ``assert`` (``assert_check_agrees(...)``,
``outcome.assert_outcomes(...)``), an ``fnmatch_lines(...)`` match, or a
``pytest.raises(...)``/``pytest.fail(...)``. Each is keyed by its source text, with
whitespace normalised by the AST, over every Python file of ``tests/`` (test modules
and their helpers alike), so an assertion that moved from a test module into a helper,
or from one test into another, is still counted. The census fails (exit 1) when an
assertion text is made fewer times than before anywhere in tests/; test functions that
went away are listed with it, so a reader sees where their checks went.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _is_assertion_call(node: ast.Call) -> bool:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name.startswith("assert") or name == "fnmatch_lines":
        return True
    return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and func.value.id == "pytest" and name in ("raises", "fail"))


def census(files: dict[str, str]) -> tuple[Counter[str], dict[str, list[str]], set[str]]:
    """(assertion text -> how many times it is written, text -> where, test functions)."""
    counts: Counter[str] = Counter()
    where: dict[str, list[str]] = {}
    tests: set[str] = set()
    for name, source in sorted(files.items()):
        tree = ast.parse(source)
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                continue
            label = f"{name}::{getattr(func, 'name', '<module>')}"
            if isinstance(func, ast.FunctionDef) and func.name.startswith("test_"):
                tests.add(label)
            for node in _own_nodes(func):
                if isinstance(node, ast.Assert):
                    key = "assert " + ast.unparse(node.test)
                elif isinstance(node, ast.Call) and _is_assertion_call(node):
                    key = ast.unparse(node)
                else:
                    continue
                counts[key] += 1
                where.setdefault(key, []).append(label)
    return counts, where, tests


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a function (or module) that no nested function owns."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def files_at(rev: str) -> dict[str, str]:
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:tests"], cwd=REPO,
                           check=True, capture_output=True, text=True).stdout.split()
    return {n: subprocess.run(["git", "show", f"{rev}:tests/{n}"], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout
            for n in names if n.endswith(".py")}


def files_now() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((REPO / "tests").glob("*.py"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the git revision to compare against (e.g. main)")
    parser.add_argument("--verbose", action="store_true", help="where each changed one lives")
    ns = parser.parse_args(argv)
    before, where_before, tests_before = census(files_at(ns.rev))
    after, where_after, tests_after = census(files_now())
    lost = before - after
    gained = after - before
    moved = sorted(k for k in before if k in after
                   and sorted(where_before[k]) != sorted(where_after[k]))
    print(f"assertions written: {sum(before.values())} at {ns.rev}, {sum(after.values())} now; "
          f"{len(lost)} text(s) made fewer times, {len(gained)} new or more often, "
          f"{len(moved)} moved")
    for key in sorted(lost):
        print(f"LOST x{lost[key]}: {key[:160]}\n    was in {sorted(set(where_before[key]))}")
    if ns.verbose:
        for key in moved:
            was, now = set(where_before[key]), set(where_after[key])
            print(f"moved: {key[:120]}\n    from {sorted(was - now)} to {sorted(now - was)}")
        for key in sorted(gained):
            print(f"new x{gained[key]}: {key[:160]} in {sorted(set(where_after[key]))}")
    gone = sorted(tests_before - tests_after)
    for test in gone:
        print(f"test function gone: {test}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
