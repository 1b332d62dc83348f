"""The scripted model server: each API shape streamed to a real HTTP client over loopback,
the request log, and real runs of an LLM-backed agent through ``--model-server``."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.modelserver import ModelServer, ScriptError, load_script
from conformance.modelserver.cases import prepare_run
from conformance.modelserver.script import parse_script

ROOT = Path(__file__).resolve().parent.parent
LLM_AGENT = ROOT / "fixtures" / "agents" / "llm_agent.py"
MODEL_DIR = ROOT / "cases" / "model"

GLOB_SCHEMA = {"type": "object", "properties": {"pattern": {"type": "string"}},
               "required": ["pattern"]}


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as s:
        yield s


def post(server: ModelServer, path: str, body: dict[str, Any]) -> tuple[str, bytes]:
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers.get("Content-Type", ""), resp.read()


def sse(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event, data) per frame; frames are separated by a blank line."""
    frames = []
    for block in raw.decode("utf-8").split("\n\n"):
        if not block.strip():
            continue
        event, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        assert data is not None, f"frame without data: {block!r}"
        frames.append((event, data if data == "[DONE]" else json.loads(data)))
    return frames


def test_chat_completions_stream(server: ModelServer) -> None:
    ctype, raw = post(server, "/v1/chat/completions", {
        "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "glob", "parameters": GLOB_SCHEMA}},
                  {"type": "function", "function": {"name": "write", "parameters": {}}}]})
    assert ctype.startswith("text/event-stream")
    frames = sse(raw)
    assert frames[-1] == (None, "[DONE]")
    chunks = [d for _, d in frames[:-1]]
    assert len({c["id"] for c in chunks}) == 1  # one completion, one ID on every chunk
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == "Let me look at the working directory first (turn 1)."
    assert "".join(d.get("reasoning_content") or "" for d in deltas).startswith("The user")
    calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
    assert calls[0]["function"]["name"] == "glob"  # a declared harmless tool, not "write"
    args = "".join(tc["function"].get("arguments", "") for tc in calls)
    assert json.loads(args) == {"pattern": "*"}
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "tool_calls"


def test_follow_up_with_tool_result_gets_the_second_reply(server: ModelServer) -> None:
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "x", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "glob", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}]
    _, raw = post(server, "/v1/chat/completions", {"stream": True, "messages": messages,
                                                   "tools": []})
    deltas = [d["choices"][0]["delta"] for _, d in sse(raw)[:-1] if d["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == \
        "I have listed the working directory, and that is all (turn 1)."
    assert not any(d.get("tool_calls") for d in deltas)
    log = server.take_log()
    assert [(e["api"], e["turn"], e["round"]) for e in log] == [("openai-chat", 1, 1)]


def test_responses_stream_has_one_id_per_item(server: ModelServer) -> None:
    _, raw = post(server, "/v1/responses", {
        "model": "m", "stream": True,
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "hi"}]}],
        "tools": [{"type": "function", "name": "shell", "parameters": {
            "type": "object", "properties": {"command": {"type": "array"}},
            "required": ["command"]}}]})
    frames = sse(raw)
    assert all(event == data["type"] for event, data in frames)
    types = [event for event, _ in frames]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    added = [d["item"] for e, d in frames if e == "response.output_item.added"]
    assert [i["type"] for i in added] == ["reasoning", "message", "function_call"]
    assert len({i["id"] for i in added}) == 3
    assert added[2]["name"] == "shell"
    done = frames[-1][1]["response"]["output"]
    assert json.loads(done[2]["arguments"]) == {"command": ["ls"]}
    assert [d["sequence_number"] for _, d in frames] == list(range(len(frames)))


def test_repeated_ids_repeat_items_but_not_tool_calls() -> None:
    script = load_script(MODEL_DIR / "repeat-ids.yaml")
    with ModelServer(script) as server:
        body = {"stream": True, "input": "hello",
                "tools": [{"type": "function", "name": "glob", "parameters": GLOB_SCHEMA}]}
        items = []
        for _ in range(2):
            _, raw = post(server, "/v1/responses", body)
            items.append([d["item"] for e, d in sse(raw) if e == "response.output_item.added"])
    assert [i["id"] for i in items[0][:2]] == [i["id"] for i in items[1][:2]] \
        == ["rs_repeat", "msg_repeat"]
    assert items[0][2]["call_id"] != items[1][2]["call_id"]


def test_anthropic_messages_stream(server: ModelServer) -> None:
    _, raw = post(server, "/v1/messages", {
        "model": "claude", "stream": True, "max_tokens": 100,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [{"name": "LS", "input_schema": {"type": "object", "properties": {
            "path": {"type": "string"}}, "required": ["path"]}}]})
    frames = sse(raw)
    types = [e for e, _ in frames]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    blocks = [d["content_block"]["type"] for e, d in frames if e == "content_block_start"]
    assert blocks == ["thinking", "text", "tool_use"]
    partial = "".join(d["delta"]["partial_json"] for e, d in frames
                      if e == "content_block_delta" and d["delta"]["type"] == "input_json_delta")
    assert json.loads(partial) == {"path": "."}
    stop = next(d for e, d in frames if e == "message_delta")
    assert stop["delta"]["stop_reason"] == "tool_use"


def test_gemini_stream_and_side_requests(server: ModelServer) -> None:
    _, raw = post(server, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "list_directory", "parametersJsonSchema": {
            "type": "object", "properties": {"dir_path": {"type": "string"}},
            "required": ["dir_path"]}}]}]})
    parts = [p for _, d in sse(raw) for p in d["candidates"][0]["content"]["parts"]]
    assert any(p.get("thought") for p in parts)
    assert {"functionCall": {"name": "list_directory", "args": {"dir_path": "."}}} in parts
    # a structured-output side request (titles, next-speaker checks) gets plain JSON text
    _, raw = post(server, "/v1beta/models/gemini-x:generateContent", {
        "contents": [{"role": "user", "parts": [{"text": "who speaks next?"}]}],
        "generationConfig": {"responseMimeType": "application/json"}})
    reply = json.loads(raw)["candidates"][0]["content"]["parts"][0]["text"]
    assert json.loads(reply)["next_speaker"] == "user"
    log = server.take_log()
    assert [e.get("side_request") for e in log] == [None, "structured output"]


def test_log_records_what_the_model_said(server: ModelServer) -> None:
    server.use(None, "case-a@v1")
    post(server, "/v1/chat/completions", {"stream": False, "messages": [
        {"role": "user", "content": "list it"}]})
    req = urllib.request.Request(server.url + "/v1/nothing", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 404
    log = server.take_log()
    assert log[0]["case"] == "case-a@v1" and log[0]["last_user"] == "list it"
    assert log[0]["tool_skipped"] == "the agent declared no harmless tool"
    assert [s["kind"] for s in log[0]["said"]] == ["reasoning", "text"]
    assert log[1]["status"] == 404
    assert server.take_log() == []


def test_agent_hanging_up_mid_stream_is_logged(server: ModelServer) -> None:
    script = parse_script({"format": 1, "replies": [
        {"pace": 0.02, "say": [{"text": "word " * 200}]}]}, "slow")
    server.use(script, "cancel")
    req = urllib.request.Request(server.url + "/v1/chat/completions",
                                 data=json.dumps({"stream": True, "messages": [
                                     {"role": "user", "content": "go"}]}).encode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.readline()  # the first frame arrived; now hang up
    post(server, "/v1/chat/completions", {"stream": False, "messages": [
        {"role": "user", "content": "still there?"}]})  # the server keeps serving
    assert server.wait_idle(10)  # the writer notices the hang-up on a later write
    log = server.take_log()
    hung = next(e for e in log if e["last_user"] == "go")
    assert hung["completed"] is False


def test_bad_script_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: 1\nreplies:\n  - say:\n      - shout: loud\n", encoding="utf-8")
    with pytest.raises(ScriptError, match=r"bad\.yaml:4: .*not a known part"):
        load_script(bad)
    bad.write_text("format: 1\nreplies: []\nids: often\n", encoding="utf-8")
    with pytest.raises(ScriptError, match=r"bad\.yaml:\d+: "):
        load_script(bad)


def test_model_url_fills_command_env_and_config(tmp_path: Path) -> None:
    template = tmp_path / "config.toml.in"
    template.write_text('base_url = "{model_url}/v1"\n', encoding="utf-8")
    dest = tmp_path / "home" / "config.toml"
    server, command, env = prepare_run("agent --url {model_url}", {"X": "{model_url}/x"}, [],
                                       enabled=True, script=None, configs=[(template, dest)])
    assert server is not None
    try:
        assert command == f"agent --url {server.url}"
        assert env["X"] == f"{server.url}/x"
        assert env["OPENAI_BASE_URL"] == f"{server.url}/v1"
        assert env["GOOGLE_GEMINI_BASE_URL"] == server.url and env["GEMINI_API_KEY"]
        assert dest.read_text(encoding="utf-8") == f'base_url = "{server.url}/v1"\n'
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.stop()
    with pytest.raises(ScriptError, match="no model server"):
        prepare_run("agent {model_url}", {}, [], enabled=False, script=None)


def conformance(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "conformance", "--agent", f"{sys.executable} {LLM_AGENT}",
         "--protocol", "1", "--case", "ids-across-turns", "--timeout", "20", "--no-color",
         "--json", str(report), "--transcripts", str(tmp_path / "t"), *args],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    data = json.loads(report.read_text("utf-8")) if report.exists() else {}
    return proc.returncode, data, proc.stdout + proc.stderr


def outcomes(report: dict[str, Any], rule: str) -> set[str]:
    return {r["outcome"] for r in report["results"] if r["requirement"] == rule}


def test_pass_through_agent_with_unique_provider_ids_passes(tmp_path: Path) -> None:
    rc, report, out = conformance(tmp_path, "--model-server")
    assert rc == 0, out
    assert outcomes(report, "MID-A-02/cross-turn-reuse") == {"pass"}
    header = json.loads((tmp_path / "t" / "ids-across-turns@v1.jsonl").read_text(
        "utf-8").splitlines()[0])
    assert header["model_script"] == "text-tool-text"
    said = [s for r in header["model_requests"] for s in r["said"]]
    assert sum(1 for s in said if s["kind"] == "tool") == 3  # text, tool, text in each turn


def test_pass_through_agent_with_repeated_provider_ids_fails_mid_a_02(tmp_path: Path) -> None:
    rc, report, out = conformance(tmp_path, "--model-script",
                                  str(MODEL_DIR / "repeat-ids.yaml"))
    assert rc == 1, out
    assert outcomes(report, "MID-A-02/cross-turn-reuse") == {"fail"}
    failing = [r for r in report["results"] if r["outcome"] == "fail"]
    assert all(r["requirement"].startswith("MID-A-02") for r in failing)
    assert "chatcmpl_repeat" in json.dumps(failing)


def test_without_a_model_server_the_situation_is_not_testable(tmp_path: Path) -> None:
    rc, report, out = conformance(tmp_path, "--agent-env", "OPENAI_BASE_URL=")
    assert rc == 0, out
    rows = [r for r in report["results"] if r["requirement"] == "MID-A-02/cross-turn-reuse"]
    assert rows and all(r["outcome"] == "not_applicable" for r in rows)
    assert all(r["message"].startswith("not testable") for r in rows)


TOOL_ARGUMENTS = {  # what the model calls each tool with, fitted to the fixture's schema
    "list_files": {"path": ".", "recursive": False},
    "read_file": {"path": "README.md"},
    "search_files": {"path": ".", "regex": "TODO", "file_pattern": "*"},
    "grep": {"pattern": "TODO", "path": "."},
    "terminal": {"command": "ls", "cd": "."},
    "bash": {"command": "ls"},
}


@pytest.mark.parametrize("tool", sorted(TOOL_ARGUMENTS))
def test_an_agent_with_only_a_common_tool_name_gets_its_tool_turn(tmp_path: Path,
                                                                  tool: str) -> None:
    """Real agents declare list_files, read_file, search_files, grep, terminal or bash
    and nothing of the older list: each is called, with safe arguments, so the
    text-tool-text turn is played."""
    rc, _report, out = conformance(tmp_path, "--model-server", "--agent-env",
                                   f"LLM_AGENT_TOOLS=write_file,{tool}")
    assert rc == 0, out
    assert "declared no tool" not in out
    header = json.loads((tmp_path / "t" / "ids-across-turns@v1.jsonl").read_text(
        "utf-8").splitlines()[0])
    tools = [s for r in header["model_requests"] for s in r["said"] if s["kind"] == "tool"]
    assert len(tools) == 3, header["model_requests"]
    assert {(s["name"], json.dumps(s["arguments"], sort_keys=True)) for s in tools} == {
        (tool, json.dumps(TOOL_ARGUMENTS[tool], sort_keys=True))}


def test_a_run_says_once_that_the_agent_declared_no_usable_tool(tmp_path: Path) -> None:
    rc, _report, out = conformance(tmp_path, "--model-server", "--agent-env",
                                   "LLM_AGENT_TOOLS=write_file")
    assert rc == 0, out
    lines = [line for line in out.splitlines() if "declared no tool" in line]
    assert len(lines) == 1, out  # three turns without a tool: said once
    assert "(declared: write_file;" in lines[0] and "MID-A-02" in lines[0]
    header = json.loads((tmp_path / "t" / "ids-across-turns@v1.jsonl").read_text(
        "utf-8").splitlines()[0])
    assert all(r.get("tool_skipped") for r in header["model_requests"] if r.get("turn"))
