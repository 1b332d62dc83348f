"""Shared test helpers: where the repository and the shared schemas are, and how to run the CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def find_shared() -> Path | None:
    configured = os.environ.get("ACP_SHARED_DIR")
    candidate = Path(configured) if configured else REPO_ROOT.parent / "shared"
    return candidate if (candidate / "acp-schema").is_dir() else None


SHARED_REASON = ("the official ACP schemas were not found: set ACP_SHARED_DIR, or keep "
                 "shared/ beside the repository")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    found = find_shared()
    if found is None:
        pytest.skip(SHARED_REASON)
    return found


def pytest_configure(config: pytest.Config) -> None:
    """The checkout's modules compiled once, before any test: the tests start some thousands
    of interpreters (the command line, fixtures, the reference targets), and where
    ``PYTHONDONTWRITEBYTECODE`` is set (some CI images set it) none of them would keep its
    compiled modules, so every one would compile the package again. The controller compiles;
    an xdist worker finds it done. ``compileall`` writes whatever that variable says."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    for folder in ("conformance", "fixtures", "bench", "interop"):
        if (REPO_ROOT / folder).is_dir():
            compileall.compile_dir(REPO_ROOT / folder, quiet=2)
    rewrite_ahead(config)


def rewrite_ahead(config: pytest.Config) -> None:
    """pytest's rewritten modules (its assertion rewriting) cached once, before any test.
    pytest rewrites the asserts of every test module and of every module of an installed
    plugin's package (this one: all of ``conformance``, whose entry point registers the
    plugin), and keeps the result only where Python may write bytecode; where it may
    not, every xdist worker and every pytest the tests start rewrote the package again
    (about a second of CPU each). The cache is pytest's own (hash-checked pycs beside
    the source, which it reads whatever that variable says); where its internals differ
    from what this expects, nothing is written and pytest rewrites as before."""
    if config.getoption("assertmode", "rewrite") != "rewrite":
        return
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        for fn in sorted([*(REPO_ROOT / "tests").glob("*.py"),
                          *(REPO_ROOT / "conformance").rglob("*.py")]):
            pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc) is None and rewrite.try_makedirs(pyc.parent):
                source_hash, co = rewrite._rewrite_test(fn, config)
                rewrite._write_pyc(state, co, source_hash, pyc)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError, OSError,
            SyntaxError):
        return


#: The longest tests (each a minute or more of one worker), longest first, started before
#: the rest: xdist hands tests out in collection order (``--maxschedchunk 1``: one at a
#: time, to whichever worker is free), and one of these met last leaves the others idle.
LONGEST_FIRST = (
    "tests/test_stability.py::",
    "tests/test_docs_commands.py::test_every_sh_block_runs[docs/ci.md:",
    "tests/test_fuzz_model_side.py::test_passthrough_ids_are_found_shrunk_saved_and_replayed",
    "tests/test_fuzz_persistent.py::test_cross_session_fault_needs_persistent_mode",
    "tests/test_bench_smoke.py::test_acplint_comparison_floor_without_acplint",
)


def repo_pythonpath() -> str:
    """PYTHONPATH with the checkout first, as the command line and its targets get it."""
    return str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = repo_pythonpath()
    env.pop("NO_COLOR", None)
    return env


#: The commands that only read files and print or write reports: no target, no process, no
#: signal. :func:`run_cli` runs them in this interpreter (a fresh one costs more than most of
#: these commands). The entry point itself keeps real-process tests: ``--help`` and every
#: live run go through :func:`run_cli_process` (but for the fixture sweeps, which read only
#: reports and ask for ``in_process``), and tests/test_bad_input.py runs pure commands' bad
#: input in a real process too (one error line, exit 2, no traceback); ``verify``'s entry
#: point is run in a real process by tests/test_certify.py.
IN_PROCESS_COMMANDS = frozenset({"check", "list", "lint-cases", "show", "report", "verify"})


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120,
            in_process: bool = False) -> subprocess.CompletedProcess[str]:
    """The command line as a user runs it: a pure command (:data:`IN_PROCESS_COMMANDS`)
    through ``conformance.cli.main`` in this interpreter, anything that drives a target in a
    real process, unless ``in_process`` (a test that reads only the reports of a live run:
    its targets are still real processes, the command line's own start is saved). Either
    way the answer is a ``CompletedProcess`` with the exit code, stdout and stderr."""
    if in_process or (args and args[0] in IN_PROCESS_COMMANDS):
        return run_cli_in_process(*args, cwd=cwd)
    return run_cli_process(*args, cwd=cwd, timeout=timeout)


def run_cli_process(*args: str, cwd: Path | None = None,
                    timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real command line in a fresh interpreter (``python -m conformance``)."""
    return subprocess.run([sys.executable, "-m", "conformance", *args], check=False, capture_output=True,
                          text=True, cwd=cwd or REPO_ROOT, env=cli_env(), timeout=timeout)


def run_cli_in_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``conformance.cli.main(args)`` here, as :func:`run_cli_process` would run it: in
    ``cwd`` (the repository by default), without ``NO_COLOR``, stdout and stderr captured."""
    from conformance.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_cwd, no_color = os.getcwd(), os.environ.pop("NO_COLOR", None)
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = repo_pythonpath()  # as the targets of a process get it
    os.chdir(cwd or REPO_ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(old_cwd)
        if no_color is not None:
            os.environ["NO_COLOR"] = no_color
        if path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = path
    return subprocess.CompletedProcess([sys.executable, "-m", "conformance", *args], code,
                                       out.getvalue(), err.getvalue())


def cli_report(*args: str, tmp_path: Path, name: str = "report",
               timeout: float = 240, in_process: bool = False) -> tuple[int, dict[str, Any], str]:
    """The real command line with a JSON report: (exit code, the report or {} when none was
    written, stdout and stderr together); ``in_process`` as :func:`run_cli` says."""
    report = tmp_path / f"{name}.json"
    proc = run_cli(*args, "--json", str(report), "--no-color", timeout=timeout,
                   in_process=in_process)
    data = load_json(report) if report.exists() else {}
    return proc.returncode, data, proc.stdout + proc.stderr


def outcomes(report: dict[str, Any]) -> dict[str, set[str]]:
    """{outcome: {requirement, ...}} of a JSON report."""
    out: dict[str, set[str]] = {}
    for r in report["results"]:
        out.setdefault(r["outcome"], set()).add(r["requirement"])
    return out


def load_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


V1_ONLY = """\
import sys
sys.path.insert(0, {root!r})
from conformance.reference.agent import ReferenceAgent, main


class V1Only(ReferenceAgent):
    def handle_initialize(self, request_id, params):
        return super().handle_initialize(request_id, dict(params, protocolVersion=1))


sys.exit(main(agent_class=V1Only))
"""


def v1_only_agent(folder: Path) -> Path:
    """The reference agent, except that it answers every initialize with protocolVersion 1."""
    script = folder / "v1_only.py"
    script.write_text(V1_ONLY.format(root=str(REPO_ROOT)), encoding="utf-8")
    return script


#: The slow end-to-end modules: every fixture against the suite, the fuzzers and their
#: campaigns, pytest-xdist, the hostile targets, the benchmarks. Each of their tests is
#: marked ``slow``, so ``pytest -m "not slow"`` is a quick subset (README.md says how long
#: each takes); tests elsewhere that run long carry the mark themselves.
SLOW_MODULES = frozenset({
    "test_agent_suite.py", "test_client_fixtures.py", "test_hostile_agents.py",
    "test_hostile_clients.py", "test_campaigns.py", "test_fuzz_agents.py",
    "test_fuzz_clients.py", "test_fuzz_model_side.py", "test_plugin_xdist.py",
    "test_bench_smoke.py", "test_interop_targets.py",
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow modules' tests marked ``slow``; :data:`LONGEST_FIRST` first, every other test
    in its place (a stable sort)."""
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)

    def rank(item: pytest.Item) -> int:
        return next((i for i, p in enumerate(LONGEST_FIRST) if item.nodeid.startswith(p)),
                    len(LONGEST_FIRST))

    items.sort(key=rank)


@pytest.fixture
def plugin_pytest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Any:
    """pytest in a subprocess with only the suite's plugin (the tests that use it load
    ``pytester``): other installed plugins (hypothesis's takes seconds to import) stay out,
    and the entry point is tested on its own (tests/test_plugin.py)."""
    root = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)

    def go(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess("-p", "conformance.pytest_plugin",
                                             "-p", "no:cacheprovider", *args, timeout=300)
    return go
