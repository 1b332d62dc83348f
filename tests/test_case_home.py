"""Cases played at once cannot make the target race itself: each case's target gets its
own copy of the home and XDG folders the user gave, and its own TMPDIR.

``fixtures/harness/rewrites_home_config.py`` rewrites a config file in its home at
start-up, not atomically, and exits when it finds the file half-written. A control shows
the fixture does race a shared home (a second process started while the first rewrites
exits 1); the suite at ``-j 4`` with ``--agent-env HOME=DIR`` is clean with it, and the
user's folder is left as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO_ROOT, cli_env, run_cli

from conformance.transport.home import XDG, case_env

FIXTURE = REPO_ROOT / "fixtures" / "harness" / "rewrites_home_config.py"
CONFIG = Path(".rewrites-home-config") / "config.json"


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / CONFIG).parent.mkdir(parents=True)
    (home / CONFIG).write_text(json.dumps({"starts": 0, "user": "kept"}), "utf-8")
    return home


def _whole(path: Path) -> bool:
    try:
        json.loads(path.read_text("utf-8"))
    except ValueError:
        return False
    return True


def test_the_fixture_races_a_shared_home(tmp_path: Path) -> None:
    """The control: a second start while the first rewrites finds it half-written, exits 1."""
    home = _home(tmp_path)
    env = dict(cli_env(), HOME=str(home), ACP_FIXTURE_REWRITE_PAUSE="3")
    first = subprocess.Popen([sys.executable, str(FIXTURE)], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        until = time.monotonic() + 60
        while _whole(home / CONFIG):  # until the first is half-way through its rewrite
            assert time.monotonic() < until and first.poll() is None, "never began rewriting"
            time.sleep(0.01)
        second = subprocess.run([sys.executable, str(FIXTURE)], input="", capture_output=True,
                                text=True, env=env, timeout=60, check=False)
        assert second.returncode == 1 and "half-written" in second.stderr
    finally:
        first.communicate(timeout=60)  # its stdin closes: it ends
    assert first.returncode == 0
    assert json.loads((home / CONFIG).read_text("utf-8"))["starts"] == 1


def test_concurrent_cases_each_get_their_own_home(tmp_path: Path) -> None:
    home = _home(tmp_path)
    before = (home / CONFIG).read_text("utf-8")
    report = tmp_path / "r.json"
    proc = run_cli("--agent", f"{sys.executable} {FIXTURE}", "--agent-env", f"HOME={home}",
                   "--agent-env", "ACP_FIXTURE_REWRITE_PAUSE=0.5", "--protocol", "1",
                   "-j", "4", "--json", str(report), "--no-color", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text("utf-8"))
    assert len(data["cases"]) >= 6  # enough cases to start together at -j 4
    bad = [(r["case"], r["requirement"], r["outcome"]) for r in data["results"]
           if r["outcome"] in ("fail", "warn")]
    assert bad == []
    assert "half-written" not in json.dumps(data)
    assert (home / CONFIG).read_text("utf-8") == before  # the user's folder is not written


def test_case_env_copies_what_the_user_gave(tmp_path: Path) -> None:
    home = _home(tmp_path)
    data = tmp_path / "data"
    (data / "app").mkdir(parents=True)
    (data / "app" / "db").write_text("1", "utf-8")
    given = {"HOME": str(home), "XDG_DATA_HOME": str(data),
             "XDG_CONFIG_HOME": str(home / ".cfg"), "OTHER": "x"}
    a, b = case_env(given, tmp_path / "a"), case_env(given, tmp_path / "b")
    assert a["HOME"] != b["HOME"] and a["OTHER"] == "x"
    assert json.loads((Path(a["HOME"]) / CONFIG).read_text())["user"] == "kept"
    assert (Path(a["XDG_DATA_HOME"]) / "app" / "db").read_text() == "1"
    assert a["XDG_CONFIG_HOME"] == str(Path(a["HOME"]) / ".cfg")  # inside HOME: in its copy
    assert a["XDG_STATE_HOME"] == str(Path(a["HOME"]) / XDG["XDG_STATE_HOME"])
    assert Path(a["TMPDIR"]).is_dir() and a["TMPDIR"] != b["TMPDIR"]
    (Path(a["HOME"]) / CONFIG).write_text("{", "utf-8")  # a case's writes stay in its copy
    assert _whole(Path(b["HOME"]) / CONFIG) and _whole(home / CONFIG)


def test_without_a_home_the_users_own_is_left_alone(tmp_path: Path) -> None:
    out = case_env({"OTHER": "x"}, tmp_path / "a")
    assert "HOME" not in out and not any(name in out for name in XDG)
    assert Path(out["TMPDIR"]).is_dir()
    assert os.environ.get("HOME") != out["TMPDIR"]
