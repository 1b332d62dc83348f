"""Bad input is rejected clearly: one line naming the file and line (or the option), exit 2.

Our own inputs (case files, client profiles, transcripts, options, the target
command) are checked before anything runs. Every row below builds a broken
input, runs the command line on it and asserts: exit status 2, exactly one
line on stderr starting with ``acp-conformance: error:``, the file:line or
option named, no traceback, and nothing on stdout that looks like a run.
The table runs in-process through ``cli.main`` (fast); a sample also runs as a
real subprocess.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.cli import main

REPO = Path(__file__).resolve().parents[1]
AGENT = f"{sys.executable} {REPO / 'fixtures' / 'hostile' / 'agents' / 'exit_at_start.py'}"

GOOD_CASE = """\
area: x
cases:
  - id: bad-one
    description: The agent does a thing
    requirements: [MID-S-06]
    applies: {protocols: [1], role: agent}
    drive: [start]
    checks: [MID-S-06]
"""

GOOD_PROFILE = """\
ready: '^> $'
submit: "{prompt}\\r"
message: '^(?P<role>\\w+): (?P<text>.*)$'
"""


def transcript_lines() -> list[str]:
    header = {"format": "acp-conformance-transcript", "version": 1, "tool": "t", "role": "agent",
              "protocol": 1, "profile": "acp-sdk-2.4.0", "target": "x", "case": "c@v1"}
    entries = [
        {"seq": 0, "t": 0.0, "conn": 0, "src": "harness", "stream": "harness", "event": "start",
         "data": {"argv": ["x"], "pid": 1, "pgid": 1}},
        {"seq": 1, "t": 0.1, "conn": 0, "src": "client", "stream": "stdin",
         "raw": '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}',
         "msg": {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}},
        {"seq": 2, "t": 0.2, "conn": 0, "src": "agent", "stream": "stdout",
         "raw": '{"jsonrpc":"2.0","id":0,"result":{}}',
         "msg": {"jsonrpc": "2.0", "id": 0, "result": {}}},
    ]
    return [json.dumps(header)] + [json.dumps(e) for e in entries]


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, "utf-8")
    return path


def case_dir(tmp: Path, text: str | bytes, *, second: str | None = None) -> list[str]:
    write(tmp / "cases" / "a.yaml", text)
    if second is not None:
        write(tmp / "cases" / "b.yaml", second)
    return ["--agent", AGENT, "--cases", str(tmp / "cases")]


def profile(tmp: Path, text: str | bytes) -> list[str]:
    path = write(tmp / "client.yaml", text)
    return ["--client", f"{sys.executable} -c pass", "--client-profile", str(path),
            "--protocol", "1"]


def transcript(tmp: Path, text: str | bytes) -> list[str]:
    return ["check", str(write(tmp / "t.jsonl", text))]


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


T = transcript_lines()
ALIAS_BOMB = GOOD_CASE.replace("checks: [MID-S-06]", "checks: &c0 [a, b, c, d, e, f, g, h, i]") + (
    "".join(f"    x{i}: &c{i} [{', '.join([f'*c{i - 1}'] * 9)}]\n" for i in range(1, 10)))

Build = Callable[[Path], list[str]]
ROWS: list[tuple[str, Build, str]] = [
    # ---- case files --------------------------------------------------------
    ("case-invalid-yaml", lambda t: case_dir(t, GOOD_CASE.replace("[start]", "[start")),
     "a.yaml:8: invalid YAML"),
    ("case-unknown-key", lambda t: case_dir(t, GOOD_CASE.replace("description", "descripton")),
     "a.yaml:4: cases/0: unknown key 'descripton'"),
    ("case-wrong-type", lambda t: case_dir(t, GOOD_CASE.replace("protocols: [1]", "protocols: one")),
     "a.yaml:6: cases/0/applies/protocols: 'one' is not of type 'array'"),
    ("case-missing-field", lambda t: case_dir(t, GOOD_CASE.replace("    checks: [MID-S-06]\n", "")),
     "a.yaml:3: cases/0: 'checks' is a required property"),
    ("case-unknown-step", lambda t: case_dir(t, GOOD_CASE.replace("[start]", "[start, dance]")),
     'a.yaml:7: cases/0/drive/1: not a known step: "dance"'),
    ("case-unknown-requirement", lambda t: case_dir(t, GOOD_CASE.replace("[MID-S-06]\n    app",
                                                                          "[MID-NOPE]\n    app")),
     "a.yaml:5: cases/0/requirements/0: 'MID-NOPE' does not match"),
    ("case-duplicate-key", lambda t: case_dir(t, GOOD_CASE + "    drive: [start]\n"),
     "a.yaml:9: duplicate key 'drive'"),
    ("case-duplicate-id", lambda t: case_dir(t, GOOD_CASE, second=GOOD_CASE),
     "b.yaml:3: duplicate case id 'bad-one' (first at "),
    ("case-empty", lambda t: case_dir(t, ""), "a.yaml:1: empty file"),
    ("case-not-utf8", lambda t: case_dir(t, GOOD_CASE.encode() + b"# caf\xe9\n"),
     "a.yaml:1: case file is not UTF-8"),
    ("case-alias-bomb", lambda t: case_dir(t, ALIAS_BOMB), "more than 50000 values"),
    ("case-deep-nesting", lambda t: case_dir(t, "a: " + "[" * 500 + "]" * 500 + "\n"),
     "a.yaml:1: invalid YAML: nested too deeply"),
    ("case-dir-missing", lambda t: ["--agent", AGENT, "--cases", str(t / "nope")],
     "nope: no such cases directory"),
    # ---- client profiles -----------------------------------------------------
    ("profile-invalid-yaml", lambda t: profile(t, GOOD_PROFILE + "quit: [x\n"),
     "client.yaml:5: invalid YAML"),
    ("profile-unknown-key", lambda t: profile(t, GOOD_PROFILE + "rendr: cumulative\n"),
     "client.yaml:4: unknown key 'rendr'"),
    ("profile-bad-regex", lambda t: profile(t, GOOD_PROFILE.replace("(?P<role>", "(?P<role")),
     "client.yaml:3: message is not a valid regex"),
    ("profile-missing-message", lambda t: profile(t, "ready: '^> $'\n"),
     "client.yaml:1: missing key 'message'"),
    ("profile-bad-render", lambda t: profile(t, GOOD_PROFILE + "render: sideways\n"),
     "client.yaml:4: render must be cumulative or incremental"),
    ("profile-not-a-mapping", lambda t: profile(t, "- a\n- b\n"),
     "client.yaml:1: a client profile is a mapping"),
    ("profile-not-utf8", lambda t: profile(t, b"\xff\xfe"), "client.yaml:1: client profile is not UTF-8"),
    ("profile-missing", lambda t: ["--client", "x", "--client-profile", str(t / "nope.yaml")],
     "nope.yaml: cannot read client profile"),
    # ---- transcripts -----------------------------------------------------------
    ("transcript-empty", lambda t: transcript(t, ""), "t.jsonl:1: empty file"),
    ("transcript-header-not-json", lambda t: transcript(t, "hello\n"),
     "t.jsonl:1: header is not JSON"),
    ("transcript-not-a-transcript", lambda t: transcript(t, '{"format": "acp-conformance-report"}\n'),
     "t.jsonl:1: not an acp-conformance-transcript file"),
    ("transcript-future-version", lambda t: transcript(t, lines(T[0].replace('"version": 1',
                                                                              '"version": 99')))
     , "t.jsonl:1: transcript format version 99 is not supported"),
    ("transcript-truncated", lambda t: transcript(t, lines(*T[:3]) + T[3][:40]),
     "t.jsonl:4: truncated last line"),
    ("transcript-corrupt-line", lambda t: transcript(t, lines(T[0], T[1], "{{{garbage", T[2])),
     "t.jsonl:3: entry is not JSON"),
    ("transcript-missing-key", lambda t: transcript(t, lines(T[0], '{"seq": 0, "t": 0}')),
     "t.jsonl:2: entry lacks required key 'conn'"),
    ("transcript-wrong-type", lambda t: transcript(t, lines(T[0], T[1].replace('"t": 0.0', '"t": "x"'))),
     "t.jsonl:2: seq, conn must be integers and t a number"),
    ("transcript-raw-not-string", lambda t: transcript(t, lines(T[0], T[1], T[2].replace(
        '"raw": "{', '"raw": 5, "x": "{'))), "t.jsonl:3: 'raw' must be a string"),
    ("transcript-header-role-not-string", lambda t: transcript(t, lines(T[0].replace(
        '"role": "agent"', '"role": ["agent"]'), *T[1:])),
     "t.jsonl:1: header 'role' must be a string, not an array"),
    ("transcript-header-protocol-not-integer", lambda t: transcript(t, lines(T[0].replace(
        '"protocol": 1', '"protocol": "1"'), *T[1:])),
     "t.jsonl:1: header 'protocol' must be an integer, not a string"),
    ("transcript-header-protocol-boolean", lambda t: transcript(t, lines(T[0].replace(
        '"protocol": 1', '"protocol": true'), *T[1:])),
     "t.jsonl:1: header 'protocol' must be an integer, not a boolean"),
    ("transcript-header-requirements-not-array", lambda t: transcript(t, lines(T[0].replace(
        '"role"', '"requirements": "MID-S-06", "role"'), *T[1:])),
     "t.jsonl:1: header 'requirements' must be an array, not a string"),
    ("transcript-harness-data-not-object", lambda t: transcript(t, lines(T[0], T[1].replace(
        '"data": {', '"data": [{').replace('}}', '}]}'), *T[2:])),
     "t.jsonl:2: harness event data must be an object, not an array"),
    ("transcript-harness-data-wrong-type", lambda t: transcript(t, lines(T[0], T[1].replace(
        '"pid": 1', '"returncode": "0", "pid": 1'), *T[2:])),
     "t.jsonl:2: harness event data 'returncode' must be an integer, not a string"),
    ("transcript-harness-kinds-not-strings", lambda t: transcript(t, lines(T[0], T[1].replace(
        '"pid": 1', '"kinds": [["user"]], "pid": 1'), *T[2:])),
     "t.jsonl:2: harness event data 'kinds' must be an array of strings"),
    ("transcript-sequence-gap", lambda t: transcript(t, lines(T[0], T[1], T[3])),
     "t.jsonl:3: sequence number 2, expected 1"),
    ("transcript-binary", lambda t: transcript(t, lines(*T[:3]).encode() + b"\xff\xfe\x00\n"),
     "t.jsonl:4: not UTF-8"),
    ("transcript-gzipped", lambda t: transcript(t, gzip.compress(lines(*T).encode())),
     "t.jsonl:1: not UTF-8"),
    ("transcript-missing", lambda t: ["check", str(t / "nope.jsonl")], "nope.jsonl: no such transcript"),
    ("transcript-empty-folder", lambda t: ["check", str((t / "empty").resolve())]
     if (t / "empty").mkdir() is None else [], "no transcript files given"),
    # ---- options and the target command -----------------------------------------
    ("unknown-protocol", lambda t: ["--agent", AGENT, "--protocol", "3"],
     "argument --protocol: invalid choice: '3'"),
    ("unknown-option", lambda t: ["--agent", AGENT, "--frobnicate"],
     "unrecognized arguments: --frobnicate"),
    ("abbreviated-option", lambda t: ["--agent", AGENT, "--turn", "5"],
     "unrecognized arguments: --turn 5"),
    ("demo-takes-no-target", lambda t: ["demo", "--agent", AGENT],
     "unrecognized arguments: --agent"),
    ("timeout-not-a-number", lambda t: ["--agent", AGENT, "--timeout", "soon"],
     "argument --timeout: invalid float value: 'soon'"),
    ("timeout-zero", lambda t: ["--agent", AGENT, "--timeout", "0"],
     "--timeout must be a positive number of seconds"),
    ("timeout-nan", lambda t: ["--agent", AGENT, "--timeout", "nan"],
     "--timeout must be a positive number of seconds"),
    ("turn-timeout-infinite", lambda t: ["--agent", AGENT, "--turn-timeout", "inf"],
     "--turn-timeout must be a positive number of seconds"),
    ("no-target", lambda t: ["--protocol", "1"], "nothing to test: give --agent CMD"),
    ("agent-not-on-path", lambda t: ["--agent", "no-such-agent-binary --acp"],
     "target command not found on PATH: no-such-agent-binary"),
    ("agent-path-missing", lambda t: ["--agent", str(t / "missing-agent")],
     "target command not found: "),
    ("agent-not-executable", lambda t: ["--agent", str(write(t / "agent.sh", "echo\n"))],
     "target command is not executable: "),
    ("agent-unclosed-quote", lambda t: ["--agent", "my-agent '--flag"],
     "cannot parse the target command"),
    ("agent-env-malformed", lambda t: ["--agent", AGENT, "--agent-env", "NOVALUE"],
     "--agent-env 'NOVALUE': expected KEY=VALUE"),
    ("profile-unknown", lambda t: ["--agent", AGENT, "--profile", "acp-1999"],
     "unknown profile 'acp-1999'"),
    ("case-unknown", lambda t: ["--agent", AGENT, "--case", "no-such-case"],
     "unknown case or requirement: no-such-case"),
    ("schema-dir-missing", lambda t: ["--agent", AGENT, "--schema-dir", str(t / "nope")],
     "--schema-dir"),
    ("json-is-a-directory", lambda t: ["--agent", AGENT, "--json", str(t)],
     "--json " + "{tmp}" + ": is a directory"),
    ("json-inside-a-file", lambda t: ["--agent", AGENT, "--json",
                                      str(write(t / "f.txt", "x") / "report.json")],
     "--json: cannot write into " + "{tmp}" + "/f.txt"),
    ("transcripts-is-a-file", lambda t: ["--agent", AGENT, "--transcripts",
                                         str(write(t / "f.txt", "x"))],
     "--transcripts " + "{tmp}" + "/f.txt: exists and is not a directory"),
]


@pytest.mark.parametrize("build,expected", [(b, e) for _, b, e in ROWS],
                         ids=[name for name, _, _ in ROWS])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          build: Build, expected: str) -> None:
    args = build(tmp_path)
    if "agent.sh" in " ".join(args):
        os.chmod(tmp_path / "agent.sh", stat.S_IRUSR | stat.S_IWUSR)
    status = main(args)
    out, err = capsys.readouterr()
    assert status == 2, (status, out, err)
    assert err.startswith("acp-conformance: error: "), err
    assert err.count("\n") == 1 and err.endswith("\n"), f"not one line: {err!r}"
    assert expected.replace("{tmp}", str(tmp_path)) in err, err
    assert "Traceback" not in out + err
    assert "verdict:" not in out  # nothing ran


@pytest.mark.parametrize("name", ["case-unknown-key", "profile-bad-regex", "transcript-truncated",
                                  "unknown-protocol", "agent-not-on-path"])
def test_bad_input_in_a_real_process(tmp_path: Path, name: str) -> None:
    [(build, expected)] = [(b, e) for n, b, e in ROWS if n == name]
    args = build(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("ACP_CONFORMANCE_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=120, check=False)
    assert proc.returncode == 2, proc
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_transcripts_written_by_the_suite_load_back(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The reader is strict, but not stricter than the writer: a real run's transcript grades."""
    path = write(tmp_path / "t.jsonl", lines(*T))
    assert main(["check", str(path)]) in (0, 1)
    assert "verdict:" in capsys.readouterr().out
