"""pytest options and fixtures of the interop matrix (``tox -e interop``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the conformance package of this checkout
sys.path.insert(0, str(HERE))

import matrix  # after the path set-up above

STARTED = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("interop", "the interop matrix")
    group.addoption("--update", action="store_true",
                    help="record the verdicts seen as the new baselines (review with git diff)")
    group.addoption("--install-only", action="store_true",
                    help="install the selected targets and run nothing (the items skip)")
    group.addoption("--matrix", metavar="DIR",
                    help="write the runs' target x rule matrix here at the end (report --merge; "
                         "default: the cache's matrix/ folder)")
    group.addoption("--cache", metavar="DIR",
                    help="the install and run cache (default: $ACP_INTEROP_CACHE, else "
                         "$XDG_CACHE_HOME/acp-conformance-interop)")


@pytest.fixture(scope="session")
def installer(pytestconfig: pytest.Config) -> matrix.Installer:
    """One installer per pytest process; installs are locked per target in the cache, so
    xdist workers that need the same target install it once."""
    return matrix.Installer(matrix.cache_root(pytestconfig.getoption("--cache")), verbose=False)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[STARTED] = time.time()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """One matrix of every run of this session (on the xdist controller, not the workers)."""
    config = session.config
    if hasattr(config, "workerinput") or config.getoption("--install-only") or \
            config.getoption("--collect-only"):
        return
    cache = matrix.cache_root(config.getoption("--cache"))
    dest = Path(config.getoption("--matrix") or cache / "matrix")
    line = matrix.write_matrix(cache, dest, config.stash.get(STARTED, time.time()))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
