"""House rules of the repository itself, read from its files: the tests share one set of
helpers (no test module imports another), and ``.ci/run`` holds the package to
``mypy --strict`` with a pinned mypy, as it holds the tree to a pinned ruff."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def imported_modules(source: str) -> set[str]:
    """The top-level names of every module ``source`` imports (anywhere in it)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_the_import_reader_sees_every_form() -> None:
    """The reader sees a test module imported at the top, in a function, or as tests.X."""
    source = ("from test_a import x\nimport test_b\ndef f():\n    from tests.test_c import y\n"
              "    from tests.conftest import z\n")
    assert imported_modules(source) >= {"test_a", "test_b", "tests.test_c", "tests.conftest"}


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in conftest.py, helpers.py, wire.py or offline.py; a test module that
    imports another runs that module's imports (and its module-level work) twice, and
    couples two files that are edited apart. Nor does anything import conftest by a
    second name (``tests.conftest``: a second copy of the module)."""
    offenders = []
    for path in sorted(TESTS.glob("*.py")):
        for name in imported_modules(path.read_text(encoding="utf-8")):
            last = name.rpartition(".")[2]
            if last.startswith("test_") or name.startswith("tests."):
                offenders.append(f"{path.name} imports {name}")
    assert not offenders, offenders


def test_ci_runs_mypy_strict_with_a_pinned_version() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    steps = [line for line in ci.splitlines() if not line.lstrip().startswith("#")]
    assert any(re.search(r"'mypy==\d+\.\d+(\.\d+)?'", line) for line in steps), "mypy not pinned"
    assert any(line.strip() == "mypy" or line.strip().startswith("mypy ") for line in steps)
    for stubs in ("types-PyYAML", "types-jsonschema", "types-pexpect"):
        assert re.search(rf"'{stubs}==[\d.]+'", ci), stubs
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib on 3.10
    section = pyproject.split("[tool.mypy]", 1)[1].split("\n[", 1)[0]
    assert re.search(r"^strict = true$", section, re.MULTILINE), section
    assert re.search(r'^packages = \["conformance"\]$', section, re.MULTILINE), section


PACKAGE = REPO / "conformance"
# A package's ``__init__`` is its front door (``from conformance.transport import
# TargetProcess``): its ``__all__`` may name what its modules define. No plain module may:
# a broken fixture takes ``ReferenceAgent`` from ``reference/agent.py`` and the session,
# turn and wire names from the modules that define them (fixtures/agents/README.md).


def defined_names(tree: ast.Module) -> set[str]:
    """The names a module binds itself, at its top level or under an ``if``/``try``
    there: functions, classes and assignments (not imports)."""
    names: set[str] = set()
    for node in tree.body:
        nodes = list(ast.walk(node)) if isinstance(node, (ast.If, ast.Try)) else [node]
        for n in nodes:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                names.update(m.id for t in targets for m in ast.walk(t) if isinstance(m, ast.Name))
    return names


def exported_names(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def test_the_export_reader_tells_a_definition_from_an_import() -> None:
    tree = ast.parse("from x import y\nimport z\ndef f(): pass\nclass C: pass\nK = 1\n"
                     "try:\n    G = 2\nexcept ImportError:\n    G = 3\n"
                     "__all__ = ['f', 'C', 'K', 'G', 'y', 'z']\n")
    assert defined_names(tree) >= {"f", "C", "K", "G"}
    assert [n for n in exported_names(tree) if n not in defined_names(tree)] == ["y", "z"]


def test_no_module_exports_a_name_it_does_not_define() -> None:
    """A name lives in one module, and callers import it from there: a module that lists
    an imported name in ``__all__`` is a second address for it (a shim), so a move leaves
    callers on the old road. Unused imports kept for callers are caught by ruff (F401)."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        foreign = [n for n in exported_names(tree) if n not in defined_names(tree)]
        if foreign:
            offenders.append(f"{rel}: {foreign}")
    assert not offenders, offenders


def plain_modules() -> dict[str, ast.Module]:
    """Every module of the package that is not a package's ``__init__``, by dotted name."""
    return {".".join(p.relative_to(REPO).with_suffix("").parts): ast.parse(
                p.read_text(encoding="utf-8"))
            for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__init__.py"}


def taken_through(source: str, modules: dict[str, ast.Module], packages: set[str]) -> list[str]:
    """Each ``from M import N`` of ``source`` that takes ``N`` from a plain module ``M``
    (of ``modules``) that does not define it: through a module that only imported it.
    ``packages``: the dotted names of the package's packages (``from pkg import module``
    takes a module, not a name)."""
    defined = {m: defined_names(tree) for m, tree in modules.items()}
    return [f"{node.lineno}: from {node.module} import {a.name}"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and not node.level and node.module in defined
            for a in node.names
            if a.name not in defined[node.module]
            and f"{node.module}.{a.name}" not in modules | dict.fromkeys(packages)]


def test_the_import_reader_finds_a_name_taken_through_another_module() -> None:
    modules = {"conformance.reference.wire": ast.parse("def text_block(t): ...\n"),
               "conformance.reference.agent": ast.parse(
                   "from conformance.reference.wire import text_block\n"
                   "class ReferenceAgent: ...\n")}
    shim = "from conformance.reference.agent import ReferenceAgent, text_block\n"
    assert taken_through(shim, modules, set()) == [
        "1: from conformance.reference.agent import text_block"]
    direct = ("from conformance.reference.agent import ReferenceAgent\n"
              "from conformance.reference.wire import text_block\n"
              "from conformance.transport import TargetProcess\n")  # a front door
    assert taken_through(direct, modules, set()) == []


def test_no_name_is_taken_through_a_module_that_does_not_define_it() -> None:
    """The package, the tests, the benchmarks, the fixtures and the interop harnesses
    take each name from the module that defines it (or from a package's front door)."""
    modules = plain_modules()
    packages = {".".join(p.parent.relative_to(REPO).parts) for p in PACKAGE.rglob("__init__.py")}
    found = [f"{path.relative_to(REPO).as_posix()}:{line}"
             for folder in ("conformance", "tests", "bench", "fixtures", "interop")
             for path in sorted((REPO / folder).rglob("*.py"))
             for line in taken_through(path.read_text(encoding="utf-8"), modules, packages)]
    assert found == []
