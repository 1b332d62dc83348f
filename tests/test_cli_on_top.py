"""The command line sits on top: nothing below it imports it, and the engines take typed
settings, not parsed options (ARCHITECTURE.md, the direction of imports)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "conformance"
SHELLS = {PACKAGE / "cli", PACKAGE / "__main__.py"}  # the command line itself


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path) -> list[tuple[int, str]]:
    """Every module a file imports (at any depth, relative imports resolved), with its line."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def imports_of_cli(path: Path, root: Path) -> list[str]:
    """``file:line module`` for each import of ``conformance.cli`` (or a module in it)."""
    return [f"{path.relative_to(root)}:{line} {mod}" for line, mod in imported(path, root)
            if mod == "conformance.cli" or mod.startswith("conformance.cli.")]


def below_the_cli(root: Path) -> list[Path]:
    shells = {root / p.relative_to(REPO_ROOT) for p in SHELLS}
    return [p for p in sorted((root / "conformance").rglob("*.py"))
            if not any(p == s or s in p.parents for s in shells)]


def test_nothing_below_the_cli_imports_it() -> None:
    files = below_the_cli(REPO_ROOT)
    assert PACKAGE / "fuzz" / "client_fuzz.py" in files and PACKAGE / "runner.py" in files
    found = [hit for f in files for hit in imports_of_cli(f, REPO_ROOT)]
    assert found == [], "imports of the command line from below it:\n" + "\n".join(found)


def test_the_check_finds_every_form_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "conformance"
    (pkg / "fuzz").mkdir(parents=True)
    (pkg / "cli").mkdir()
    (pkg / "cli" / "__init__.py").write_text("from conformance.fuzz import engine\n")
    (pkg / "client.py").write_text("import conformance.clients\n")
    (pkg / "fuzz" / "engine.py").write_text(
        "import conformance.client\n"  # a name that only starts like the CLI's
        "from conformance import cli\n"
        "def f():\n"
        "    from conformance.cli.options import Parser\n"
        "    from ..cli import options\n"
        "    from .. import cli as shell\n")
    files = below_the_cli(tmp_path)
    assert pkg / "cli" / "__init__.py" not in files  # the CLI may import what is below it
    hits = [hit for f in files for hit in imports_of_cli(f, tmp_path)]
    assert hits == [
        "conformance/fuzz/engine.py:2 conformance.cli",
        "conformance/fuzz/engine.py:4 conformance.cli.options",
        "conformance/fuzz/engine.py:4 conformance.cli.options.Parser",
        "conformance/fuzz/engine.py:5 conformance.cli",
        "conformance/fuzz/engine.py:5 conformance.cli.options",
        "conformance/fuzz/engine.py:6 conformance.cli",
    ], hits


def test_the_fuzz_engines_take_typed_settings() -> None:
    parsing = [f"{f.relative_to(REPO_ROOT)}:{line}" for f in sorted((PACKAGE / "fuzz").glob("*.py"))
               for line, mod in imported(f, REPO_ROOT) if mod == "argparse"]
    assert parsing == [], "the fuzz engines parse no command line: " + ", ".join(parsing)
