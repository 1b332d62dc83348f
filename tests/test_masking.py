"""Secrets never reach a file or a console line the suite writes (docs/masking.md).

The fixtures leak their environment as real agents and clients do: on stderr, in a
message's text, inside a messageId, in ``initialize``. A run, a client run, a fuzz run
and a replay go through the real command line; every file they write and every line
they print is searched for the secret values, a non-secret value and a short one stay
visible, and the findings are the same masked or not, live or graded offline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, cli_env, load_json

from conformance import masking
from conformance.github_action import ActionError, shown_arguments, suite_arguments
from conformance.results import Finding, Outcome, RunResult
from conformance.transcript import Transcript, load

LEAKY_AGENT = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'harness' / 'leaks_secrets.py'}"
LEAKY_CLIENT = (f"{sys.executable} {REPO_ROOT / 'fixtures' / 'harness' / 'leaky_client.py'} "
                "--agent-cmd {agent}")
KEY = "sk-agentKEY-7f3a9c"  # --agent-env LEAK_API_KEY: a secret-looking name
TOKEN = "ghp_suiteTOKEN5b21e"  # LEAK_SUITE_TOKEN in the suite's own environment
FLAGGED = "flagged-value-42x"  # --mask: a name that does not look secret
SECRETS = (KEY, TOKEN, FLAGGED)
SETTING = "visible-setting-77"  # LEAK_SETTING: not a secret, stays visible
SHORT = "ab12q"  # LEAK_SHORT: secret-looking name, but shorter than 6 characters
TARGET_ENV = ["--agent-env", f"LEAK_API_KEY={KEY}", "--agent-env", f"LEAK_FLAGGED={FLAGGED}",
              "--agent-env", f"LEAK_SETTING={SETTING}", "--mask", FLAGGED]


def cli(*args: str, env: dict[str, str] | None = None,
        timeout: float = 240) -> subprocess.CompletedProcess[str]:
    full = cli_env()
    full["LEAK_SUITE_TOKEN"] = TOKEN
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "conformance", *args], check=False,
                          capture_output=True, text=True, cwd=REPO_ROOT, env=full,
                          timeout=timeout)


def outputs(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(folder.rglob("*")) if p.is_file()}


def leaks(texts: dict[str, str], values: tuple[str, ...] = SECRETS) -> list[str]:
    return [f"{name}: {v}" for name, text in texts.items() for v in values if v in text]


def report_options(out: Path) -> list[str]:
    return ["--json", str(out / "r.json"), "--junit", str(out / "r.xml"),
            "--html", str(out / "r.html"), "--markdown", str(out / "r.md"),
            "--transcripts", str(out / "t"), "--no-color", "-v"]


def finding_keys(report: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {(r["case"], r["requirement"], r["outcome"], tuple(r["evidence"]["entries"]))
            for r in report["results"]}


# -- which values, and how -------------------------------------------------------------


@pytest.mark.parametrize(("name", "secret"), [
    ("MY_API_KEY", True), ("GITHUB_TOKEN", True), ("ANTHROPIC_API_KEY", True),
    ("githubToken", True), ("APIKEY", True), ("DB_PASSWORD", True), ("db_passwd", True),
    ("X_PASS", True), ("AUTH", True), ("AUTHORIZATION", True), ("AWS_CREDENTIALS", True),
    ("SESSION_COOKIE", True), ("client_secret", True), ("SECRETS", True),
    ("HOME", False), ("PATH", False), ("KEYBOARD_LAYOUT", False), ("GIT_AUTHOR_NAME", False),
    ("PASSENGER_COUNT", False), ("LEAK_SETTING", False),
])
def test_secret_looking_names(name: str, secret: bool) -> None:
    assert masking.secret_name(name) is secret


def test_masker_replaces_every_form_of_a_value_and_leaves_short_ones() -> None:
    m = masking.build(environ={"CI_TOKEN": 'tok"en/1234', "HOME": "/home/someone"},
                      target_env={"MY_KEY": "abc12", "SETTING": "plain-value"},
                      values=["given-value"], names=["SETTING"])
    assert m.count == 3 and m.header() == {"applied": True, "values": 3}
    assert m.text("a tok\"en/1234 b given-value plain-value abc12 /home/someone") \
        == "a *** b *** *** abc12 /home/someone"
    wire = json.dumps({"messageId": 'm-tok"en/1234'}).encode()  # JSON-escaped on the wire
    assert m.bytes(wire) == b'{"messageId": "m-***"}'
    assert m.bytes(wire.replace(b"/", b"\\/")) == b'{"messageId": "m-***"}'
    assert m.text("&lt;tok&quot;en/1234") == "&lt;***"  # as an HTML page escapes it
    f = Finding("MID-A-02", Outcome.FAIL, "ID 'm-given-value' reused", actual=["given-value"],
                entries=(3, 4))
    masked = m.data(f)
    assert masked.message == "ID 'm-***' reused" and masked.actual == ["***"]
    assert masked.outcome is Outcome.FAIL and masked.entries == (3, 4)
    assert m.data(m.data(f)) == masked  # masking twice changes nothing more
    assert not masking.build(environ={"CI_TOKEN": "tok-123456"}, enabled=False)
    assert masking.NO_MASK.header() == {"applied": False, "values": 0}


def test_config_template_entries_with_secret_names() -> None:
    text = ('[model]\napi_key = "sk-live-123456"\nurl = "{model_url}"\n'
            '{"authToken": "tok-999999", "name": "agent-name-1"}\nPASSWORD=hunter2x\n')
    assert masking.config_values(text) == ["sk-live-123456", "tok-999999", "hunter2x"]


def test_the_transcript_records_masked_lines_events_and_header(tmp_path: Path) -> None:
    m = masking.Masker([KEY])
    t = Transcript({"role": "agent", "target": f"agent --key {KEY}"}, masker=m)
    line = t.add(0, "agent", "stdout", json.dumps({"params": {"messageId": f"m-{KEY}"}}).encode())
    t.add(0, "agent", "stderr", f"config: LEAK_API_KEY={KEY}".encode())
    t.add(0, "harness", "harness", event="timeout", data={"stderr_tail": f"key {KEY}"})
    assert line.msg == {"params": {"messageId": "m-***"}}  # what the suite acts on and grades
    path = tmp_path / "t.jsonl"
    t.save(path)
    assert KEY not in path.read_text(encoding="utf-8")
    header, entries = load(path)
    assert header["masking"] == {"applied": True, "values": 1}
    assert header["target"] == "agent --key ***"
    assert [e.raw for e in entries[:2]] == ['{"params": {"messageId": "m-***"}}',
                                             "config: LEAK_API_KEY=***"]


def test_the_model_servers_request_log_is_masked() -> None:
    from conformance.modelserver import ModelServer

    with ModelServer(masker=masking.Masker([KEY])) as server:
        body = json.dumps({"model": "m", "messages": [
            {"role": "user", "content": f"my key is {KEY}"}]}).encode()
        req = urllib.request.Request(f"{server.url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        log = server.take_log()
    assert log and "my key is ***" in json.dumps(log) and KEY not in json.dumps(log)


def test_the_report_data_of_a_run_is_masked_before_it_is_written() -> None:
    m = masking.Masker([TOKEN])
    run = RunResult("0", f"agent {TOKEN}", "agent", [1], "p", False,
                    target_info={"name": f"a-{TOKEN}"})
    masked = m.data(run)
    assert TOKEN not in repr(masked) and masked.target_info == {"name": "a-***"}


def test_the_run_masker_comes_from_the_options_and_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from conformance.cli.options import build_masker
    from conformance.cli.run import build_parser

    template = tmp_path / "config.toml.in"
    template.write_text('base_url = "{model_url}"\napi_key = "sk-from-template-1"\n')
    monkeypatch.setenv("SUITE_DEPLOY_TOKEN", "inherited-value-1")
    monkeypatch.setenv("PLAIN_BUT_NAMED", "named-value-1")
    ns = build_parser().parse_args([
        "--agent", "x", "--agent-env", "MY_KEY=agent-env-value-1", "--agent-env",
        "MY_SETTING=not-a-secret-1", "--agent-config", f"{template}={tmp_path / 'out.toml'}",
        "--mask", "given-value-1", "--mask-env", "PLAIN_BUT_NAMED"])
    m = build_masker(ns)
    text = ("sk-from-template-1 inherited-value-1 named-value-1 agent-env-value-1 "
            "given-value-1 not-a-secret-1")
    assert m.text(text) == "*** *** *** *** *** not-a-secret-1"
    assert capsys.readouterr().err == ""
    ns.no_mask = True
    assert build_masker(ns).text(text) == text
    assert "warning: --no-mask" in capsys.readouterr().err


# -- the action --------------------------------------------------------------------------


def test_the_action_never_passes_no_mask_and_logs_no_secret(tmp_path: Path) -> None:
    env = {"INPUT_AGENT": "my-agent", "INPUT_ARGS": "--no-mask --strict"}
    with pytest.raises(ActionError, match="--no-mask"):
        suite_arguments(env, tmp_path)
    argv = suite_arguments({"INPUT_AGENT": "my-agent", "INPUT_ARGS":
                            f"--mask {FLAGGED} --agent-env MY_API_KEY={KEY} "
                            f"--agent-env LEAK_SETTING={SETTING}"}, tmp_path)
    assert "--no-mask" not in argv
    shown = " ".join(shown_arguments(argv))
    assert KEY not in shown and FLAGGED not in shown and f"LEAK_SETTING={SETTING}" in shown
    action = (REPO_ROOT / "action.yml").read_text(encoding="utf-8")
    assert "--no-mask" not in action


# -- through the real command line -------------------------------------------------------

CASES = ["--case", "ids-across-turns", "--case", "load-fresh-process", "--case",
         "resume-replay-fresh-process"]


def test_an_agent_run_writes_no_secret_and_grades_as_unmasked(tmp_path: Path) -> None:
    masked, plain = tmp_path / "masked", tmp_path / "plain"
    base = ["--agent", LEAKY_AGENT, *TARGET_ENV, "--agent-env", f"LEAK_SHORT={SHORT}", *CASES,
            "-j", "2"]
    run = cli(*base, *report_options(masked))
    assert run.returncode == 0, run.stdout + run.stderr
    texts = outputs(masked)
    assert leaks({**texts, "stdout": run.stdout, "stderr": run.stderr}) == []
    transcripts = {k: v for k, v in texts.items() if k.startswith("t/")}
    assert transcripts and all(SETTING in v and SHORT in v for v in transcripts.values())
    assert any('"m-***-msg_' in v for v in transcripts.values())  # an ID still reads as one
    assert "(token ***)" in "".join(transcripts.values())
    for name in transcripts:
        header, _ = load(masked / name)
        assert header["masking"]["applied"] is True
        assert header["masking"]["values"] >= 3  # the three here, and the environment's own
    live = load_json(masked / "r.json")

    offline = cli("check", str(masked / "t"), "--json", str(tmp_path / "check.json"))
    assert offline.returncode == 0, offline.stdout + offline.stderr
    # one verdict: check on the masked transcripts gives the live rows, all of them
    checked = load_json(tmp_path / "check.json")
    assert sorted(json.dumps(r, sort_keys=True) for r in checked["results"]) == sorted(
        json.dumps(r, sort_keys=True) for r in live["results"])
    assert checked["summary"] == live["summary"]

    unmasked = cli(*base, *report_options(plain), "--no-mask")
    assert unmasked.returncode == 0, unmasked.stdout + unmasked.stderr
    assert "warning: --no-mask" in unmasked.stderr
    # two live runs: the same rows, though entry numbers may differ (stderr interleaves)
    assert {k[:3] for k in finding_keys(load_json(plain / "r.json"))} == \
        {k[:3] for k in finding_keys(live)}
    found = " ".join(leaks(outputs(plain)))  # the fixture leaks: masking is what stops it
    assert all(v in found for v in SECRETS)
    assert '"applied": false' in (plain / "t" / "ids-across-turns@v1.jsonl").read_text()


def test_a_client_run_writes_no_secret(tmp_path: Path) -> None:
    out = tmp_path / "out"
    profile = str(REPO_ROOT / "fixtures" / "clients" / "reference.yaml")
    base = ["--client", LEAKY_CLIENT, "--client-profile", profile, "--case", "client-grouping",
            *TARGET_ENV]
    run = cli(*base, *report_options(out))
    assert run.returncode == 0, run.stdout + run.stderr
    texts = outputs(out)
    assert leaks({**texts, "stdout": run.stdout, "stderr": run.stderr}) == []
    assert "leaky-***" in texts["r.json"]  # the client's name, as it introduced itself
    assert any(SETTING in v for k, v in texts.items() if k.startswith("t/"))
    unmasked = cli(*base, *report_options(tmp_path / "plain"), "--no-mask")
    assert unmasked.returncode == 0, unmasked.stdout + unmasked.stderr
    found = " ".join(leaks(outputs(tmp_path / "plain")))
    assert all(v in found for v in SECRETS)
    assert {k[:3] for k in finding_keys(load_json(tmp_path / "plain" / "r.json"))} == \
        {k[:3] for k in finding_keys(load_json(out / "r.json"))}


def test_a_fuzz_run_and_its_replay_write_and_print_no_secret(tmp_path: Path) -> None:
    out, library = tmp_path / "out", tmp_path / "regressions"
    target = ["--agent", LEAKY_AGENT, *TARGET_ENV, "--agent-env", "LEAK_REUSE_IDS=1"]
    fuzz = cli("fuzz", *target, "--max-examples", "5", "--seed", "1", "--max-failures", "1",
               "--regressions", str(library), *report_options(out), timeout=300)
    assert fuzz.returncode == 1, fuzz.stdout + fuzz.stderr  # the reused ID is found
    assert "m-***-reused" in fuzz.stdout and "minimal counterexample" in fuzz.stdout
    saved = sorted(library.glob("*.jsonl"))
    assert saved
    texts = {**outputs(out), **outputs(library), "stdout": fuzz.stdout, "stderr": fuzz.stderr}
    assert leaks(texts) == []
    assert SETTING in "".join(outputs(library).values())
    replay = cli("replay", *map(str, saved), *target)
    assert replay.returncode == 1 and "STILL FAILING" in replay.stdout, replay.stdout
    assert "m-***-reused" in replay.stdout
    assert leaks({"stdout": replay.stdout, "stderr": replay.stderr, **outputs(library)}) == []
