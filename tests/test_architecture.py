"""The direction of imports (ARCHITECTURE.md), read from the code itself.

Grading is pure: nothing in ``conformance/checks/`` reaches the process side, even
through another module, and the checkers import each other in one direction only
(``checks/base.py`` knows no checker; the package registers them). The command line
sits on top: nothing below it imports it, and the fuzz engines take typed settings,
not parsed options.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "conformance"
PROCESS_SIDE = ("conformance.transport", "conformance.agent", "conformance.agent.runner",
                "conformance.client", "conformance.fuzz", "conformance.modelserver",
                "conformance.reference", "conformance.cli", "conformance.pytest_plugin",
                "conformance.progress", "conformance.proxy", "conformance.roles")
GRADING = "conformance.checks"
CLI = ("conformance.cli",)
SHELLS = ("conformance.cli", "conformance.__main__")  # the command line itself


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, module: str, *, is_package: bool = False,
               loaded: bool = False) -> set[str]:
    """Every conformance module ``source`` (the text of ``module``) imports, at the top,
    inside a function or under ``TYPE_CHECKING``, absolute or relative. With ``loaded``,
    each import read as the one module it loads, and only modules of the package (see
    :func:`module_imports_in`)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and loaded:
            base = from_base(node, package)
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                         for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, package)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # "from pkg import module"
    if loaded:
        return {m for m in found if m in MODULES and m != module}
    return {m for m in found if m == "conformance" or m.startswith("conformance.")
            or m == "argparse"}


def from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` reads from, a relative one resolved in ``package``."""
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        anchor = parts[: len(parts) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return base


def imports_of(path: Path) -> set[str]:
    return imports_in(path.read_text(encoding="utf-8"), module_name(path),
                      is_package=path.name == "__init__.py")


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
IMPORTS = {name: {m for m in imports_of(path) if m in MODULES} for name, path in MODULES.items()}


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def reachable(start: str) -> dict[str, str]:
    """Every module ``start`` imports directly or through others: {module: the path to it}.

    Importing ``a.b`` runs ``a/__init__.py`` too, so a module's package is reached with it."""
    paths = {start: start}
    todo = [start]
    while todo:
        current = todo.pop()
        parents = {current.rpartition(".")[0]} & set(MODULES)
        for nxt in sorted(IMPORTS[current] | parents):
            if nxt not in paths and nxt != "conformance":
                paths[nxt] = f"{paths[current]} -> {nxt}"
                todo.append(nxt)
    return paths


def test_the_import_reader_sees_relative_function_level_and_from_imports() -> None:
    source = ("from . import timeline\n"
              "from ..results import Outcome\n"
              "import json\n"
              "def f():\n"
              "    from conformance.client import observe\n"
              "    import conformance.agent.runner\n")
    assert imports_in(source, "conformance.checks.base") == {
        "conformance.checks", "conformance.checks.timeline", "conformance.results",
        "conformance.results.Outcome", "conformance.client", "conformance.client.observe",
        "conformance.agent.runner"}
    assert imports_in("from . import wire\n", "conformance.checks", is_package=True) == {
        "conformance.checks", "conformance.checks.wire"}
    # Every form of importing the CLI, and a name that only starts like it.
    engine = ("import conformance.client\n"
              "from conformance import cli\n"
              "def f():\n"
              "    from conformance.cli.options import Parser\n"
              "    from ..cli import options\n"
              "    from .. import cli as shell\n")
    assert {m for m in imports_in(engine, "conformance.fuzz.engine") if within(m, CLI)} == {
        "conformance.cli", "conformance.cli.options", "conformance.cli.options.Parser"}
    # Read from the tree: a top-level import and one inside a function.
    assert "conformance.checks.base" in IMPORTS["conformance.checks.identity"]
    assert "conformance.checks.timeline" in IMPORTS["conformance.checks.base"]


def test_reachability_finds_the_process_side_where_it_is() -> None:
    """The check below can fail: the runner reaches the transport, through the driver too."""
    paths = reachable("conformance.agent.runner")
    assert "conformance.transport" in paths
    assert "conformance.checks.timeline" in paths  # through the package of checks
    assert paths["conformance.agent.runner"] == "conformance.agent.runner"


@pytest.mark.parametrize("name", [m for m in MODULES if within(m, (GRADING,))])
def test_grading_never_reaches_the_process_side(name: str) -> None:
    bad = {m: how for m, how in reachable(name).items() if within(m, PROCESS_SIDE)}
    assert not bad, "\n".join(bad.values())


def test_checks_base_knows_no_checker_and_grading_has_no_import_circle() -> None:
    assert {m for m in IMPORTS["conformance.checks.base"] if within(m, (GRADING,))} <= {
        GRADING, "conformance.checks.timeline", "conformance.checks.events"}
    # Between the modules of the package (its __init__ registers them all, on top).
    checks = {m for m in MODULES if within(m, (GRADING,)) and m != GRADING}
    graph = {m: IMPORTS[m] & checks for m in checks}
    for start in sorted(checks):
        path = {start: start}
        todo = [start]
        while todo:
            current = todo.pop()
            for nxt in sorted(graph[current]):
                assert nxt != start, f"import circle: {path[current]} -> {start}"
                if nxt not in path:
                    path[nxt] = f"{path[current]} -> {nxt}"
                    todo.append(nxt)


@pytest.mark.parametrize("name", [m for m in MODULES if not within(m, SHELLS)])
def test_nothing_below_the_cli_imports_it(name: str) -> None:
    assert not {m for m in imports_of(MODULES[name]) if within(m, CLI)}


def test_the_fuzz_engines_take_typed_settings() -> None:
    parsing = [m for m in MODULES if within(m, ("conformance.fuzz",))
               and "argparse" in imports_of(MODULES[m])]
    assert parsing == [], "the fuzz engines parse no command line: " + ", ".join(parsing)


def room_of(name: str) -> str:
    """The room a module lives in: a top-level module, or a top-level package."""
    return ".".join(name.split(".")[:2])


def room_circles() -> list[str]:
    """Every import between two rooms that closes a circle of rooms, with the module
    imports that make it (an arrow back up)."""
    edges: dict[str, dict[str, list[str]]] = {}
    for name, imported in IMPORTS.items():
        for other in imported:
            a, b = room_of(name), room_of(other)
            if a != b and b != "conformance":
                edges.setdefault(a, {}).setdefault(b, []).append(f"{name} -> {other}")
    out = []
    for a, targets in sorted(edges.items()):
        for b, why in sorted(targets.items()):
            seen, todo = {b}, [b]
            while todo:
                current = todo.pop()
                if a in edges.get(current, {}):
                    out.append(f"{a} -> {b} ({why[0]}) and back")
                    break
                for nxt in edges.get(current, {}):
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
    return out


def test_rooms_import_one_way() -> None:
    """No arrow back up: the package's rooms (top-level modules and packages) form no
    circle of imports, so each stands above everything it imports."""
    assert room_circles() == []


def module_imports_in(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """The conformance modules ``source`` (the text of ``module``) imports, each import
    read as the module it loads: ``from conformance.checks import events`` is the module
    ``conformance.checks.events`` (its package is already loaded, not imported for a
    name), ``from conformance.checks import Options`` the package ``conformance.checks``."""
    return imports_in(source, module, is_package=is_package, loaded=True)


def module_circles(imports: dict[str, set[str]]) -> list[str]:
    """Every circle of imports between the modules of one room (``a -> b -> a``), each
    once, as the path that closes it."""
    out: dict[frozenset[str], str] = {}
    for start in sorted(imports):
        room = room_of(start)
        path = {start: start}
        todo = [start]
        while todo:
            current = todo.pop()
            for nxt in sorted(imports.get(current, ())):
                if room_of(nxt) != room:
                    continue
                if nxt == start:
                    circle = f"{path[current]} -> {start}"
                    out.setdefault(frozenset(circle.split(" -> ")), circle)
                elif nxt not in path:
                    path[nxt] = f"{path[current]} -> {nxt}"
                    todo.append(nxt)
    return sorted(out.values())


def test_the_module_reader_finds_a_circle_inside_a_room() -> None:
    """The check below can fail: two modules of one room that import each other (one of
    them inside a function) are a circle; a module that imports its sibling through the
    package (``from conformance.certify import badge``) is read as importing the sibling,
    and importing a name of the package's ``__init__`` as importing the package."""
    assert module_imports_in("from conformance.certify import badge, BundleError\n",
                             "conformance.certify.bundle") == {
        "conformance.certify.badge", "conformance.certify"}
    assert module_imports_in("from . import events as t\n", "conformance.checks.base") == {
        "conformance.checks.events"}
    made_up = {"conformance.certify.badge": {"conformance.certify.bundle"},
               "conformance.certify.bundle": {"conformance.certify.badge",
                                              "conformance.results"},
               "conformance.results": set()}
    assert module_circles(made_up) == [
        "conformance.certify.badge -> conformance.certify.bundle -> conformance.certify.badge"]
    assert module_circles({**made_up, "conformance.certify.badge": set()}) == []


def test_modules_inside_a_room_import_one_way() -> None:
    """No circle between the modules of one room either (a function-local import
    counts): each fact lives in the one module that owns it, and the others import it."""
    imports = {name: module_imports_in(path.read_text(encoding="utf-8"), name,
                                       is_package=path.name == "__init__.py")
               for name, path in MODULES.items()}
    assert module_circles(imports) == []

PURE_GRADING = "conformance.grading"  # the one grading of a recorded case


def test_the_grading_of_a_recorded_case_never_reaches_the_process_side() -> None:
    """``check`` grades through it; it imports nothing of processes, even through another
    module. And ``check`` itself imports no process package."""
    bad = {m: how for m, how in reachable(PURE_GRADING).items() if within(m, PROCESS_SIDE)}
    assert not bad, "\n".join(bad.values())
    check = {m for m in IMPORTS["conformance.cli.check"] if within(m, PROCESS_SIDE)}
    assert check <= {"conformance.cli", "conformance.cli.options", "conformance.cli.output"}


def _calls(pattern: str) -> dict[str, list[int]]:
    """The modules whose code calls ``pattern`` (a regex), with the line numbers."""
    import re

    found: dict[str, list[int]] = {}
    rx = re.compile(pattern)
    for name, path in MODULES.items():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if rx.search(code) and not code.lstrip().startswith(("def ", "class ")):
                found.setdefault(name, []).append(n)
    return found


def test_one_suite_loop_and_one_grading_of_a_recorded_case() -> None:
    """One run engine: the plan, the not-run shortcut, the signals and the concurrent play
    are the engine's (``conformance/engine.py``, and ``parallel.py`` under it); no role
    or shell writes its own loop. One grading: the checkers' ``grade()`` is called only
    by the grading of a recorded case (everyone else calls that)."""
    loops = _calls(r"\bShortcut\(|\bplay_concurrently\(|(?<![.\w])Signals\(|\brun_plan\b")
    assert set(loops) == {"conformance.engine"}, loops
    grading = _calls(r"(?<![.\w])grade\(")
    assert set(grading) == {PURE_GRADING}, grading
    # The pattern finds what it is for: a bare call, not a method or a longer name.
    import re

    rx = re.compile(r"(?<![.\w])grade\(")
    assert rx.search("x = grade(entries)") and rx.search("[f for f in grade(e)]")
    assert not rx.search("self.grade(x)") and not rx.search("grade_entries(x)")


def test_the_architecture_map_fits_one_screen() -> None:
    """ARCHITECTURE.md is a map, not a manual (docs/ has the detail): one screen."""
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert len(text.split()) <= 500 and len(text.splitlines()) <= 50
    for room in ("engine.py", "grading.py", "agent/", "client/", "proxy/", "checks/"):
        assert room in text


def map_floors() -> dict[str, int]:
    """The floors of ARCHITECTURE.md's map, read from its first code block: each room
    (``engine.py``, ``checks/``) and its floor, 0 at the ground and higher upwards."""
    import re

    block = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8").split("```")[1]
    rows: list[list[str]] = []
    for line in block.strip("\n").splitlines():
        if not line.startswith(" "):
            rows.append([])
            line = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
        line = re.sub(r"\([^)]*\)?", "", line)  # remarks in brackets name no room
        rows[-1] += re.findall(r"(?<![\w./])([a-z_]+(?:\.py|/))", line)
    return {room: len(rows) - 1 - i for i, names in enumerate(rows) for room in names}


def map_name(room: str) -> str:
    short = room.split(".", 1)[1]
    return f"{short}/" if (PACKAGE / short).is_dir() else f"{short}.py"


def test_the_map_shows_every_room_on_the_floor_it_is_on() -> None:
    """Every room of the package is on one floor of ARCHITECTURE.md's map, and no room
    imports a room on a floor above its own: the map is the house as it is."""
    floors = map_floors()
    assert floors["cli/"] > floors["engine.py"] > floors["transcript.py"] == 0
    rooms = {room_of(name) for name in MODULES} - {"conformance"}
    assert sorted(map_name(r) for r in rooms if map_name(r) not in floors) == []
    assert sorted(set(floors) - {map_name(r) for r in rooms} - {"data/"}) == []
    up = sorted({f"{room_of(name)} -> {room_of(other)} ({name} -> {other})"
                 for name, imported in IMPORTS.items() for other in imported
                 if room_of(other) not in (room_of(name), "conformance")
                 and room_of(name) != "conformance"
                 and floors[map_name(room_of(other))] > floors[map_name(room_of(name))]})
    assert up == []


LONG_MODULE = 450  # lines; a longer module says why on its first line ("# long: ...")


def test_no_long_module_without_its_reason() -> None:
    unexplained = []
    for name, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > LONG_MODULE and not (lines and lines[0].startswith("# long: ")):
            unexplained.append(f"{name} ({len(lines)} lines)")
    assert unexplained == []
