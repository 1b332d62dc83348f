"""Helpers more than one test module uses, kept out of the test modules themselves: no
test module imports another (tests/test_house_rules.py holds it), so collecting one
module never collects, or re-runs the imports of, another. conftest.py has the ones about
the command line and the shared schemas."""

from __future__ import annotations

import json
import os
import select
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli

from conformance import transcript as tmod
from conformance.checks import Options, grade
from conformance.cli.demo import reference_agent_command
from conformance.fuzz.player import AgentTarget
from conformance.results import Outcome
from conformance.transcript import Transcript

REPO_ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------
# Grading (tests/test_grading_repeats.py, tests/test_agent_suite.py)
# --------------------------------------------------------------------------

#: The two option sets a transcript is graded under when the short path is compared.
GRADING_OPTION_SETS = [Options(), Options(cross_turn_reuse=Outcome.WARN, strict_ids=True)]


def assert_graded_the_same_both_ways(path: Path) -> None:
    """A recorded transcript graded with and without the short path (ID-less runs
    included), in its own role and protocol, under both option sets."""
    header, read = tmod.iter_entries(path)
    entries = list(read)
    protocol = int(header.get("protocol") or 1)
    role = str(header.get("role") or "agent")
    for options in GRADING_OPTION_SETS:
        assert grade(entries, protocol=protocol, options=options, role=role) == grade(
            entries, protocol=protocol, options=options, role=role, repeats=False), path.name


# --------------------------------------------------------------------------
# Hand-written transcripts (tests/test_checker_units.py, tests/test_draft_v2.py)
# --------------------------------------------------------------------------


def transcript(protocol: int, lines: list[tuple[str, dict[str, Any]]]) -> Transcript:
    t = Transcript({"protocol": protocol})
    for src, msg in lines:
        t.add(0, src, "stdin" if src == "client" else "stdout", json.dumps(msg).encode())
    return t


def update(kind: str, mid: str, **rest: Any) -> tuple[str, dict[str, Any]]:
    return ("agent", {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": kind, "messageId": mid, **rest}}})


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


# --------------------------------------------------------------------------
# Processes a run leaves (tests/test_client_suite.py, tests/test_client_replay_drift.py)
# --------------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is already ended, it only waits to be reaped by its parent.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def pids_in(transcripts: Path) -> list[int]:
    pids = []
    for f in transcripts.glob("*.jsonl"):
        for line in f.read_text(encoding="utf-8").splitlines()[1:]:
            d = json.loads(line)
            data = d.get("data") or {}
            if d.get("event") == "start" and isinstance(data.get("pid"), int):
                pids.append(data["pid"])
    return pids


#: how long a test waits for a hostile agent's FIFO signal before it fails
WAIT = 90.0  # how long a test waits for a target to reach its hostile part (busy machines)


def wait_ready(fifo: Path) -> str:
    """Block until the target writes its line to the FIFO (or fail after WAIT seconds)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], WAIT)
        assert ready, "the agent never reached its hostile part"
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)


def signalled_when_ready(args: list[str], tmp_path: Path, fifo: Path, sig: int) -> Any:
    """The command line started with ``args``, sent ``sig`` once its target writes its
    ready line to ``fifo``: the finished run, as ``fixtures/hostile/harness.py``'s
    ``finish_cli`` gives it."""
    if str(HOSTILE) not in sys.path:
        sys.path.insert(0, str(HOSTILE))
    from harness import finish_cli, start_cli

    proc = start_cli(args, tmp_path)
    wait_ready(fifo)
    signalled = time.monotonic()
    proc.send_signal(sig)
    return finish_cli(proc, tmp_path, signalled)


# --------------------------------------------------------------------------
# The client fixtures' manifest (tests/test_client_fixtures.py, tests/report_digests.py)
# --------------------------------------------------------------------------

CLIENTS = REPO_ROOT / "fixtures" / "clients"
CLIENT_MANIFEST = yaml.safe_load((CLIENTS / "manifest.yaml").read_text(encoding="utf-8"))["clients"]


def client_args(entry: dict[str, Any]) -> list[str]:
    """The CLI options that point the suite at this fixture, as the manifest says."""
    path = CLIENTS / entry["file"]
    if entry["run"] == "adapter":
        return ["--client-adapter", f"{path}:make_client"]
    words = [sys.executable, str(path), "--agent-cmd", "{agent}", *entry.get("args", [])]
    args = ["--client", " ".join(shlex.quote(w) for w in words)]
    if entry["run"] != "wire":
        args += ["--client-profile", str(CLIENTS / entry["profile"])]
    if "acp_profile" in entry:  # the cases of a profile-gated rule run under that profile
        args += ["--profile", entry["acp_profile"]]
    return args


# -- one verdict on every road (the CLI, `check` on its transcripts, the pytest plugin) --

#: Info rules that record an ordering the suite caused and cannot observe (its request
#: crossing the target's output): info in a run where it came up, pass where the window
#: was there and it did not, not applicable where timing left no window (the turn had
#: stopped streaming when the request went out); the verdict never rests on them
#: (docs/stability.md).
RACE_RECORDS = frozenset({"MID-V2-06/live-beside-resume", "MID-A-07/live-beside-load",
                          "MID-V2-13/live-before-replay"})


def settled(rule: str, outcome: str) -> str:
    """An outcome as two runs of one target must agree on it: a race record's info, pass
    and not applicable are one outcome (seen moving between pass and info on a busy
    machine: ``v2_marker_live_inside``'s live-before-replay)."""
    return ("not_applicable" if rule in RACE_RECORDS and outcome in ("info", "pass")
            else outcome)


def rows(report: dict[str, Any]) -> set[tuple[str, str, str]]:
    """The (case, rule, outcome) rows of a JSON report (a race record's info as not
    applicable: see :data:`RACE_RECORDS`)."""
    return {(r["case"], r["requirement"], settled(r["requirement"], r["outcome"]))
            for r in report["results"]}


def cli_json(tmp_path: Path, name: str, *args: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / f"{name}.json"
    proc = run_cli(*args, "--json", str(out), "--no-color", timeout=300)
    data = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    return proc.returncode, data, proc.stdout + proc.stderr


def plugin(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in a subprocess with only the suite's plugin (as tests/test_plugin.py runs it)."""
    env = {"PYTHONPATH": os.pathsep.join([str(REPO_ROOT),
                                          *filter(None, [os.environ.get("PYTHONPATH")])]),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return pytester.runpytest_subprocess("-p", "conformance.pytest_plugin",
                                             "-p", "no:cacheprovider", *args, timeout=300)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def every_road(tmp_path: Path, pytester: pytest.Pytester | None, target: list[str],
               plugin_target: list[str], selection: list[str]) -> dict[str, Any]:
    """The same target and selection through the CLI, `check` on its transcripts and the
    pytest plugin: each road's exit status, report and (case, rule, outcome) rows."""
    roads: dict[str, Any] = {}
    code, live, out = cli_json(tmp_path, "live", *target, *selection,
                               "--transcripts", str(tmp_path / "t"))
    assert live, out
    roads["cli"] = (code, live, out)
    code, checked, out = cli_json(tmp_path, "check", "check", str(tmp_path / "t"))
    assert checked, out
    roads["check"] = (code, checked, out)
    if pytester is not None:
        plugin_json = tmp_path / "plugin.json"
        sel = [w.replace("--case", "--acp-case").replace("--protocol", "--acp-protocol")
               for w in selection]
        result = plugin(pytester, *plugin_target, *sel, "--acp-json", str(plugin_json))
        report = json.loads(plugin_json.read_text(encoding="utf-8"))
        roads["pytest"] = (int(result.ret), report, result)
    return roads


def assert_one_verdict(roads: dict[str, Any], want: str) -> None:
    """Every road: the same verdict, headline and rows as the first road's; a fail exits 1,
    a pass 0."""
    first = next(iter(roads.values()))[1]
    for name, (code, report, out) in roads.items():
        assert report["summary"]["verdict"] == want, (name, out)
        assert report["summary"]["headline"] == first["summary"]["headline"], name
        assert rows(report) == rows(first), (name, rows(report) ^ rows(first))
        assert sorted(report.get("unfinished", {})) == sorted(first.get("unfinished", {}))
        assert code == (1 if want == "fail" else 0), (name, out)


def selected_cases(report: dict[str, Any], selector: str, protocol: int) -> list[str]:
    """The cases of a run's JSON ``report`` in ``protocol`` that ``--case SELECTOR``
    selects (a case ID, a requirement or sub-rule ID), as names (``ID@vN``)."""
    from conformance.cases import load_dir, select

    ran = {c["case"] for c in report["cases"]}
    mine = [c for c in load_dir() if c.role == report["role"] and f"{c.id}@v{protocol}" in ran]
    return sorted(f"{c.id}@v{protocol}" for c in select(mine, [selector]))


def plugin_agrees_with_check(tmp_path: Path, pytester: pytest.Pytester,
                             plugin_target: list[str], selector: str, protocol: int,
                             live: dict[str, Any], transcripts: Path) -> dict[str, Any]:
    """The pytest plugin's road against `check` of a command line run's transcripts: the
    plugin plays ``--acp-case SELECTOR`` in ``protocol`` live, and `check` grades the
    files that the command line run (its JSON report ``live``, its ``transcripts``)
    recorded of the same cases (a run of more cases: each case's file is graded on its
    own, a proxy case with its agent side). Both give one verdict, headline, set of
    (case, rule, outcome) rows and exit status, and the plugin ran exactly those cases.
    The command line's report agrees with `check` of its transcripts (tests/offline.py),
    so the three roads give one verdict from one live run of the command line."""
    cases = selected_cases(live, selector, protocol)
    assert cases, (selector, protocol)
    picked = tmp_path / "picked"
    picked.mkdir()
    for case in cases:
        for path in [transcripts / f"{case}.jsonl", transcripts / f"{case}.agent-side.jsonl"]:
            if path.exists():
                (picked / path.name).write_bytes(path.read_bytes())
    roads: dict[str, Any] = {"check": cli_json(tmp_path, "picked", "check", str(picked))}
    assert roads["check"][1], roads["check"][2]
    plugin_json = tmp_path / "plugin.json"
    result = plugin(pytester, *plugin_target, "--acp-case", selector, "--acp-protocol",
                    str(protocol), "--acp-json", str(plugin_json))
    report = json.loads(plugin_json.read_text(encoding="utf-8"))
    roads["pytest"] = (int(result.ret), report, result)
    assert sorted(c["case"] for c in report["cases"]) == cases, result.stdout.str()[-3000:]
    assert_one_verdict(roads, roads["check"][1]["summary"]["verdict"])
    return roads


def assert_breaks(roads: dict[str, Any], rule: str | None) -> None:
    """One verdict on every road, and the rule the fixture breaks among the rows (a
    fixture that breaks nothing passes)."""
    first = next(iter(roads.values()))
    verdict = first[1]["summary"]["verdict"]
    assert_one_verdict(roads, verdict)
    if rule is None:
        assert verdict == "pass", first[2]
    else:
        assert any(r[1].startswith(rule) and r[2] in ("fail", "warn")
                   for r in rows(first[1])), first[2]


def first_rule(expect: dict[str, Any], protocols: list[int],
               profile: str | None = None) -> tuple[int, str | None]:
    """The first protocol in which a fixture's manifest ``expect`` lists a fault (under
    ``profile`` where it lists faults by profile), and that fault (fail before warn); for a
    fixture that breaks nothing, its first protocol and None."""
    for p in protocols:
        graded = expect.get(f"v{p}") or {}
        if "profiles" in graded:
            graded = graded["profiles"].get(profile) or {}
        broken = [r for grade in ("fail", "warn") for r in graded.get(grade) or []]
        if broken:
            return p, broken[0]
    return protocols[0], None


def first_case(rule: str | None, protocol: int, ids: list[str],
               profile: str | None = None) -> str:
    """The first of ``ids`` that applies to ``protocol`` (under ``profile``, by default the
    default one) and lists ``rule`` (a sub-rule: its requirement); with no rule, or a rule
    every case grades (MID-C-08), the first that applies."""
    from conformance.cases import load_dir
    from conformance.profiles import DEFAULT_PROFILE

    by_id = {c.id: c for c in load_dir()}
    applies = [i for i in ids if by_id[i].applies_to(protocol, profile or DEFAULT_PROFILE)]
    return next((i for i in applies if rule is not None
                 and rule.split("/", 1)[0] in by_id[i].requirements), applies[0])


def plugin_args(args: list[str]) -> list[str]:
    """The plugin's options for the command line's ``--name value`` options."""
    return [f"--acp-{a[2:]}" if a.startswith("--") else a for a in args]


# -- fuzz targets --

def fixture_target(name: str, state: Path) -> AgentTarget:
    path = REPO_ROOT / "fixtures" / "agents" / f"{name}.py"
    return AgentTarget([sys.executable, str(path)], name, {"ACP_REFERENCE_STATE_DIR": str(state)})


def reference_target(state: Path) -> AgentTarget:
    return AgentTarget(reference_agent_command(), "reference agent",
                       {"ACP_REFERENCE_STATE_DIR": str(state)})


def counting_starts(command: str, starts: Path) -> str:
    """``command`` (a target's command line) that first appends a line to ``starts`` each
    time it is started, then execs the target in its place: how many runs a fuzzer has
    driven (one target process per run), without waiting on its progress line's clock."""
    count = f'echo >> {shlex.quote(str(starts))}; exec "$@"'
    return f"sh -c {shlex.quote(count)} sh {command}"


def wait_for_count(count: Callable[[], int], at_least: int, what: str,
                   timeout: float = 90.0) -> None:
    """Block until ``count()`` reaches ``at_least`` (or fail after ``timeout`` seconds:
    long, so a busy machine only makes the wait longer, never the test fail)."""
    end = time.monotonic() + timeout
    while count() < at_least:
        if time.monotonic() >= end:
            raise AssertionError(f"{what}: {count()} after {timeout:.0f} s, {at_least} awaited")
        time.sleep(0.1)


def lines_in(path: Path) -> int:
    """How many lines ``path`` holds (0 while it does not exist)."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


def wait_for_line(path: Path, text: str, timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text("utf-8", "replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {path}")


HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile"


def cancelled_fuzz_run(tmp_path: Path, target: list[str], ready: Callable[[], bool], sig: int,
                       env: dict[str, str] | None = None) -> Any:
    """``acp-conformance fuzz`` of ``target`` (``--agent CMD``, ``--client CMD``) with a JSON
    and a Markdown report, sent ``sig`` once it is generating (``ready()``: an event of the
    target's, e.g. the sessions or starts it counted, rather than the progress line, which
    a log gets only after 30 s): the finished run, as ``fixtures/hostile/harness.py``'s
    ``finish_cli`` gives it."""
    if str(HOSTILE) not in sys.path:
        sys.path.insert(0, str(HOSTILE))
    from harness import finish_cli, start_cli

    args = ["fuzz", *target, "--max-examples", "100000",
            "--out", str(tmp_path / "out"), "--json", str(tmp_path / "report.json"),
            "--markdown", str(tmp_path / "report.md"), "--no-color"]
    proc = start_cli(args, tmp_path, env=env)
    wait_for_count(lambda: int(ready()), 1, "the fuzz run generating")
    signalled = time.monotonic()
    proc.send_signal(sig)
    return finish_cli(proc, tmp_path, signalled)


def expected_fingerprint(reg: Any) -> str:
    """The fingerprint a regression file's own content gives (its name, unless it was
    renamed)."""
    from conformance import model
    from conformance.fuzz.regressions import counterexample_shape
    from conformance.fuzz.shapes import failure_shape, fingerprint
    from conformance.results import Finding

    finding = reg.header["finding"]
    evidence = model.as_object(finding.get("evidence"))
    recorded = Finding(reg.requirement, Outcome(finding.get("outcome", "fail")),
                       str(finding.get("message", "")),
                       entries=tuple(int(e) for e in evidence.get("entries", [])))
    counterexample = counterexample_shape(reg.role, reg.steps, reg.model, reg.stream)
    return fingerprint(reg.requirement, failure_shape(reg.role, reg.protocol, counterexample,
                                                      recorded, reg.entries))


def regrade_offline(reg: Any, *, strict: bool = False) -> list[Any]:
    """A regression file's own transcript graded again from its header, as ``check``
    grades it (``strict`` adds ``--strict`` to what the header records); its violations."""
    from conformance.fuzz.grading import violations
    from conformance.grading import grade_recorded

    return violations(grade_recorded(reg.header, reg.entries, strict=strict), strict)


def saved_and_read(library: Path, failure: Any, found: str) -> Any:
    """A fuzz failure saved to the regression library as the fuzzer saves it (strict,
    default options), and read back."""
    from conformance.checks import Options
    from conformance.fuzz import regressions

    saved = regressions.save(library, fingerprint_=regressions.failure_fingerprint(failure),
                             header=regressions.regression_header(failure, found, Options(),
                                                                  True),
                             entries=failure.transcript.entries)
    return regressions.read(saved.path)
