"""Fuzzing campaigns: the fuzzer as Hypothesis tests (pytest --acp-fuzz, HypoFuzz), the
shared example database, counterexamples as cases, and one matrix from many runs.

Everything runs through the real command lines (pytest, ``hypothesis fuzz``,
``acp-conformance``) against real fixture agents, with small budgets.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT, cli_env, load_json, run_cli

from conformance.transport.process import end_group

AGENTS = REPO_ROOT / "fixtures" / "agents"
REFERENCE = f"{sys.executable} -m conformance.reference.agent"
HYPOFUZZ = find_spec("hypofuzz") is not None
HYPOFUZZ_REASON = ("HypoFuzz is not installed: it is optional, and its licence allows "
                   "non-commercial use only (pip install 'acp-conformance[campaign]' where it "
                   "allows yours)")


def agent(name: str) -> str:
    return f"{sys.executable} {AGENTS / name}.py"


def pytest_fuzz(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """pytest --acp-fuzz in a subprocess, in an empty folder (only the plugin's items)."""
    env = cli_env()
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin", "-p",
         "no:cacheprovider", "--rootdir", str(tmp_path), "-q", "--acp-fuzz", *args],
        check=False, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=timeout)


def regression_headers(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text("utf-8").split("\n", 1)[0])
            for p in sorted(folder.glob("*.jsonl"))]


# -- 1. fuzz targets as Hypothesis tests ----------------------------------------------

def test_pytest_acp_fuzz_finds_shrinks_and_saves_a_broken_rule(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    regs, db = tmp_path / "regs", tmp_path / "db"
    proc = pytest_fuzz(work, "--acp-agent", agent("numeric_id"), "--acp-protocol", "1",
                       "--acp-regressions", str(regs), "--acp-hypothesis-db", str(db))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "acp-fuzz-agent::agent_v1" in out and "MID-S-01/type" in out, out
    headers = regression_headers(regs)
    assert [h["finding"]["requirement"] for h in headers] == ["MID-S-01/type"]  # type: ignore[index]
    assert headers[0]["steps"] == ["start", "new_session",
                                   {"prompt": {"text": "Reply with two separate messages."}}]
    assert headers[0]["fuzz"] == "agent" and headers[0]["protocol"] == 1
    # the file replays as any fuzz regression does
    replay = run_cli("replay", str(next(regs.glob("*.jsonl"))), "--agent", agent("numeric_id"))
    assert replay.returncode == 1 and "STILL FAILING" in replay.stdout, replay.stdout
    # the campaign's counterexample is in the shared database: a plain fuzz run replays it
    again = run_cli("fuzz", "--agent", agent("numeric_id"), "--protocol", "1", "--no-save",
                    "--hypothesis-db", str(db), "--max-examples", "1", "--seed", "3")
    assert "replayed 1 counterexample(s) from the example database first: 1 still failing" \
        in again.stdout, again.stdout + again.stderr


def test_pytest_acp_fuzz_draws_the_model_side_behind_the_model_server(tmp_path: Path) -> None:
    regs = tmp_path / "regs"
    proc = pytest_fuzz(tmp_path, "--acp-agent", agent("llm_passthrough_ids"), "--acp-model-server",
                       "--acp-agent-env", f"ACP_REFERENCE_STATE_DIR={tmp_path / 'state'}",
                       "--acp-protocol", "1", "--acp-regressions", str(regs),
                       # the ci effort's 12 examples miss the repeated item ID about one run
                       # in eight; dev's 100 reach it every time
                       "--acp-fuzz-effort", "dev")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    headers = regression_headers(regs)
    assert headers and all(str(h["finding"]["requirement"]).startswith("MID-A-")  # type: ignore[index]
                           for h in headers)
    assert all(isinstance(h.get("model"), dict) for h in headers)  # the shrunk model script


def test_pytest_acp_fuzz_passes_the_reference_agent(tmp_path: Path) -> None:
    regs = tmp_path / "regs"
    proc = pytest_fuzz(tmp_path, "--acp-agent", REFERENCE, "--acp-protocol", "2",
                       "--acp-regressions", str(regs))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert not regs.exists() or not list(regs.glob("*.jsonl"))


def test_pytest_acp_fuzz_collects_one_test_per_role_and_protocol(tmp_path: Path) -> None:
    proc = pytest_fuzz(tmp_path, "--acp-agent", REFERENCE, "--collect-only")
    assert "acp-fuzz-agent::agent_v1" in proc.stdout and "acp-fuzz-agent::agent_v2" in proc.stdout
    client = pytest_fuzz(tmp_path, "--acp-client-adapter",
                         "conformance.client.reference.adapter:make_client", "--collect-only")
    assert "acp-fuzz-client::client_v1" in client.stdout, client.stdout + client.stderr
    assert "acp-fuzz-client::client_v2" in client.stdout


def test_pytest_acp_fuzz_usage_errors_are_one_line(tmp_path: Path) -> None:
    proc = pytest_fuzz(tmp_path)
    assert proc.returncode == 4 and "--acp-fuzz needs --acp-agent" in proc.stderr, proc.stderr
    proc = pytest_fuzz(tmp_path, "--acp-agent", REFERENCE, "--acp-hypothesis-db",
                       str(Path(__file__)))
    assert proc.returncode == 4 and "not a directory" in proc.stderr, proc.stderr
    env = cli_env()
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    no_fuzz = subprocess.run([sys.executable, "-m", "pytest", "-p", "conformance.pytest_plugin",
                              "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                              "--acp-regressions", "x"],
                             check=False, capture_output=True, text=True, cwd=tmp_path, env=env,
                             timeout=60)
    assert no_fuzz.returncode == 4 and "needs --acp-fuzz" in no_fuzz.stderr


def hypofuzz(tmp_path: Path, workers: int, regs: Path, *pytest_args: str,
             cap: float = 120, ci: bool = False, db: Path | None = None) -> str:
    """``hypothesis fuzz -n WORKERS -- --acp-fuzz ...`` until a regression file is in
    ``regs`` and the example database ``db`` (if given) holds an entry, at most ``cap``
    seconds; then the campaign's process group is ended (HypoFuzz's own loop notices a
    found failure only once a minute). That each fingerprint is written once however
    many workers find it is shown without timing by
    ``test_a_regression_file_is_written_once_by_racing_writers``. Returns its output, for
    failure messages. ``ci``: run it as a CI job does (``CI=true``: Hypothesis loads its
    ``ci`` profile, which has no example database); otherwise with ``CI`` unset."""
    env = cli_env()
    env.pop("CI", None)
    if ci:
        env["CI"] = "true"
    hypothesis = Path(sys.executable).with_name("hypothesis")
    argv = ([str(hypothesis)] if hypothesis.exists() else
            [sys.executable, "-c", "from hypothesis.extra.cli import main; main()"])
    proc = subprocess.Popen(
        [*argv, "fuzz", "-n", str(workers), "--no-dashboard", "--", "--acp-fuzz",
         "--acp-regressions", str(regs), "-p", "no:cacheprovider", *pytest_args],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        deadline = time.monotonic() + cap
        while time.monotonic() < deadline and proc.poll() is None and not (
                list(regs.glob("*.jsonl")) and (db is None or any(db.rglob("*")))):
            time.sleep(0.2)
    finally:
        end_group(proc)
    return proc.stdout.read().decode("utf-8", "replace") if proc.stdout else ""


@pytest.mark.skipif(not HYPOFUZZ, reason=HYPOFUZZ_REASON)
def test_hypofuzz_campaign_on_two_processes_writes_the_regression_once(tmp_path: Path) -> None:
    """``hypothesis fuzz -n 2 -- --acp-fuzz ...`` finds the fixture's bug and writes its
    regression file, once per fingerprint; the campaign is stopped after at most 120 s."""
    regs, db = tmp_path / "regs", tmp_path / "db"
    log = hypofuzz(tmp_path, 2, regs, "--acp-agent", agent("numeric_id"), "--acp-protocol", "1",
                   "--acp-hypothesis-db", str(db), db=db)
    headers = regression_headers(regs) if regs.exists() else []
    assert headers, log
    assert {h["finding"]["requirement"] for h in headers} == {"MID-S-01/type"}  # type: ignore[index]
    fingerprints = [h["fingerprint"] for h in headers]
    assert len(fingerprints) == len(set(fingerprints))
    assert not [p for p in regs.iterdir() if not p.name.endswith(".jsonl")]  # no staging left
    assert any(db.iterdir())  # the campaign's shared database


@pytest.mark.skipif(not HYPOFUZZ, reason=HYPOFUZZ_REASON)
def test_hypofuzz_campaign_against_an_in_process_client_adapter(tmp_path: Path) -> None:
    """The adapter runs in the HypoFuzz worker (coverage-guided there); its bug is found,
    confirmed against its control and saved as a client regression. It runs as a CI job
    does, with no ``--acp-hypothesis-db``: the workers use Hypothesis' default folder
    (HypoFuzz's workers crashed on the ``ci`` profile's missing database)."""
    regs = tmp_path / "regs"
    adapter = f"{REPO_ROOT / 'fixtures' / 'clients' / 'trimmed.py'}:make_client"
    log = hypofuzz(tmp_path, 1, regs, "--acp-client-adapter", adapter, "--acp-protocol", "1",
                   ci=True, db=tmp_path / ".hypothesis" / "examples")
    headers = regression_headers(regs) if regs.exists() else []
    assert headers, log
    assert "add_listener" not in log, log  # the workers started
    assert any((tmp_path / ".hypothesis" / "examples").iterdir())  # the default folder
    assert all(h["fuzz"] == "client" and isinstance(h["stream"], dict) for h in headers)
    assert all(str(h["finding"]["requirement"]).startswith("MID-C-")  # type: ignore[index]
               for h in headers)


def test_a_regression_file_is_written_once_by_racing_writers(tmp_path: Path) -> None:
    from conformance.fuzz import regressions

    results: list[bool] = []
    lock = threading.Lock()

    def write() -> None:
        saved = regressions.save(tmp_path, fingerprint_="mid-x-01-abc", header={"a": 1},
                                 entries=[])
        with lock:
            results.append(saved.existed)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(False) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["mid-x-01-abc.jsonl"]


# -- 2. the shared database ------------------------------------------------------------

def test_two_fuzz_campaigns_share_one_database(tmp_path: Path) -> None:
    db = tmp_path / "db"
    first = run_cli("fuzz", "--agent", agent("numeric_id"), "--protocol", "1", "--no-save",
                    "--hypothesis-db", str(db), "--max-examples", "8", "--seed", "1")
    assert first.returncode == 1, first.stdout + first.stderr
    assert "from the example database" not in first.stdout
    second = run_cli("fuzz", "--agent", agent("numeric_id"), "--protocol", "1", "--no-save",
                     "--hypothesis-db", str(db), "--max-examples", "1", "--seed", "2")
    assert second.returncode == 1
    assert "replayed 1 counterexample(s) from the example database first: 1 still failing" \
        in second.stdout, second.stdout
    fixed = run_cli("fuzz", "--agent", REFERENCE, "--protocol", "1", "--no-save",
                    "--hypothesis-db", str(db), "--max-examples", "1", "--seed", "2")
    assert fixed.returncode == 0
    assert "from the example database first: 0 still failing" in fixed.stdout, fixed.stdout
    bad = run_cli("fuzz", "--agent", REFERENCE, "--hypothesis-db", str(Path(__file__)))
    assert bad.returncode == 2 and "not a directory" in bad.stderr


# -- 3. counterexamples become cases ---------------------------------------------------

def test_case_steps_and_fuzz_steps_are_one_vocabulary() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from conformance import cases as casemod
    from conformance.agent.steps import split, validate
    from conformance.cases import step_validator
    from conformance.fuzz.prompts import prompt_specs

    validator = step_validator()
    for case in casemod.load_dir():
        if case.role == "agent":
            assert validate(list(case.drive)) == list(case.drive)  # case steps are fuzz steps
            for step in case.drive:
                split(step)

    @settings(max_examples=60, deadline=None)
    @given(st.booleans().flatmap(lambda c: prompt_specs(kinds=("text", "resource_link", "image"),
                                                         cancel=c)))
    def generated(spec: dict[str, object]) -> None:
        assert validator.is_valid({"prompt": spec}), spec  # fuzz steps are case steps

    generated()
    assert validator.is_valid({"switch": {"session": 1}})
    assert not validator.is_valid({"play": "x"})  # client-side steps are not the agent's


def _cases_with(tmp_path: Path, emitted: Path) -> Path:
    folder = tmp_path / "cases"
    shutil.copytree(REPO_ROOT / "cases", folder)
    shutil.copy(emitted, folder / emitted.name)
    if (emitted.parent / "model").is_dir():
        for script in (emitted.parent / "model").iterdir():
            shutil.copy(script, folder / "model" / script.name)
    return folder


def _run_case(folder: Path, target: str, case: str, tmp_path: Path, *extra: str) -> dict:
    report = tmp_path / f"run-{len(list(tmp_path.glob('run-*.json')))}.json"
    run_cli("--agent", target, "--cases", str(folder), "--case", case, "--json", str(report),
            "--no-color", *extra, timeout=180)
    return dict(load_json(report))


def _fails(report: dict, case: str) -> set[str]:
    return {r["requirement"] for r in report["results"]
            if r["case"].startswith(case) and r["outcome"] == "fail"}


def test_fuzz_emit_case_fails_the_same_rule_and_passes_the_reference(tmp_path: Path) -> None:
    emitted = tmp_path / "out" / "found.yaml"
    proc = run_cli("fuzz", "--agent", agent("numeric_id"), "--protocol", "1", "--no-save",
                   "--max-examples", "8", "--seed", "1", "--emit-case", str(emitted))
    assert proc.returncode == 1 and "case file:" in proc.stdout, proc.stdout + proc.stderr
    doc = yaml.safe_load(emitted.read_text("utf-8"))
    (case,) = doc["cases"]
    assert case["checks"] == ["MID-S-01/type"] and case["applies"]["protocols"] == [1]
    folder = _cases_with(tmp_path, emitted)
    lint = run_cli("lint-cases", "--cases", str(folder))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    broken = _run_case(folder, agent("numeric_id"), case["id"], tmp_path)
    assert "MID-S-01/type" in _fails(broken, case["id"])
    reference = _run_case(folder, REFERENCE, case["id"], tmp_path)
    assert reference["summary"]["verdict"] == "pass", reference["summary"]


def test_replay_emit_case_keeps_a_cancel_after_step(tmp_path: Path) -> None:
    """A committed regression whose prompt is cancelled after 0 updates becomes a case the
    case runner plays the same way: the same rule fails on the same fixture."""
    reg = REPO_ROOT / "fixtures" / "regressions" / "mid-a-09-after-cancel-3f04d29577.jsonl"
    emitted = tmp_path / "out" / "cancel.yaml"
    proc = run_cli("replay", str(reg), "--agent", agent("update_after_cancel"), "--emit-case",
                   str(emitted))
    assert proc.returncode == 1 and "case file:" in proc.stdout, proc.stdout + proc.stderr
    (case,) = yaml.safe_load(emitted.read_text("utf-8"))["cases"]
    assert {"prompt": {"text": "Write a long story, one sentence at a time.",
                       "cancel_after": 0}} in case["drive"]
    folder = _cases_with(tmp_path, emitted)
    assert run_cli("lint-cases", "--cases", str(folder)).returncode == 0
    broken = _run_case(folder, agent("update_after_cancel"), case["id"], tmp_path)
    assert "MID-A-09/after-cancel" in _fails(broken, case["id"]), broken["summary"]
    reference = _run_case(folder, REFERENCE, case["id"], tmp_path)
    assert not _fails(reference, case["id"])


def test_a_model_script_counterexample_carries_its_script(tmp_path: Path) -> None:
    from conformance.modelserver.script import load_script

    reg = REPO_ROOT / "fixtures" / "regressions" / "mid-a-02-cross-turn-reuse-55ea7c0fda.jsonl"
    emitted = tmp_path / "out" / "llm.yaml"
    proc = run_cli("replay", str(reg), "--emit-case", str(emitted), "--agent", "false")
    assert "case file:" in proc.stdout, proc.stdout + proc.stderr
    (case,) = yaml.safe_load(emitted.read_text("utf-8"))["cases"]
    script = emitted.parent / "model" / f"{case['model']}.yaml"
    header = json.loads(reg.read_text("utf-8").split("\n", 1)[0])
    assert yaml.safe_load(script.read_text("utf-8")) == header["model"]
    load_script(script)  # the model server reads it
    folder = _cases_with(tmp_path, emitted)
    assert run_cli("lint-cases", "--cases", str(folder)).returncode == 0


def test_a_client_counterexample_becomes_a_client_case(tmp_path: Path) -> None:
    reg = REPO_ROOT / "fixtures" / "regressions" / "mid-c-02-merged-a97ef22979.jsonl"
    emitted = tmp_path / "out" / "client.yaml"
    proc = run_cli("replay", str(reg), "--emit-case", str(emitted))
    assert proc.returncode == 1 and "case file:" in proc.stdout, proc.stdout + proc.stderr
    (case,) = yaml.safe_load(emitted.read_text("utf-8"))["cases"]
    header = json.loads(reg.read_text("utf-8").split("\n", 1)[0])
    assert case["applies"]["role"] == "client" and case["drive"] == ["start", {"play": "fuzz"}]
    assert case["stream"][0]["updates"] == header["stream"]["steps"]
    folder = _cases_with(tmp_path, emitted)
    assert run_cli("lint-cases", "--cases", str(folder)).returncode == 0
    for adapter, fails in ((str(REPO_ROOT / "fixtures" / "clients" / "case_insensitive.py"),
                            {"MID-C-02/merged"}),
                           ("conformance.client.reference.adapter", set())):
        report = tmp_path / f"{Path(adapter).stem}.json"
        run_cli("--client-adapter", f"{adapter}:make_client", "--cases", str(folder), "--case",
                case["id"], "--protocol", "1", "--json", str(report), "--no-color")
        assert _fails(dict(load_json(report)), case["id"]) == fails


def test_emit_case_usage_errors(tmp_path: Path) -> None:
    reg = REPO_ROOT / "fixtures" / "regressions" / "mid-a-09-after-cancel-3f04d29577.jsonl"
    proc = run_cli("replay", str(reg), "--emit-case", str(tmp_path / "x.txt"), "--agent",
                   "false")
    assert proc.returncode == 2 and "must end in .yaml" in proc.stderr


# -- 4. one matrix from many runs ------------------------------------------------------

def test_merge_builds_one_matrix_naming_every_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for name, target in (("reference", REFERENCE), ("numeric", agent("numeric_id"))):
        run_cli("--agent", target, "--protocol", "1", "--case", "prompt-lifecycle", "--json",
                str(runs / f"{name}.json"), "--html", str(runs / f"{name}.html"), "--no-color")
    out = tmp_path / "matrix"
    proc = run_cli("report", "--merge", str(runs / "reference.json"), str(runs / "numeric.json"),
                   "--html", str(out / "m.html"), "--markdown", str(out / "m.md"), "--json",
                   str(out / "m.json"))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one run failed
    matrix = load_json(out / "m.json")
    assert [r["verdict"] for r in matrix["runs"]] == ["pass", "fail"]
    assert [r["report"] for r in matrix["runs"]] == ["../runs/reference.html",
                                                     "../runs/numeric.html"]
    assert len({r["label"] for r in matrix["runs"]}) == 2  # the columns never look alike
    cells = {row["rule"]: row["cells"] for row in matrix["rules"]}
    assert cells["MID-S-01/type"] == ["pass", "fail"] and cells["MID-S-01"] == ["pass", "fail"]
    md, page = (out / "m.md").read_text("utf-8"), (out / "m.html").read_text("utf-8")
    for r in matrix["runs"]:
        assert r["label"] in md and r["catalogue"] in md
    assert "../runs/numeric.html#req-MID-S-01" in page and "../runs/numeric.html#req-MID-S-01" in md


def test_merge_refuses_mixed_catalogue_revisions(tmp_path: Path) -> None:
    base = tmp_path / "a.json"
    run_cli("--agent", REFERENCE, "--protocol", "1", "--case", "prompt-lifecycle", "--json",
            str(base), "--no-color")
    other = json.loads(base.read_text("utf-8"))
    other["graded_against"]["catalogue"] = "sha256:000000000000"
    (tmp_path / "b.json").write_text(json.dumps(other), "utf-8")
    proc = run_cli("report", "--merge", str(base), str(tmp_path / "b.json"), "--markdown",
                   str(tmp_path / "m.md"))
    assert proc.returncode == 2 and not (tmp_path / "m.md").exists()
    assert proc.stderr.count("\n") == 1 and "different catalogue revisions" in proc.stderr
    allowed = run_cli("report", "--merge", str(base), str(tmp_path / "b.json"), "--markdown",
                      str(tmp_path / "m.md"), "--allow-mixed")
    assert allowed.returncode == 0, allowed.stderr
    assert "Mixed catalogue revisions" in (tmp_path / "m.md").read_text("utf-8")
    junk = tmp_path / "junk.json"
    junk.write_text("{}", "utf-8")
    proc = run_cli("report", "--merge", str(junk), "--markdown", str(tmp_path / "x.md"))
    assert proc.returncode == 2 and "not an acp-conformance JSON report" in proc.stderr
    proc = run_cli("report", "--merge", str(base))
    assert proc.returncode == 2 and "give --html, --markdown or --json" in proc.stderr


def test_the_interop_matrix_writes_its_results_through_merge(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("interop_matrix_merge",
                                                  REPO_ROOT / "interop" / "matrix.py")
    assert spec is not None and spec.loader is not None
    interop = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = interop
    spec.loader.exec_module(interop)
    cache = tmp_path / "cache"
    for target in ("ref-a", "ref-b"):
        out = cache / "runs" / target / "suite" / "v1"
        out.mkdir(parents=True)
        run_cli("--agent", REFERENCE, "--protocol", "1", "--case", "prompt-lifecycle", "--json",
                str(out / "report.json"), "--no-color")
    line = interop.write_matrix(cache, tmp_path / "matrix", since=0.0)
    assert "of 2 run(s)" in line, line
    runs = load_json(tmp_path / "matrix" / "matrix.json")["runs"]
    assert sorted(r["report"].split("/")[-4] for r in runs) == ["ref-a", "ref-b"]


def test_a_switch_to_a_session_never_created_is_a_case_file_error(tmp_path: Path) -> None:
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "bad.yaml").write_text(
        "area: x\ncases:\n  - id: sw\n    description: d\n    requirements: [MID-A-02]\n"
        "    applies: {protocols: [1], role: agent}\n    drive:\n      - start\n"
        "      - new_session\n      - switch: {session: 1}\n    checks: [MID-A-02]\n", "utf-8")
    proc = run_cli("lint-cases", "--cases", str(folder))
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("bad.yaml:10: cases/0/drive/2: switch to session #1, "
                                        "but only 1 session(s) were created before it"), proc.stderr
