"""Fuzzing past one process: any Hypothesis database by URL, workers, and nothing lost.

Everything runs through the real ``acp-conformance fuzz`` command line against real
fixture agents: a real Redis server (where ``redis-server`` can be had), a GitHub
artifact read from Hypothesis' own cache folder (no network), worker processes, and
a run stopped by SIGTERM while it shrinks against an agent that answers slowly.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from datetime import datetime, timezone
from importlib.util import find_spec
from pathlib import Path

import pytest
from conftest import REPO_ROOT, cli_env, load_json, run_cli

from conformance.transport.process import end_group

AGENTS = REPO_ROOT / "fixtures" / "agents"
REDIS_SERVER = shutil.which("redis-server")
REDIS_REASON = ("no redis-server binary (Debian: apt-get install redis-server; .ci/run "
                "installs it)")
REDIS_MODULE_REASON = "the redis package is not installed (pip install 'acp-conformance[redis]')"


def agent(name: str) -> str:
    return f"{sys.executable} {AGENTS / name}.py"


def regression_headers(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text("utf-8").split("\n", 1)[0])
            for p in sorted(folder.glob("*.jsonl"))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- 1. any database by URL --------------------------------------------------------------

def test_an_unreachable_redis_is_one_line_and_exit_2_before_any_target(tmp_path: Path) -> None:
    if find_spec("redis") is None:
        pytest.skip(REDIS_MODULE_REASON)
    marker = tmp_path / "started"
    target = f"{sys.executable} -c \"open('{marker}', 'w').close()\""
    proc = run_cli("fuzz", "--agent", target, "--out", str(tmp_path / "out"),
                   "--hypothesis-db", f"redis://127.0.0.1:{free_port()}/0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "cannot reach the database" in line and "Traceback" not in proc.stderr
    assert not marker.exists()  # no target started
    assert not (REPO_ROOT / "redis:").exists()  # never a folder named after the URL


def test_redis_without_the_extra_names_the_extra(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['redis'] = None; from conformance.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "fuzz", "--agent", agent("numeric_id"),
                           "--out", str(tmp_path / "out"), "--hypothesis-db",
                           "redis://127.0.0.1:6379/0"], capture_output=True, text=True,
                          env=cli_env(), cwd=tmp_path, timeout=60, check=False)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "pip install 'acp-conformance[redis]'" in line


def test_an_unknown_database_url_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli("fuzz", "--agent", agent("numeric_id"), "--out", str(tmp_path / "out"),
                   "--hypothesis-db", "ftp://example.invalid/db")
    assert proc.returncode == 2 and "unknown database URL" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_github_artifact_database_is_read_and_writes_go_to_a_local_folder(
        tmp_path: Path) -> None:
    """A nightly job's database, zipped as CI uploads it, read with ``github:`` from
    Hypothesis' artifact cache (fresh, so nothing is downloaded): its counterexample
    replays first; what the run finds goes to the local folder, never to the artifact."""
    nightly = tmp_path / "nightly-db"
    first = run_cli("fuzz", "--agent", agent("numeric_id"), "--protocol", "1", "--no-save",
                    "--out", str(tmp_path / "ci"), "--hypothesis-db", str(nightly),
                    "--max-examples", "8", "--seed", "1")
    assert first.returncode == 1, first.stdout + first.stderr
    out = tmp_path / "dev"
    cache = out / "hypothesis" / "github-artifacts" / "hypothesis-example-db"
    cache.mkdir(parents=True)
    stamp = datetime.now(timezone.utc).isoformat().replace(":", "_")
    with zipfile.ZipFile(cache / f"{stamp}.zip", "w") as zf:
        for path in sorted(nightly.rglob("*")):
            zf.write(path, path.relative_to(nightly).as_posix())
    before = sorted(p.name for p in nightly.rglob("*"))
    second = run_cli("fuzz", "--agent", agent("numeric_id"), "--protocol", "1", "--no-save",
                     "--out", str(out), "--hypothesis-db", "github:acme/agent",
                     "--max-examples", "1", "--seed", "2", "--json", str(tmp_path / "r.json"))
    assert second.returncode == 1, second.stdout + second.stderr
    assert "replayed 1 counterexample(s) from the example database first: 1 still failing" \
        in second.stdout, second.stdout
    local = out / "hypothesis" / "examples"
    assert any(p.is_file() for p in local.rglob("*")), "the local folder took the writes"
    assert sorted(p.name for p in nightly.rglob("*")) == before
    assert load_json(tmp_path / "r.json")["fuzz"]["database"] == "github:acme/agent"


def test_an_unreadable_github_artifact_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = cli_env()
    env["https_proxy"] = env["HTTPS_PROXY"] = f"http://127.0.0.1:{free_port()}"  # refused
    env.pop("GITHUB_TOKEN", None)
    proc = subprocess.run([sys.executable, "-m", "conformance", "fuzz", "--agent",
                           agent("numeric_id"), "--out", str(tmp_path / "out"),
                           "--hypothesis-db", "github:acme/agent/nightly-db"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
                          check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "cannot read the artifact 'nightly-db'" in line


# -- 2. a real Redis shared by two runs -----------------------------------------------------

@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    if REDIS_SERVER is None:
        pytest.skip(REDIS_REASON)
    if find_spec("redis") is None:
        pytest.skip(REDIS_MODULE_REASON)
    port = free_port()
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("redis-server did not start")
                time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}"
    finally:
        end_group(proc)


def test_two_fuzz_runs_share_a_real_redis(redis_url: str, tmp_path: Path) -> None:
    """The bug needs a session, a prompt and a load on a fresh process: one fuzz run
    finds it and stores it in Redis; a second run on the same Redis finds it in its first
    run (the stored counterexample replays first), while the same run on an empty Redis
    database does not find it."""
    target = agent("collision_after_load")

    def fuzz(db: int, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli("fuzz", "--agent", target, "--protocol", "1", "--no-save",
                       "--out", str(tmp_path / "out"), "--hypothesis-db",
                       f"{redis_url}/{db}", *args, timeout=300)

    first = fuzz(0, "--max-examples", "60", "--seed", "4", "--max-failures", "1")
    assert first.returncode == 1, first.stdout + first.stderr
    assert "MID-A-02/" in first.stdout
    second = fuzz(0, "--max-examples", "1", "--seed", "7")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "from the example database first: 1 still failing" in second.stdout, second.stdout
    assert "MID-A-02/" in second.stdout
    empty = fuzz(1, "--max-examples", "1", "--seed", "7")
    assert empty.returncode == 0, empty.stdout + empty.stderr
    assert "from the example database" not in empty.stdout


def pytest_fuzz(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest --acp-fuzz in a subprocess, in an empty folder (only the plugin's items)."""
    env = cli_env()
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin", "-p",
         "no:cacheprovider", "--rootdir", str(tmp_path), "-q", "--acp-fuzz", *args],
        check=False, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_the_plugin_shares_a_real_redis_with_fuzz(redis_url: str, tmp_path: Path) -> None:
    """``pytest --acp-fuzz --acp-hypothesis-db redis://...`` stores its shrunk
    counterexample in Redis; a ``fuzz`` run on the same URL replays it first."""
    work = tmp_path / "work"
    work.mkdir()
    proc = pytest_fuzz(work, "--acp-agent", agent("numeric_id"), "--acp-protocol", "1",
                       "--acp-hypothesis-db", f"{redis_url}/2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MID-S-01/type" in proc.stdout
    again = run_cli("fuzz", "--agent", agent("numeric_id"), "--protocol", "1", "--no-save",
                    "--out", str(tmp_path / "out"), "--hypothesis-db", f"{redis_url}/2",
                    "--max-examples", "1", "--seed", "3")
    assert "from the example database first: 1 still failing" in again.stdout, again.stdout
    closed = pytest_fuzz(work, "--acp-agent", agent("numeric_id"), "--acp-hypothesis-db",
                         f"redis://127.0.0.1:{free_port()}/0")
    assert closed.returncode == 4, closed.stdout + closed.stderr  # pytest's usage error
    assert "--acp-hypothesis-db" in closed.stderr and "cannot reach" in closed.stderr
    assert "Traceback" not in closed.stderr


# -- 3. workers -----------------------------------------------------------------------------

def test_two_workers_save_one_file_for_one_bug_found_twice(tmp_path: Path) -> None:
    regs = tmp_path / "regs"
    proc = run_cli("fuzz", "--agent", agent("numeric_id"), "--protocol", "1", "--workers", "2",
                   "--max-examples", "8", "--seed", "1", "--regressions", str(regs),
                   "--out", str(tmp_path / "out"), "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = [line for line in proc.stderr.splitlines() if line.startswith("[fuzz agent] worker")]
    assert len(found) == 2 and all("found MID-S-01/type (v1)" in x for x in found), proc.stderr
    assert proc.stderr.count("shrinking MID-S-01/type (v1): done") == 1  # shrunk once
    [header] = regression_headers(regs)  # saved once: the workers' unshrunk files replaced
    assert header["finding"]["requirement"] == "MID-S-01/type"  # type: ignore[index]
    assert "shrunk" not in header
    report = load_json(tmp_path / "r.json")
    assert report["fuzz"]["workers"] == 2 and report["fuzz"]["runs"] >= 8
    assert report["fuzz"]["seconds"] > 0  # the workers' own folder, without --hypothesis-db
    assert report["fuzz"]["database"].endswith("hypothesis/workers")
    assert [c["case"] for c in report["cases"] if c["case"].startswith("fuzz:")] == \
        [f"fuzz:{header['fingerprint']}@v1"]


def test_worker_seeds_and_shares_derive_from_the_run() -> None:
    from conformance.fuzz.workers import shares, worker_seed

    assert shares(8, 2) == [4, 4] and shares(7, 3) == [3, 2, 2] and shares(2, 4) == [1, 1]
    assert worker_seed(1, 0) == worker_seed(1, 0) != worker_seed(1, 1) != worker_seed(2, 1)


def test_workers_usage_errors(tmp_path: Path) -> None:
    bad = run_cli("fuzz", "--agent", agent("numeric_id"), "--workers", "0")
    assert bad.returncode == 2 and "--workers must be at least 1" in bad.stderr
    client = run_cli("fuzz", "--client-adapter", "x:y", "--workers", "2")
    assert client.returncode == 2 and "--workers fuzzes an agent" in client.stderr
    shrink = run_cli("fuzz", "--agent", agent("numeric_id"), "--shrink-budget", "0")
    assert shrink.returncode == 2 and "--shrink-budget" in shrink.stderr


# -- 4. nothing found is lost ---------------------------------------------------------------

def test_sigterm_while_shrinking_keeps_the_counterexample(tmp_path: Path) -> None:
    """Against an agent that answers each prompt after 2 s, the failing run is on
    disk (unshrunk) as soon as it is found; a SIGTERM while it shrinks leaves the
    smallest counterexample so far in the library, the rule printed and the reports."""
    regs, report = tmp_path / "regs", tmp_path / "r.json"
    env = cli_env()
    env["ACP_SLOW_SECONDS"] = "2"
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conformance", "fuzz", "--agent", agent("_slow_numeric_id"),
             "--protocol", "1", "--max-examples", "3", "--seed", "1", "--regressions",
             str(regs), "--out", str(tmp_path / "out"), "--json", str(report), "--no-color"],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=REPO_ROOT)
        try:
            deadline = time.monotonic() + 120
            while ("shrinking MID-S-01/type (v1): " not in log.read_text()
                   and time.monotonic() < deadline):
                time.sleep(0.05)  # shrinking started: its first replay takes 2 s at least
            assert "shrinking MID-S-01/type (v1)" in log.read_text(), log.read_text()
            [unshrunk] = regression_headers(regs)  # written the moment it was found
            assert unshrunk["shrunk"] is False
            proc.send_signal(signal.SIGTERM)
            stdout, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, stdout + stderr
    assert "Traceback" not in stderr
    assert "interrupted by SIGTERM" in stderr
    assert "FAIL MID-S-01/type (v1)" in stdout  # each broken rule printed
    [header] = regression_headers(regs)  # the smallest so far, in place of the unshrunk
    assert header["finding"]["requirement"] == "MID-S-01/type"  # type: ignore[index]
    assert header["shrunk"] is False  # stopped while it shrank, and says so
    assert "not shrunk to the end: the run was stopped before shrinking ended" in stdout
    assert len(header["steps"]) <= len(unshrunk["steps"])  # type: ignore[arg-type]
    data = load_json(report)
    assert data["summary"]["verdict"] == "interrupted" and data["fuzz"]["workers"] == 1
    assert data["interrupted"] == "SIGTERM"
    assert {r["requirement"] for r in data["results"] if r["outcome"] == "fail"} == \
        {"MID-S-01/type"}


def test_the_shrink_budget_bounds_shrinking(tmp_path: Path) -> None:
    env = cli_env()
    env["ACP_SLOW_SECONDS"] = "1"
    regs = tmp_path / "regs"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "fuzz", "--agent", agent("_slow_numeric_id"),
         "--protocol", "1", "--max-examples", "3", "--seed", "1", "--shrink-budget", "2",
         "--regressions", str(regs), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=180, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stopped at the shrink budget (2 s)" in proc.stdout
    assert time.monotonic() - started < 60
    [header] = regression_headers(regs)
    assert "shrunk" not in header


def test_sigterm_stops_the_workers_and_keeps_one_file(tmp_path: Path) -> None:
    """SIGTERM to a ``--workers 2`` run while the workers generate: each worker stops and
    reports what it holds, the run saves one file per broken rule (the workers' unshrunk
    files replaced), prints it, writes the report, and no agent process is left."""
    regs, report = tmp_path / "regs", tmp_path / "r.json"
    env, mark = cli_env(), str(tmp_path)
    env["ACP_SLOW_SECONDS"] = "1"
    env["ACP_TEST_MARK"] = mark  # inherited by the workers and their agents
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance", "fuzz", "--agent", agent("_slow_numeric_id"),
         "--protocol", "1", "--max-examples", "40", "--seed", "1", "--workers", "2",
         "--regressions", str(regs), "--out", str(tmp_path / "out"), "--json", str(report)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(regs.glob("*.jsonl")):
            time.sleep(0.1)  # a worker found it and stored it at once
        assert list(regs.glob("*.jsonl")), "no worker stored a failure"
        assert len(_marked(mark)) > 3  # the run, its workers and their agents: seen alive
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stdout + stderr
    assert "Traceback" not in stderr and "interrupted by SIGTERM" in stderr
    assert "FAIL MID-S-01/type (v1)" in stdout
    [header] = regression_headers(regs)
    assert header["finding"]["requirement"] == "MID-S-01/type"  # type: ignore[index]
    assert not [p for p in regs.iterdir() if not p.name.endswith(".jsonl")]
    data = load_json(report)
    assert data["fuzz"]["workers"] == 2 and data["summary"]["verdict"] == "interrupted"
    time.sleep(1)  # the workers' last retired agents are ended in the background
    assert not _marked(mark), "agent processes outlived the run"


def _marked(mark: str) -> list[int]:
    """Processes whose environment holds ``ACP_TEST_MARK=mark`` (this test's only)."""
    needle = f"ACP_TEST_MARK={mark}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
