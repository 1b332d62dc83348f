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
    """Shared helpers live in conftest.py, helpers.py or offline.py; a test module that
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
