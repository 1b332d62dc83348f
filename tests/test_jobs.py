"""``--jobs``: cases run concurrently, and what a user reads is what a serial run gives.

The same suite runs with ``-j 1`` and ``-j 4`` through the real command line; the
console summary, the JSON, JUnit and Markdown reports and the exit code must be
identical, and the HTML report and the transcripts identical apart from what
differs between any two runs (time offsets, process ids, the agent's random
session and message IDs, temporary folders, and how far a cancelled turn got).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conftest import REPO_ROOT, cli_env, load_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "hostile"))

from harness import agent_command

REFERENCE = f"{sys.executable} -m conformance.reference.agent"
RUN_TO_RUN = [  # what differs between two serial runs of the same target
    (re.compile(r"[0-9a-f]{32}"), "HEX"),
    (re.compile(r"acp-conformance-[A-Za-z0-9_]{8}"), "TMPDIR"),
    (re.compile(r"(&quot;|\")(pid|pgid)(&quot;|\"): \d+"), r"\2: N"),
    (re.compile(r"(&quot;|\")t(&quot;|\"): [0-9.e-]+"), "t: N"),
]
WIRE_ROW = re.compile(r'<tr id="[^"]+-e\d+".*?</tr>')  # a transcript line in the HTML


def _unraced() -> list[str]:
    """``--case`` for every case but those built to race the suite's request with a
    streaming turn (``*-while-*``): whether the target's output crossed the request there
    is the target's timing, recorded as info where it did (docs/stability.md), so two runs
    may differ by that info row, serial or not."""
    from conformance.cases import load_dir

    return [a for c in load_dir() if "-while-" not in c.id for a in ("--case", c.id)]


def run(agent: str, out: Path, jobs: str, *extra: str) -> tuple[int, str]:
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "--agent", agent, "-j", jobs, "--no-color",
         *([] if "--case" in extra else _unraced()),
         "--json", str(out / "r.json"), "--junit", str(out / "r.xml"),
         "--html", str(out / "r.html"), "--markdown", str(out / "r.md"),
         "--transcripts", str(out / "t"), *extra],
        capture_output=True, text=True, cwd=out, env=cli_env(), timeout=300, check=False)
    return proc.returncode, proc.stdout.replace(str(out), "OUT")  # transcript paths differ


def normal(text: str, root: Path) -> str:
    text = text.replace(str(root), "ROOT")
    for pattern, repl in RUN_TO_RUN:
        text = pattern.sub(repl, text)
    return text


# Cases whose traffic depends on timing, serial or not: how many chunks precede a cancel,
# and how a prompt sent while another runs interleaves with it.
TIMED = ("cancel-", "prompts-in-flight")
CANCEL_ANCHOR = re.compile(r'((?:cancel-[a-z0-9-]+|prompts-in-flight)@v\d-e)\d+">#\d+')


def without_cancel(html: str) -> str:
    """The HTML report without the timed cases' sections (see the transcripts below), and
    with the entry numbers of links into them left out."""
    parts = CANCEL_ANCHOR.sub(r'\1N">#N', html).split('<details id="')
    return '<details id="'.join(p for p in parts
                                if not any(f"<code>{t}" in p[:300] for t in TIMED))


def cancel_entries(xml: str) -> str:
    """JUnit XML with the entry numbers of the timed cases' findings left out."""
    parts = xml.split("<testsuite ")
    return "<testsuite ".join(re.sub(r"entries=\[[^\]]*\]", "entries=[N]", p)
                              if any(f'name="{t}' in p[:200] for t in TIMED) else p
                              for p in parts)


def report(path: Path) -> dict[str, Any]:
    data = load_json(path)
    data.pop("date", None)
    for c in data["cases"]:
        c["transcript"] = c["transcript"] and Path(c["transcript"]).name
    for r in data["results"]:  # how far a timed turn got moves its entry numbers
        if r["case"].startswith(TIMED) and "entries" in (r.get("evidence") or {}):
            r["evidence"]["entries"] = "N"
        evidence = r.get("evidence") or {}
        if evidence.get("transcript"):  # each run's own folder
            evidence["transcript"] = Path(evidence["transcript"]).name
        if "lines" in evidence:  # the target's session IDs and pids differ from run to run
            evidence["lines"] = [re.sub(r"sess_[0-9a-f]{32}|\"pid\": \d+", "X", line)
                                 for line in evidence["lines"]]
    return dict(data)


def test_jobs_4_reports_what_jobs_1_reports(tmp_path: Path) -> None:
    rc1, out1 = run(REFERENCE, tmp_path / "serial", "1")
    rc4, out4 = run(REFERENCE, tmp_path / "parallel", "4")
    assert rc1 == rc4 == 0, out1 + out4
    assert out1 == out4
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    assert report(serial / "r.json") == report(parallel / "r.json")
    xml = [cancel_entries((d / "r.xml").read_text("utf-8")) for d in (serial, parallel)]
    assert xml[0] == xml[1]
    assert (serial / "r.md").read_text("utf-8") == (parallel / "r.md").read_text("utf-8")
    html = [without_cancel(WIRE_ROW.sub("", normal((d / "r.html").read_text("utf-8"), d)))
            for d in (serial, parallel)]
    assert html[0] == html[1]
    names = sorted(p.name for p in (serial / "t").iterdir())
    assert names == sorted(p.name for p in (parallel / "t").iterdir())
    assert len(names) == len(report(serial / "r.json")["cases"])
    for name in names:
        if name.startswith(TIMED):
            continue  # their traffic depends on timing, serial or not (TIMED)
        one, four = (normal((d / "t" / name).read_text("utf-8"), d) for d in (serial, parallel))
        assert one == four, name


def test_a_repeated_fault_is_settled_alike_when_cases_overlap(tmp_path: Path) -> None:
    agent = agent_command("silent_after_prompt")
    rc1, out1 = run(agent, tmp_path / "serial", "1", "--timeout", "3")
    rc4, out4 = run(agent, tmp_path / "parallel", "4", "--timeout", "3")
    assert rc1 == rc4 == 1
    assert out1 == out4
    serial, parallel = (report(tmp_path / d / "r.json") for d in ("serial", "parallel"))
    assert serial == parallel
    notes = [c["note"] for c in serial["cases"]]
    assert sum(n.startswith("not run: the target went silent") for n in notes) >= 8, notes
    # Cases the parallel run started before the decision left no transcript behind.
    assert sorted(p.name for p in (tmp_path / "parallel" / "t").iterdir()) == sorted(
        p.name for p in (tmp_path / "serial" / "t").iterdir())


def test_progress_shows_the_cases_in_flight() -> None:
    from conformance import cases as casemod
    from conformance.agent.runner import AgentRun, run_agent_suite
    from conformance.checks import Options

    seen: list[str] = []
    run = AgentRun(command=[sys.executable, str(REPO_ROOT / "fixtures" / "hostile" / "agents"
                                                / "slow_start.py")],
                   protocols=[1], options=Options(), timeout=10, jobs=3,
                   env={"SLOW_START_SECONDS": "0.5"},
                   progress=lambda done, total, current: seen.append(current))
    result = run_agent_suite(run, casemod.load_dir(None), "slow")
    assert not result.failed
    assert any(len(current.split(", ")) >= 2 for current in seen), seen


def test_each_concurrent_case_has_its_own_model(tmp_path: Path) -> None:
    # The agent reads the model's URL from a config file written once for the run (as
    # real agents do), so its requests name no case: the server tells the cases apart
    # by the process group that holds the connection.
    llm_agent = REPO_ROOT / "fixtures" / "agents" / "llm_agent.py"
    template = tmp_path / "url.in"
    template.write_text("{model_url}/v1", encoding="utf-8")
    config = tmp_path / "url.txt"
    agent = f"sh -c 'OPENAI_BASE_URL=$(cat {config}) exec {sys.executable} {llm_agent}'"
    headers: dict[str, dict[str, dict[str, Any]]] = {}
    for jobs in ("1", "4"):
        out = tmp_path / f"j{jobs}"
        rc, console = run(agent, out, jobs, "--protocol", "1", "--model-server",
                          "--agent-config", f"{template}={config}", "--timeout", "20",
                          "--case", "ids-across-*", "--case", "wire-shapes",
                          "--case", "prompt-lifecycle")
        assert rc == 0, console
        headers[jobs] = {p.name: load_json_line(p) for p in (out / "t").iterdir()}
    assert headers["1"].keys() == headers["4"].keys() and len(headers["1"]) == 4
    for name, header in headers["4"].items():
        case = name.removesuffix(".jsonl")
        requests = header["model_requests"]
        assert requests and all(r.get("case") == case for r in requests), (case, requests)
        said = [[s["id"] for s in r["said"]] for r in requests]
        assert said == [[s["id"] for s in r["said"]] for r in
                        headers["1"][name]["model_requests"]], case


def load_json_line(path: Path) -> dict[str, Any]:
    import json

    return dict(json.loads(path.read_text("utf-8").split("\n", 1)[0]))


def test_client_runs_alike_at_jobs_4(tmp_path: Path) -> None:
    client = (f"{sys.executable} -c 'import sys; from conformance.client.reference import main;"
              " sys.exit(main())' --agent-cmd {agent}")
    outs = {}
    for jobs in ("1", "4"):
        out = tmp_path / f"j{jobs}"
        out.mkdir()
        proc = subprocess.run(
            [sys.executable, "-m", "conformance", "--client", client, "--client-profile",
             str(REPO_ROOT / "fixtures" / "clients" / "reference.yaml"), "-j", jobs,
             "--no-color", "--json", str(out / "r.json"), "--junit", str(out / "r.xml")],
            capture_output=True, text=True, cwd=REPO_ROOT, env=cli_env(), timeout=300,
            check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outs[jobs] = (proc.stdout, report(out / "r.json"), (out / "r.xml").read_text("utf-8"))
    assert outs["1"] == outs["4"]


def test_ctrl_c_with_cases_in_flight_ends_them_all(tmp_path: Path) -> None:
    import os
    import signal

    from harness import finish_cli, group_alive, start_cli
    from helpers import wait_ready

    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    proc = start_cli(["--agent", agent_command("silent_after_prompt"), "--protocol", "1",
                      "--timeout", "60", "-j", "4", "--agent-env", f"HOSTILE_READY_FIFO={fifo}",
                      "--json", str(tmp_path / "report.json"),
                      "--transcripts", str(tmp_path / "transcripts"), "--no-color"], tmp_path)
    wait_ready(fifo)  # one case went silent; others are in flight
    signalled = time.monotonic()
    proc.send_signal(signal.SIGINT)
    run = finish_cli(proc, tmp_path, signalled)
    assert run.returncode == 130, run.stderr
    assert run.elapsed < 20, f"took {run.elapsed:.1f} s to stop after the signal"
    assert "Traceback" not in run.stderr
    assert run.report is not None
    notes = [c["note"] for c in run.report["cases"]]
    assert notes and all("interrupted by SIGINT" in n for n in notes), notes
    assert not [r for r in run.report["results"]
                if r["requirement"] == "TARGET/hang" and r["outcome"] == "fail"]
    assert run.pgids()
    for pgid in run.pgids():
        assert not group_alive(pgid), f"process group {pgid} survived the interrupt"
