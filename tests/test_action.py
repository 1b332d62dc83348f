"""The GitHub Action (action.yml), run the way the runner runs a composite action.

Each ``run:`` step is written to a script file and run with ``bash --noprofile
--norc -eo pipefail``, in ``GITHUB_WORKSPACE``, with ``GITHUB_ACTION_PATH``,
``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY`` and ``RUNNER_TEMP`` set to temporary
files and folders, and every ``${{ inputs.* }}`` / ``${{ steps.*.outputs.* }}``
expression substituted (inputs take their defaults); an expression this emulator
does not know fails the test rather than being guessed. The action's outputs are
its ``outputs.*.value`` expressions, resolved from the steps' output files.

Runs against the reference agent (green), a broken agent (red), a broken agent
with a baseline, a client, and bad inputs use ``install: false`` with this
interpreter (no network); the default install path is run offline too, from a
copy of the checkout, with pip told not to reach an index.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT

from conformance.github_action import suite_arguments

ACTION = yaml.safe_load((REPO_ROOT / "action.yml").read_text(encoding="utf-8"))
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
BROKEN = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'per_turn_counter.py'}"
CASES = "--case ids-across-turns --case prompt-lifecycle"


@dataclass
class ActionRun:
    status: int  # exit status of the first failing step, else 0
    outputs: dict[str, str]  # the action's outputs
    summary: str  # the job summary the steps wrote
    log: str  # stdout and stderr of the steps
    steps: dict[str, dict[str, str]] = field(default_factory=dict)  # outputs per step id


def read_outputs(path: Path) -> dict[str, str]:
    """A ``$GITHUB_OUTPUT`` file: ``name=value`` lines and ``name<<DELIMITER`` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        name, value = line.split("=", 1)
        assert name not in out, f"output {name} set twice"
        out[name] = value
        i += 1
    return out


def substitute(text: str, inputs: dict[str, str], steps: dict[str, dict[str, str]]) -> str:
    def value(m: re.Match[str]) -> str:
        expr = m.group(1)
        if expr.startswith("inputs."):
            return inputs[expr.removeprefix("inputs.")]
        found = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr)
        assert found, f"an expression the emulator does not know: {expr}"
        return steps.get(found.group(1), {}).get(found.group(2), "")
    return EXPRESSION.sub(value, text)


def run_action(tmp: Path, given: dict[str, str], *, action_path: Path = REPO_ROOT,
               env: dict[str, str] | None = None, timeout: float = 300,
               only: str | None = None) -> ActionRun:
    """Run the action's steps (or the one with id ``only``) as the runner would."""
    unknown = set(given) - set(ACTION["inputs"])
    assert not unknown, f"inputs the action does not declare: {unknown}"
    inputs = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    inputs.update(given)
    workspace, runner_temp = tmp / "workspace", tmp / "runner-temp"
    workspace.mkdir(exist_ok=True)
    runner_temp.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))}
    base.update(GITHUB_ACTIONS="true", CI="true", GITHUB_WORKSPACE=str(workspace),
                GITHUB_ACTION_PATH=str(action_path), RUNNER_TEMP=str(runner_temp),
                PYTHONPATH="", **(env or {}))
    steps: dict[str, dict[str, str]] = {}
    summary, log, status = [], [], 0
    for number, step in enumerate(ACTION["runs"]["steps"]):
        if only is not None and step["id"] != only:
            continue
        if "uses" in step:  # an action of GitHub's (the bundle's upload): not emulated here
            continue
        assert set(step) <= {"name", "id", "shell", "run", "env"}, step  # no if:, no uses:
        assert step["shell"] == "bash"
        script = tmp / f"step-{number}.sh"
        script.write_text(substitute(step["run"], inputs, steps), encoding="utf-8")
        files = {"GITHUB_OUTPUT": tmp / f"output-{number}", "GITHUB_STEP_SUMMARY":
                 tmp / f"summary-{number}.md"}
        for f in files.values():
            f.write_text("")
        step_env = dict(base, **{k: str(v) for k, v in files.items()})
        step_env.update({k: substitute(str(v), inputs, steps)
                         for k, v in step.get("env", {}).items()})
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=workspace, env=step_env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        log.append(done.stdout + done.stderr)
        steps[step["id"]] = read_outputs(files["GITHUB_OUTPUT"])
        summary.append(files["GITHUB_STEP_SUMMARY"].read_text(encoding="utf-8"))
        if done.returncode != 0:
            status = done.returncode
            break
    outputs = {name: substitute(spec["value"], inputs, steps)
               for name, spec in ACTION["outputs"].items()}
    return ActionRun(status, outputs, "".join(summary), "".join(log), steps)


def local(**inputs: str) -> dict[str, str]:
    """Inputs for a run with this interpreter, which already has the package."""
    return {"python": sys.executable, "install": "false", **inputs}


def reference_agent() -> str:
    from conformance.cli.demo import reference_agent_command

    return subprocess.list2cmdline(reference_agent_command())


# -- action.yml itself ------------------------------------------------------------


def test_action_yml_is_a_complete_composite_action() -> None:
    assert {"name", "description", "inputs", "outputs", "runs"} <= set(ACTION)
    assert ACTION["runs"]["using"] == "composite"
    steps = ACTION["runs"]["steps"]
    ids = [s["id"] for s in steps]
    assert len(set(ids)) == len(ids) == len(steps)
    for step in steps:
        if "uses" in step:  # the runner's own upload of the bundle: only when certify wrote one
            assert step["uses"].startswith("actions/upload-artifact@"), step
            assert "steps.run.outputs.bundle" in step["if"], step
            continue
        assert step["shell"] == "bash" and "run" in step
        assert "${{" not in step["run"], "inputs go through env:, never into the script text"
        assert "github_action.py" in step["run"]  # the logic lives in a script file
    for name, spec in ACTION["inputs"].items():
        assert spec["description"] and spec.get("required") is False, name
        assert "default" in spec, name
    used = {m.group(1) for s in steps for v in [*s.get("env", {}).values(),
                                                 *s.get("with", {}).values()]
            for m in re.finditer(r"inputs\.([\w-]+)", str(v))}
    assert used == set(ACTION["inputs"]), "every input is used, and only declared ones"
    for name, spec in ACTION["outputs"].items():
        assert spec["description"], name
        found = re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}", spec["value"])
        assert found and found.group(1) in ids, name


def test_every_input_the_script_reads_is_passed() -> None:
    source = (REPO_ROOT / "conformance" / "github_action.py").read_text(encoding="utf-8")
    read = set(re.findall(r'_(?:input|flag)\(env, "([\w-]+)"', source))
    passed = {k.removeprefix("INPUT_").lower().replace("_", "-")
              for s in ACTION["runs"]["steps"] for k in s.get("env", {}) if k.startswith("INPUT_")}
    assert read and read <= passed, read - passed


# -- runs -------------------------------------------------------------------------


def test_reference_agent_is_green(tmp_path: Path) -> None:
    run = run_action(tmp_path, local(agent=reference_agent(), args=CASES,
                                     profile="acp-repo-2026-08-22"))
    assert run.status == 0, run.log
    assert set(run.steps["run"]) == set(ACTION["outputs"])  # the step sets every output
    assert run.outputs["bundle"] == run.outputs["badge"] == ""  # certify is off by default
    assert all(v for k, v in run.outputs.items() if k not in ("bundle", "badge"))
    assert run.outputs["verdict"] == "pass"
    out = tmp_path / "workspace" / "acp-conformance-reports"
    assert run.outputs["json"] == str(out / "acp-conformance.json")
    report = json.loads(Path(run.outputs["json"]).read_text(encoding="utf-8"))
    assert report["summary"]["verdict"] == "pass" and report["summary"]["fail"] == 0
    assert report["profile"] == "acp-repo-2026-08-22" and report["protocols"] == [1, 2]
    assert {c["case"] for c in report["cases"]} == {
        "ids-across-turns@v1", "ids-across-turns@v2", "prompt-lifecycle@v1",
        "prompt-lifecycle@v2"}
    assert ET.parse(run.outputs["junit"]).getroot().tag in ("testsuites", "testsuite")
    assert Path(run.outputs["html"]).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert run.summary == Path(run.outputs["markdown"]).read_text(encoding="utf-8")
    assert "PASS" in run.summary
    assert (out / "transcripts" / "prompt-lifecycle@v2.jsonl").is_file()
    assert "::error" not in run.log


def test_certify_writes_the_bundle_the_upload_step_takes(tmp_path: Path) -> None:
    run = run_action(tmp_path, local(agent=reference_agent(), args=CASES, protocol="1",
                                     certify="true"))
    assert run.status == 0, run.log
    out = tmp_path / "workspace" / "acp-conformance-reports"
    assert run.outputs["bundle"] == str(out / "acp-conformance-certification.tar.gz")
    assert run.outputs["badge"] == str(out / "acp-conformance-certification" / "badge.svg")
    assert Path(run.outputs["badge"]).read_text(encoding="utf-8").startswith("<svg")
    upload = next(s for s in ACTION["runs"]["steps"] if "uses" in s)
    assert upload["with"]["path"] == "${{ steps.run.outputs.bundle }}"
    from conftest import run_cli

    verified = run_cli("verify", run.outputs["bundle"])
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_broken_agent_is_red(tmp_path: Path) -> None:
    decoy = tmp_path / "workspace" / "conformance"  # a vendor's own folder of that name
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy was imported')\n")
    (decoy / "github_action.py").write_text("raise SystemExit('the decoy was imported')\n")
    run = run_action(tmp_path, local(agent=BROKEN, protocol="1", args=CASES))
    assert "decoy" not in run.log
    assert run.status == 1, run.log
    assert run.outputs["verdict"] == "fail"
    assert "FAIL" in run.summary and "MID-A-02" in run.summary
    report = json.loads(Path(run.outputs["json"]).read_text(encoding="utf-8"))
    assert report["protocols"] == [1]
    assert {r["requirement"] for r in report["results"] if r["outcome"] == "fail"} == {
        "MID-A-02/cross-turn-reuse", "MID-A-02/user-message-reuse"}
    assert all(Path(run.outputs[k]).is_file() for k in ("junit", "html", "markdown"))
    annotations = [line for line in run.log.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 2, run.log  # one per failing rule, no generic one
    cross = next(a for a in annotations if "MID-A-02/cross-turn-reuse::" in a)
    # the bundled case file lies outside the workspace GitHub checked out (the action's own
    # checkout): the annotation names the rule and the case, and no file a viewer cannot open
    assert cross.startswith("::error title=acp-conformance MID-A-02/cross-turn-reuse::")
    assert "ids-across-turns@v1: " in cross and "%0Aexpected: a fresh ID per message" in cross


def test_a_baseline_turns_known_failures_green(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "known.yaml").write_text(
        "expected_failures:\n  - ids-across-turns@v1:MID-A-02/cross-turn-reuse\n"
        "  - ids-across-turns@v1:MID-A-02/user-message-reuse\n", encoding="utf-8")
    run = run_action(tmp_path, local(agent=BROKEN, protocol="1", baseline="known.yaml",
                                     args="--case ids-across-turns"))
    assert run.status == 0, run.log
    assert run.outputs["verdict"] == "pass"
    assert "verdict with baseline: PASS" in run.log
    assert "Baseline" in run.summary or "baseline" in run.summary
    assert "::error" not in run.log  # a listed failure is not annotated


def proxy_fixture(name: str) -> str:
    return f"{sys.executable} {REPO_ROOT / 'fixtures' / 'proxies' / f'{name}.py'} {{agent}}"


def test_a_proxy_in_front_of_the_agent_double_is_graded_and_each_rule_annotated(
        tmp_path: Path) -> None:
    run = run_action(tmp_path, local(proxy=proxy_fixture("rewrites_ids"), protocol="1",
                                     args="--case proxy-grouping --case "
                                          "proxy-v1-null-omitted-malformed"))
    assert run.status == 1, run.log
    assert run.outputs["verdict"] == "fail"
    report = json.loads(Path(run.outputs["json"]).read_text(encoding="utf-8"))
    assert report["role"] == "proxy"
    failed = {r["requirement"] for r in report["results"] if r["outcome"] == "fail"}
    assert {r.split("/")[0] for r in failed} == {"MID-P-01", "MID-P-02"}, failed
    annotations = [line for line in run.log.splitlines() if line.startswith("::error ")]
    titles = sorted(a.split("title=acp-conformance ", 1)[1].split("::", 1)[0]
                    for a in annotations)
    assert titles == sorted(failed), run.log  # one ::error per failing rule, nothing else
    assert all("::proxy-" in a and "@v1: " in a for a in annotations)
    transcripts = tmp_path / "workspace" / "acp-conformance-reports" / "transcripts"
    assert (transcripts / "proxy-grouping@v1.jsonl").is_file()


def test_a_proxy_in_front_of_a_real_agent_and_a_declared_adapter(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run = run_action(tmp_path / "a", local(proxy=proxy_fixture("transparent"),
                                           agent=reference_agent(), protocol="1",
                                           args="--case ids-across-sessions"))
    assert run.status == 0, run.log
    assert run.outputs["verdict"] == "pass" and "::error" not in run.log
    # measured, not vacuous: the proxy's own rules were graded on the played case
    played = json.loads(Path(run.outputs["json"]).read_text(encoding="utf-8"))
    assert {r["requirement"].split("/")[0] for r in played["results"]
            if r["outcome"] == "pass"} >= {"MID-P-01", "MID-P-03"}
    assert f"--proxy {proxy_fixture('transparent')}"[:40] in run.log.replace("'", "")
    run = run_action(tmp_path / "b", local(proxy=proxy_fixture("fans_out_late"),
                                           **{"proxy-adapts": "true"},
                                           args="--case proxy-v2-upserts"))
    assert run.status == 1, run.log
    report = json.loads(Path(run.outputs["json"]).read_text(encoding="utf-8"))
    assert "MID-V2-10" in {r["requirement"].split("/")[0] for r in report["results"]
                           if r["outcome"] == "fail"}
    assert "title=acp-conformance MID-V2-10" in run.log


def test_annotations_are_capped_at_ten_with_a_count() -> None:
    from conformance.report.annotations import github_annotations
    from conformance.results import CaseResult, Finding, Outcome, RunResult

    result = RunResult("0", "t", "agent", [1], "p", False)
    case = CaseResult("ids-across-turns@v1", "", [], 1)
    case.findings = [Finding(f"MID-A-{n:02}", Outcome.FAIL, f"broke {n}, badly\nreally",
                             case=case.case, entries=(n,)) for n in range(1, 14)]
    result.cases = [case]
    lines = github_annotations(result, sources={"ids-across-turns": "cases/identity.yaml:3"})
    assert len(lines) == 11
    assert lines[0] == ("::error file=cases/identity.yaml,line=3,title=acp-conformance "
                        "MID-A-01::ids-across-turns@v1: broke 1, badly%0Areally%0A1 fault in "
                        "1 case")
    assert lines[10].startswith("::error title=acp-conformance::3 more failing rule(s)")
    assert "(13 failing rule(s) in all)" in lines[10]


def test_model_server_serves_an_llm_backed_agent(tmp_path: Path) -> None:
    llm = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'llm_agent.py'}"
    run = run_action(tmp_path, local(agent=llm, protocol="1", **{"model-server": "true"},
                                     args="--case ids-across-turns --timeout 20"))
    assert run.status == 0, run.log
    transcript = (tmp_path / "workspace" / "acp-conformance-reports" / "transcripts"
                  / "ids-across-turns@v1.jsonl")
    header = json.loads(transcript.read_text(encoding="utf-8").split("\n", 1)[0])
    assert header["model_url"].startswith("http://127.0.0.1:") and header["model_requests"]


def test_a_client_with_its_profile(tmp_path: Path) -> None:
    """A client vendor's run: a relative client script and profile in the workspace."""
    workspace = tmp_path / "workspace"
    shutil.copytree(REPO_ROOT / "fixtures" / "clients", workspace / "ci")
    run = run_action(tmp_path, local(
        client=f"{sys.executable} ci/case_insensitive.py --agent-cmd {{agent}}",
        **{"client-profile": "ci/reference.yaml"}, args="--case client-opacity",
        **{"output-dir": "out"}))
    assert run.status == 1, run.log
    assert run.outputs["verdict"] == "fail"
    report = json.loads(Path(run.outputs["json"]).read_text(encoding="utf-8"))
    assert report["role"] == "client"
    failed = {r["requirement"] for r in report["results"] if r["outcome"] == "fail"}
    assert "MID-C-02/merged" in failed and "MID-C-08/exit" not in failed, failed
    assert run.outputs["json"].startswith(str(workspace / "out"))


@pytest.mark.parametrize("inputs,message", [
    ({}, "nothing to test: give the input agent"),
    ({"proxy": "p {agent}", "client": "my-cli {agent}"},
     "the input client does not apply to the proxy role (the input proxy): leave it out"),
    ({"proxy-adapts": "true"}, "the input proxy-adapts needs the input proxy"),
    ({"agent": "my-agent", "proxy-adapts": "true"},
     "the input proxy-adapts does not apply to the agent role (the input agent)"),
    ({"agent": "my-agent", "client": "my-cli {agent}"},
     "the input agent and the input client test different sides: run them separately"),
    ({"agent": "my-agent", "client-profile": "p.yaml"},
     "the input client-profile does not apply to the agent role (the input agent)"),
    ({"proxy": "p {agent}", "proxy-adapts": "true", "protocol": "1"},
     "the input proxy-adapts runs the v2 cases (v2 behind the proxy, v1 in front): not with "
     "the input protocol 1"),
    ({"agent": "my-agent", "model-server": "yes"}, "model-server: expected true or false"),
    ({"agent": "my-agent", "args": "--case 'unclosed"}, "input args: No closing quotation"),
])
def test_bad_inputs_are_one_error_and_exit_2(tmp_path: Path, inputs: dict[str, str],
                                             message: str) -> None:
    run = run_action(tmp_path, local(**inputs))
    assert run.status == 2, run.log
    assert "::error title=acp-conformance::" in run.log and message in run.log, run.log
    assert run.outputs == {"verdict": "error", "json": "", "junit": "", "html": "",
                           "markdown": "", "bundle": "", "badge": ""}
    assert set(run.steps["run"]) == set(ACTION["outputs"])
    assert "the action's inputs cannot be used" in run.summary


def test_a_suite_usage_error_is_verdict_error(tmp_path: Path) -> None:
    run = run_action(tmp_path, local(agent=reference_agent(), args="--case no-such-case"))
    assert run.status == 2, run.log
    assert run.outputs["verdict"] == "error" and run.outputs["json"] == ""
    assert "the suite could not run (exit 2)" in run.summary
    assert "no-such-case" in run.log


def test_install_false_needs_an_importable_package(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    run = run_action(tmp_path, {"python": bare, "install": "false", "agent": "x"})
    assert run.status == 2, run.log
    assert f"::error title=acp-conformance::input install is false, but {bare} cannot " \
           "import acp-conformance" in run.log
    assert run.steps == {"install": {}}  # the run step never started


def test_the_default_path_installs_from_the_action_checkout(tmp_path: Path) -> None:
    """install: true (the default) makes a virtualenv in RUNNER_TEMP and pip-installs the
    action's own checkout into it. Offline here (no index, no dependencies, no build
    isolation): where the new virtualenv can build a wheel, the installed package must carry
    its cases; where it cannot (no wheel package offline), the step must fail, say so, and
    set no interpreter for the run step."""
    checkout = tmp_path / "action"
    shutil.copytree(REPO_ROOT, checkout, ignore=shutil.ignore_patterns(
        ".git", "*.egg-info", "build", "reports", "__pycache__", ".tox", ".hypothesis",
        ".pytest_cache", ".venv", ".ci-venv"))
    env = {"PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1", "PIP_NO_BUILD_ISOLATION": "0",
           "PIP_NO_CACHE_DIR": "1"}
    # the install step only: the run step needs the dependencies this offline install skips
    run = run_action(tmp_path, {"python": sys.executable}, action_path=checkout, env=env,
                     only="install")
    python = tmp_path / "runner-temp" / "acp-conformance-venv" / "bin" / "python"
    assert python.is_file(), run.log
    assert f"pip install --disable-pip-version-check --no-input {checkout}" in run.log
    assert "acp_conformance" in run.log or "acp-conformance" in run.log  # pip built it
    if run.status != 0:
        assert f"::error title=acp-conformance::installing from {checkout} failed" in run.log
        assert run.steps["install"] == {}
        return
    assert run.steps["install"] == {"python": str(python)}
    code = ("import conformance, importlib.resources as r; print(conformance.__file__); "
            "print((r.files('conformance') / '_cases' / 'identity.yaml').is_file())")
    where = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                           check=True, cwd=tmp_path, env={"PATH": os.environ["PATH"]})
    module, cases = where.stdout.split()
    assert module.startswith(str(tmp_path / "runner-temp")) and cases == "True"


def test_jobs_and_model_server_are_forwarded_only_when_given(tmp_path: Path) -> None:
    env = {"INPUT_AGENT": "my-agent --acp", "INPUT_JOBS": "", "INPUT_MODEL_SERVER": "false"}
    plain = suite_arguments(env, tmp_path)
    assert "--jobs" not in plain and "--model-server" not in plain
    assert plain[:4] == ["--agent", "my-agent --acp", "--protocol", "both"]
    given = suite_arguments(dict(env, INPUT_JOBS="4", INPUT_MODEL_SERVER="true",
                                 INPUT_PROFILE="acp-repo-2026-08-22",
                                 INPUT_ARGS="--strict --json elsewhere.json"), tmp_path)
    assert given[given.index("--jobs") + 1] == "4" and "--model-server" in given
    assert "--repeat" not in plain
    repeated = suite_arguments(dict(env, INPUT_REPEAT="3"), tmp_path)
    assert repeated[repeated.index("--repeat") + 1] == "3"
    assert given[given.index("--profile") + 1] == "acp-repo-2026-08-22"
    # the action's own report paths come last, so they win over the same option in args
    assert given[len(given) - 1 - given[::-1].index("--json") + 1] == str(
        tmp_path / "acp-conformance.json")


def test_multiline_outputs_use_the_delimiter_form(tmp_path: Path) -> None:
    from conformance.github_action import set_output

    path = tmp_path / "out"
    set_output({"GITHUB_OUTPUT": str(path)}, "one", "a=b")
    set_output({"GITHUB_OUTPUT": str(path)}, "two", "line 1\nline 2")
    assert read_outputs(path) == {"one": "a=b", "two": "line 1\nline 2"}


def test_a_summary_over_githubs_limit_is_cut_at_a_line(tmp_path: Path) -> None:
    from conformance.github_action import SUMMARY_LIMIT, _capped

    big = tmp_path / "big.md"
    big.write_text("| row | é |\n" * (SUMMARY_LIMIT // 10), encoding="utf-8")
    text = _capped(big)
    assert len(text.encode("utf-8")) <= SUMMARY_LIMIT
    body, note = text.rsplit("\n\n\n", 1)
    assert all(line == "| row | é |" for line in body.splitlines())
    assert note == f"(cut here: the whole summary is {big})\n"
    small = tmp_path / "small.md"
    small.write_text("# ok\n", encoding="utf-8")
    assert _capped(small) == "# ok\n"


def test_the_readme_workflows_use_the_action_as_declared() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    snippet = readme.split("## In CI\n", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    steps = yaml.safe_load(snippet)  # the landing page's lines, as pasted
    assert set(steps[0]["with"]) <= set(ACTION["inputs"]) and "agent" in steps[0]["with"]
    upload = steps[1]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["if"] == "always()"  # a failing run's reports are the ones wanted
    assert upload["with"]["path"].rstrip("/") == ACTION["inputs"]["output-dir"]["default"]
    assert upload["with"]["name"]
    manual = (REPO_ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = manual.split("\n## ", 1)[1].split("\n## ", 1)[0]
    assert section.startswith("The GitHub Action\n")  # the action comes first
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 3  # an agent vendor, a client vendor, a proxy vendor's steps
    default_dir = ACTION["inputs"]["output-dir"]["default"]
    kinds = []
    for block in blocks:
        doc = yaml.safe_load(block)
        steps = doc["jobs"]["acp-conformance"]["steps"] if isinstance(doc, dict) else doc
        ours = [s for s in steps if str(s.get("uses", "")).startswith("OWNER/acp-conformance@")]
        assert len(ours) == 1
        given = set(ours[0]["with"])
        assert given <= set(ACTION["inputs"])
        kind = "proxy" if "proxy" in given else "client" if "client" in given else "agent"
        kinds.append(kind)
        assert kind == "proxy" or "baseline" in given
        assert not ("agent" in given and "client" in given)
        upload = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
        assert upload and upload[0]["if"] == "always()"
        assert upload[0]["with"]["path"].rstrip("/") == default_dir
        for expr in re.findall(r"steps\.acp\.outputs\.(\w+)", block):
            assert expr in ACTION["outputs"], expr
    assert kinds == ["agent", "client", "proxy"]


def test_an_annotation_names_no_file_outside_the_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundled case file of an installed suite lies outside the repository GitHub checked
    out: its annotation names no file rather than a path no viewer can open."""
    from conformance.report.annotations import github_annotations
    from conformance.results import CaseResult, Finding, Outcome, RunResult

    (tmp_path / "work" / "cases").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    result = RunResult("0", "t", "agent", [1], "p", False)
    case = CaseResult("c@v1", "", [], 1)
    case.findings = [Finding("MID-A-02", Outcome.FAIL, "broke", case=case.case, entries=(1,))]
    result.cases = [case]
    inside = github_annotations(result, sources={"c": str(tmp_path / "work/cases/x.yaml:4")})
    outside = github_annotations(result, sources={"c": "/elsewhere/site-packages/x.yaml:4"})
    assert inside[0].startswith("::error file=cases/x.yaml,line=4,")
    assert outside[0].startswith("::error title=acp-conformance MID-A-02::")
