"""Every fixture names itself in ``initialize``: a broken agent or client is never the
reference in a report or a matrix (its own name, "broken" where its file says it breaks
a rule); the reference keeps the reference's name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT, load_json, run_cli

from conformance.naming import says_broken

AGENTS = sorted(p for p in (REPO_ROOT / "fixtures" / "agents").glob("*.py")
                if not p.name.startswith("_")
                and "conformance.reference" in p.read_text(encoding="utf-8"))
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": 1, "clientCapabilities": {}}}


def initialize_name(argv: list[str], protocol: int = 1) -> str:
    return initialize_names({"": argv}, protocol)[""]


def initialize_names(argvs: dict[str, list[str]], protocol: int = 1,
                     side_by_side: int = 8) -> dict[str, str]:
    """The name each agent gives in its initialize answer: real processes, a few started
    side by side (each spends most of its life starting Python), each given 30 s."""
    request = dict(INITIALIZE, params={"protocolVersion": protocol, "clientCapabilities": {}})
    names: dict[str, str] = {}
    keys = list(argvs)
    for at in range(0, len(keys), side_by_side):
        started = {k: subprocess.Popen(argvs[k], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)
                   for k in keys[at:at + side_by_side]}
        try:
            for k, proc in started.items():
                out, _ = proc.communicate(json.dumps(request) + "\n", timeout=30)
                answer = json.loads(out.splitlines()[0])["result"]
                names[k] = str((answer.get("agentInfo") or answer.get("info"))["name"])
        finally:  # none is left running, whatever failed
            for proc in started.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return names


def expected(path: Path, role: str) -> str:
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    kind = "broken" if says_broken(first) else "fixture"
    return f"acp-conformance-{kind}-{role}-{path.stem.replace('_', '-')}"


def test_every_agent_fixture_names_itself() -> None:
    assert len(AGENTS) > 40
    names = initialize_names({p.stem: [sys.executable, str(p)] for p in AGENTS})
    for path in AGENTS:
        assert names[path.stem] == expected(path, "agent"), path.name
    assert names["per_turn_counter"] == "acp-conformance-broken-agent-per-turn-counter"
    assert names["replay_regenerates_ids"].startswith("acp-conformance-fixture-agent-")
    assert len(set(names.values())) == len(names)
    reference = initialize_name([sys.executable, "-m", "conformance.reference.agent"], 2)
    assert reference == "acp-conformance-reference-agent"


def test_a_merged_matrix_of_a_good_and_a_broken_run_names_each(tmp_path: Path) -> None:
    args = ("--case", "ids-across-turns", "--protocol", "1", "--no-color")
    good = run_cli("--agent", f"{sys.executable} -m conformance.reference.agent", *args,
                   "--agent-env", f"ACP_REFERENCE_STATE_DIR={tmp_path / 'state'}",
                   "--json", str(tmp_path / "good.json"))
    bad = run_cli("--agent", f"{sys.executable} {AGENTS[0].parent / 'per_turn_counter.py'}",
                  *args, "--json", str(tmp_path / "bad.json"))
    assert (good.returncode, bad.returncode) == (0, 1), good.stderr + bad.stderr
    merged = run_cli("report", "--merge", str(tmp_path / "good.json"),
                     str(tmp_path / "bad.json"), "--json", str(tmp_path / "m.json"))
    assert merged.returncode == 1, merged.stderr
    runs = {r["label"]: r for r in load_json(tmp_path / "m.json")["runs"]}
    assert set(runs) == {"acp-conformance-reference-agent 0.1.0",
                         "acp-conformance-broken-agent-per-turn-counter 0.1.0"}, runs
    assert "acp-conformance-broken-agent-per-turn-counter 0.1.0 fail" in merged.stdout


CLIENTS = sorted(p for p in (REPO_ROOT / "fixtures" / "clients").glob("*.py")
                 if "conformance.client.reference" in p.read_text(encoding="utf-8"))


def test_every_client_fixture_on_the_reference_client_names_itself(tmp_path: Path) -> None:
    """A client fixture sends initialize to the agent it starts: here a stand-in agent that
    writes the first line it reads to a file and exits."""
    assert len(CLIENTS) > 15
    started = []
    for path in CLIENTS:  # side by side: each waits a little for an agent that has gone
        seen = tmp_path / f"{path.stem}.json"
        agent = (f"{sys.executable} -c \"import sys; open({str(seen)!r}, 'w')"
                 ".write(sys.stdin.readline())\"")
        started.append(subprocess.Popen(
            [sys.executable, str(path), "--agent-cmd", agent], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path))
    for proc in started:
        proc.wait(timeout=60)
    for path in CLIENTS:
        params = json.loads((tmp_path / f"{path.stem}.json").read_text(
            encoding="utf-8"))["params"]
        info = params.get("clientInfo") or params.get("info")
        assert info["name"] == expected(path, "client"), path.name
    assert expected(CLIENTS[0].parent / "case_insensitive.py", "client") == \
        "acp-conformance-broken-client-case-insensitive"
    assert expected(CLIENTS[0].parent / "hides_thoughts.py", "client") == \
        "acp-conformance-fixture-client-hides-thoughts"
