"""Bounded runs: a target that fails the same way everywhere costs one fault per protocol
version, not one per case; ``--deadline`` bounds the whole run; the model server keeps
a client's broken connection off the console.

Each run goes through the real command line against a fixture of
``fixtures/hostile/agents`` with the whole suite over v1 and v2 and ``--timeout 5``,
as a new user would try it: it must end within ``2 x --timeout + 15 s`` per protocol
version, report the fault with its evidence, say why the other cases did not run,
write its reports and leave no process behind.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import Run, agent_command, group_alive, run_cli

pytest_plugins = ["pytester"]

TIMEOUT = 5.0
BOUND = 2 * (2 * TIMEOUT + 15)  # per protocol version, two versions


def run_suite(name: str, workdir: Path, *extra: str, env: dict[str, str] | None = None) -> Run:
    """The whole suite (every case, v1 and v2) against a hostile agent, serially."""
    return run_cli(["--agent", agent_command(name), "--protocol", "both",
                    "--timeout", str(TIMEOUT), "--json", str(workdir / "report.json"),
                    "--junit", str(workdir / "report.xml"),
                    "--markdown", str(workdir / "report.md"),
                    "--transcripts", str(workdir / "transcripts"), "--no-color", "-j", "1",
                    *extra], workdir, env=env)


def assert_clean(run: Run) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    assert run.report is not None, run.stderr
    ET.parse(run.workdir / "report.xml")
    assert (run.workdir / "report.md").is_file()
    pgids = run.pgids()
    assert pgids, "no target was started"
    for pgid in pgids:
        assert not group_alive(pgid), f"process group {pgid} survived the run"


def cases_by_note(report: dict[str, Any]) -> dict[str, str]:
    return {c["case"]: c["note"] for c in report["cases"]}


@pytest.mark.parametrize("name, requirement, fault", [
    ("silent_after_prompt", "TARGET/hang", "went silent at"),
    ("unmatched_ids", "TARGET/unmatched-response", "did not answer the v"),
    ("huge_line", "MID-S-06/framing", "did not answer the v"),
    ("huge_line_at_prompt", "MID-S-06/framing", "went silent at"),
    ("stream_forever", "TARGET/hang", "flooded past the recording cap at"),
    ("crash_mid_stream", "TARGET/exit", "exited at"),
])
def test_a_fault_in_every_case_costs_one_or_two_cases_per_version(
        tmp_path: Path, name: str, requirement: str, fault: str) -> None:
    run = run_suite(name, tmp_path)
    assert run.returncode == 1, run.stderr
    assert run.elapsed < BOUND, f"run took {run.elapsed:.1f} s (bound {BOUND:.0f} s)"
    assert_clean(run)
    assert run.report is not None
    assert [r for r in run.report["results"]
            if r["requirement"] == requirement and r["outcome"] == "fail"], requirement
    notes = cases_by_note(run.report)
    for protocol in (1, 2):
        ran = [c for c, n in notes.items() if c.endswith(f"@v{protocol}")
               and not n.startswith("not run:")]
        skipped = [c for c, n in notes.items() if c.endswith(f"@v{protocol}")
                   and n.startswith("not run:")]
        assert 1 <= len(ran) <= 2 and skipped, (protocol, notes)
        said = {notes[c] for c in skipped}
        assert len(said) == 1, said
        [why] = said
        assert f"the target {fault}" in why or fault in why, why
        assert all(c in why for c in ran), (why, ran)  # names the cases that showed it
        for r in run.report["results"]:  # never counted as passed
            if r["case"] in skipped:
                assert r["outcome"] == "not_applicable" and r["message"] == why, r
    # The statement says so too.
    assert "not run: " in (tmp_path / "report.md").read_text("utf-8")


def test_keep_going_runs_every_case(tmp_path: Path) -> None:
    run = run_suite("crash_mid_stream", tmp_path, "--keep-going", "--protocol", "1")
    assert run.returncode == 1, run.stderr
    assert_clean(run)
    assert run.report is not None
    notes = cases_by_note(run.report)
    assert not [n for n in notes.values() if n.startswith("not run:")], notes
    crashed = {r["case"] for r in run.report["results"]
               if r["requirement"] == "TARGET/exit" and r["outcome"] == "fail"}
    assert len(crashed) > 2, crashed


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_deadline_cuts_a_slow_healthy_agent(tmp_path: Path, jobs: str) -> None:
    # The agent needs 30 s to answer initialize: a --deadline of 3 s cuts the first
    # case(s) in that wait. Nothing of it is the target's fault.
    run = run_suite("slow_start", tmp_path, "--deadline", "3", "-j", jobs,
                    env={"SLOW_START_SECONDS": "30"})
    assert run.returncode == 1, run.stderr
    assert run.elapsed < 3 + 2 * 2 + 15, f"run took {run.elapsed:.1f} s"
    assert_clean(run)
    assert run.report is not None
    assert "run cut" in run.stderr and "--deadline of 3 s" in run.stderr, run.stderr
    assert "--deadline of 3 s" in run.report["cut"]
    notes = cases_by_note(run.report)
    cut = [c for c, n in notes.items() if n.startswith("aborted: cut by --deadline (3 s)")]
    assert 1 <= len(cut) <= int(jobs), notes
    assert all(n == "not run: deadline" for c, n in notes.items() if c not in cut), notes
    assert not [r for r in run.report["results"] if r["outcome"] == "fail"]  # not a fault
    for case in cut:  # graded and kept
        assert (tmp_path / "transcripts" / f"{case}.jsonl").is_file()
    statement = (tmp_path / "report.md").read_text("utf-8")
    assert "not run: deadline" in statement and "run cut: the run passed its --deadline" in statement
    assert "| Verdict | **FAIL** |" in statement  # never green by accident
    assert run.report["summary"]["verdict"] == "fail"
    assert "verdict: FAIL" in run.stdout


def test_a_run_within_its_deadline_is_not_cut(tmp_path: Path) -> None:
    run = run_suite("slow_start", tmp_path, "--deadline", "600", "--case", "wire-shapes",
                    env={"SLOW_START_SECONDS": "0"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.report is not None and "cut" not in run.report


def test_the_pytest_plugin_honours_the_deadline(pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    result = pytester.runpytest_subprocess(
        "-p", "conformance.pytest_plugin", "-p", "no:cacheprovider",
        "--acp-agent", agent_command("slow_start"), "--acp-agent-env", "SLOW_START_SECONDS=30",
        "--acp-protocol", "1", "--acp-timeout", "60", "--acp-deadline", "3",
        "--acp-json", "report.json", timeout=120)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 2 and not outcomes.get("passed"), result.outlines
    out = "\n".join(result.outlines)
    assert "aborted: cut by --deadline (3 s)" in out
    assert "not run: deadline" in out
    assert result.ret == 1
    report = pytester.path / "report.json"
    import json

    notes = [c["note"] for c in json.loads(report.read_text("utf-8"))["cases"]]
    assert notes[0].startswith("aborted: cut by --deadline") and set(notes[1:]) == {
        "not run: deadline"}, notes


def test_the_pytest_plugin_honours_the_deadline_for_clients(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that never shows ready, 60 s of --acp-timeout, a 3 s deadline: the first
    case is cut at the deadline, the others are not run."""
    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    client = f"{sys.executable} {root / 'fixtures' / 'hostile' / 'clients' / 'never_ready.py'}"
    started = time.monotonic()
    result = pytester.runpytest_subprocess(
        "-p", "conformance.pytest_plugin", "-p", "no:cacheprovider",
        "--acp-client", client + " --agent-cmd {agent}",
        "--acp-client-profile", str(root / "fixtures" / "clients" / "reference.yaml"),
        "--acp-protocol", "1", "--acp-timeout", "60", "--acp-deadline", "3", timeout=120)
    assert time.monotonic() - started < 40, "the client case was not cut at the deadline"
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 2 and not outcomes.get("passed"), result.outlines
    out = "\n".join(result.outlines)
    assert "aborted: cut by --deadline (3 s)" in out and "not run: deadline" in out
    assert result.ret == 1


# -- the model server ------------------------------------------------------------------


def test_an_agent_resetting_its_model_connection_leaves_a_clean_console(tmp_path: Path) -> None:
    run = run_cli(["--agent", agent_command("resets_model_connection"), "--model-server",
                   "--protocol", "1", "--case", "wire-shapes", "--case", "ids-across-turns",
                   "--json", str(tmp_path / "report.json"),
                   "--transcripts", str(tmp_path / "transcripts"), "--no-color"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr, run.stderr
    assert "Exception occurred" not in run.stderr and "ConnectionResetError" not in run.stderr
    for path in run.transcripts:  # recorded where the model traffic is recorded
        header = json.loads(path.read_text("utf-8").split("\n", 1)[0])
        requests = header["model_requests"]
        assert any("connection_error" in r or r.get("status") == 400 for r in requests), requests
        assert {r.get("case") for r in requests} == {path.stem}


def _reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer sees a TCP reset, not an orderly end."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _post(sock: socket.socket, path: str, body: bytes) -> bytes:
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    return data


def test_a_reset_connection_stays_off_the_console(capfd: pytest.CaptureFixture[str]) -> None:
    from conformance.modelserver.server import ModelServer

    with ModelServer() as server:
        base = server.route_url("case-a@v1", None, "case-a@v1")
        prefix = base[len(server.url):]
        body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
        # A request served, then the agent resets the kept-alive connection mid-request.
        sock = socket.create_connection(("127.0.0.1", server.port))
        assert b"200" in _post(sock, f"{prefix}/v1/chat/completions", body).split(b"\r\n")[0]
        sock.sendall(b"POST " + prefix.encode() + b"/v1/chat/completions HTTP/1.1\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"model\"")
        _reset(sock)
        # And one reset before a request line is complete (no route known: the default log).
        other = socket.create_connection(("127.0.0.1", server.port))
        other.sendall(b"POST /v1/chat/comp")
        _reset(other)
        route = server._routes["case-a@v1"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
                "connection_error" in e or e.get("status") == 400 for e in route.log[1:]):
            time.sleep(0.05)
        log = server.take_log("case-a@v1")  # what the transcript header's model_requests gets
        assert log[0]["status"] == 200, log
        assert [e for e in log[1:] if "connection_error" in e or e.get("status") == 400], log
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "ConnectionResetError" not in out + err, err
    assert err == "", err


def test_a_fault_of_the_server_is_one_line(capfd: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.modelserver.server import ModelServer

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("scripted reply missing")

    with ModelServer() as server:
        monkeypatch.setattr(server, "plan", broken)
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        sock.settimeout(5)
        assert sock.recv(100) == b""  # the server hung up on the request it could not serve
        sock.close()
        assert server.faults
    _, err = capfd.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("acp-conformance: model server: internal error")
    assert "RuntimeError: scripted reply missing" in lines[0]
    assert "Traceback" not in err


def test_a_requirement_only_cases_not_run_would_grade_is_not_run_in_the_statement() -> None:
    from conformance import cases as casemod
    from conformance.lifecycle import not_run
    from conformance.report.catalogue import statement
    from conformance.results import RunResult

    [case] = [c for c in casemod.load_dir(None) if c.id == "load-fresh-process"]
    result = RunResult("0", "agent", "agent", [1], "acp-sdk-2.4.0", False)
    result.cases.append(not_run(case, 1, "not run: the target exited at x in a@v1 and b@v1"))
    st = statement(result)
    shown = {v.meta.id: v.shown for v in st.must + st.should}
    assert shown["MID-A-07"] == "not run", shown
    assert "pass" not in {shown[r] for r in case.requirements if r in shown}  # never a pass
