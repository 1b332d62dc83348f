"""Write a large, valid agent transcript for the offline grading benchmark.

The transcript is what a conformant protocol-v1 agent (shaped like the bundled
reference agent) would produce in one long session: several prompt turns, each
echoing the prompt, streaming thoughts and agent messages as long runs of
chunks that share one ``messageId``, a tool call behind a permission request,
then ``session/load`` replaying the whole history with the original IDs, and
one more turn after the load. Grading it yields no fail.

``--violation cross-turn-reuse`` makes one agent message of a middle turn reuse
the ID of an agent message of the first turn, which the suite must report
(MID-A-02/cross-turn-reuse, and MID-A-07/replay-duplicate when it is replayed).

``--no-ids`` writes what many real v1 agents send: no ``messageId`` at all
(allowed in v1), and the echo of each long prompt streamed a word a chunk.

``--shape real`` writes what LLM-backed agents really stream: token-sized chunks
in short runs (run lengths drawn around a median of 12, from 1 to 120), thoughts
and tool calls (a call, its updates, now and then a permission request) between
the messages of a turn, a prompt echo of one chunk, and a ``session/load`` that
replays each stored message as one chunk (tool calls included). The default
shape, ``long``, streams every message as one run of ``--chunks-per-message``.

    python3 -m bench.gen_transcript --updates 1000000 -o big.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from conformance import TOOL_NAME, __version__
from conformance.transcript import FORMAT, FORMAT_VERSION

VIOLATIONS = ("none", "cross-turn-reuse")
SHAPES = ("long", "real")
TOKENS = ("The", " agent", " stream", "s", " a", " long", " answer", " in", " small",
          " piece", "s", ",", " so", " every", " client", " can", " show", " it", " as",
          " one", " message", " token", " by", " token", ":", " `", "code", "`", "\n", "-")
RUN_MEDIAN, RUN_MAX = 12, 120  # chunks per message in the real shape
WORDS = ("the", "agent", "streams", "a", "long", "answer", "in", "small", "pieces", "so",
         "every", "client", "can", "show", "it", "as", "one", "message")


def _esc(text: str) -> str:
    """``text`` as it appears inside a JSON string literal (without the quotes)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


@dataclass
class Message:
    kind: str  # user | agent | thought
    mid: str
    chunks: list[str] = field(default_factory=list)


@dataclass
class Plan:
    """How many updates go where, for a requested total."""

    updates: int
    turns: int
    chunks_per_message: int

    @property
    def per_turn(self) -> int:
        # The live turns before the load are replayed once, plus one turn after the load.
        return max(5, self.updates // (2 * self.turns + 1))


@dataclass
class Stats:
    updates: int = 0
    messages: int = 0  # distinct messages (live); a replayed message is not a new one
    lines: int = 0


class Writer:
    """Writes entries with consecutive sequence numbers; chunk lines come from a template."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.seq = 0
        self.stats = Stats()
        self.request_ids = iter(range(10**9))

    def entry(self, src: str, stream: str, **fields: Any) -> None:
        d: dict[str, Any] = {"seq": self.seq, "t": round(self.seq * 1e-5, 6), "conn": 0,
                             "src": src, "stream": stream, **fields}
        self.out.write(json.dumps(d, ensure_ascii=False) + "\n")
        self.seq += 1
        self.stats.lines += 1

    def message(self, src: str, msg: dict[str, Any]) -> None:
        raw = json.dumps(msg, ensure_ascii=False, separators=(",", ":"))
        self.entry(src, "stdin" if src == "client" else "stdout", raw=raw, msg=msg)

    def request(self, method: str, params: dict[str, Any]) -> int:
        rid = next(self.request_ids)
        self.message("client", {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def respond(self, rid: Any, result: Any) -> None:
        self.message("agent", {"jsonrpc": "2.0", "id": rid, "result": result})

    def permission(self, rid: int, sid: str, call: str, title: str, kind: str) -> None:
        """The agent asks to run a tool call; the client allows it once."""
        self.message("agent", {"jsonrpc": "2.0", "id": rid, "method": "session/request_permission",
                               "params": {"sessionId": sid, "toolCall": {
                                   "toolCallId": call, "title": title, "kind": kind},
                                   "options": [{"optionId": "allow_once", "name": "Allow",
                                                "kind": "allow_once"}]}})
        self.message("client", {"jsonrpc": "2.0", "id": rid, "result": {
            "outcome": {"outcome": "selected", "optionId": "allow_once"}}})

    def update(self, sid: str, update: dict[str, Any]) -> None:
        self.message("agent", {"jsonrpc": "2.0", "method": "session/update",
                               "params": {"sessionId": sid, "update": update}})
        self.stats.updates += 1

    def chunks(self, sid: str, msg: Message, *, ids: bool = True) -> None:
        """Many chunk lines of one message, from a per-message template (the hot path)."""
        kind = {"user": "user_message_chunk", "agent": "agent_message_chunk",
                "thought": "agent_thought_chunk"}[msg.kind]
        raw_id, msg_id = (f'"messageId":"{msg.mid}",', f'"messageId": "{msg.mid}", ') if ids \
            else ("", "")
        head = (f'{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"{sid}",'
                f'"update":{{"sessionUpdate":"{kind}",{raw_id}'
                '"content":{"type":"text","text":')
        raw_head, raw_tail = _esc(head), _esc("}}}}")
        msg_head = (f'"msg": {{"jsonrpc": "2.0", "method": "session/update", "params": '
                    f'{{"sessionId": "{sid}", "update": {{"sessionUpdate": "{kind}", '
                    f'{msg_id}"content": {{"type": "text", "text": ')
        write = self.out.write
        for text in msg.chunks:
            text_json = json.dumps(text, ensure_ascii=False)
            write(f'{{"seq": {self.seq}, "t": {round(self.seq * 1e-5, 6)}, "conn": 0, '
                  f'"src": "agent", "stream": "stdout", '
                  f'"raw": "{raw_head}{_esc(text_json)}{raw_tail}", '
                  f'{msg_head}{text_json}' + "}}}}}\n")
            self.seq += 1
        self.stats.updates += len(msg.chunks)
        self.stats.lines += len(msg.chunks)


def _texts(n: int, seed: int) -> list[str]:
    """``n`` chunk texts that read as one message: words, the last ending a sentence."""
    out = [f"{WORDS[(seed + i) % len(WORDS)]} " for i in range(n)]
    out[-1] = out[-1].rstrip() + "."
    return out


def _turn_messages(plan: Plan, turn: int, ids: Iterator[str], reuse: str | None,
                   long_prompt: bool = False) -> tuple[str, list[Message]]:
    """The prompt text and the messages (echo first) of one live turn. A long prompt is
    echoed a word a chunk."""
    if long_prompt:
        echo = _texts(plan.chunks_per_message, turn)
        prompt = "".join(echo)
    else:
        prompt = f"Prompt number {turn + 1}: tell me a long story."
        echo = [prompt]
    msgs = [Message("user", next(ids), echo)]
    budget = plan.per_turn - len(echo) - 2  # echo, tool_call, tool_call_update
    kind = "thought"
    while budget > 0:
        n = min(plan.chunks_per_message, budget)
        if budget - n < 2:
            n = budget  # no tail message of a single chunk
        mid = next(ids)
        if reuse is not None and kind == "agent":
            mid, reuse = reuse, None
        msgs.append(Message(kind, mid, _texts(n, turn * 7 + len(msgs))))
        budget -= n
        kind = "agent" if kind == "thought" else "thought"
    return prompt, msgs


def _run_length(rng: random.Random) -> int:
    """Chunks in one message: log-normal around RUN_MEDIAN, from 1 to RUN_MAX."""
    return max(1, min(RUN_MAX, round(rng.lognormvariate(math.log(RUN_MEDIAN), 0.9))))


def _tokens(rng: random.Random, n: int) -> list[str]:
    out = [rng.choice(TOKENS) for _ in range(n)]
    out[-1] += "."
    return out


def _header(updates: int, violation: str, no_ids: bool, shape: str) -> dict[str, Any]:
    return {"format": FORMAT, "version": FORMAT_VERSION, "tool": f"{TOOL_NAME} {__version__}",
            "role": "agent", "protocol": 1, "profile": "acp-sdk-2.4.0",
            "target": "bench/gen_transcript.py (synthetic conformant agent)",
            "case": f"bench-{updates}-updates" + ("" if shape == "long" else f"-{shape}")
            + ("" if violation == "none" else f"-{violation}") + ("-no-ids" if no_ids else "")}


def _open_session(w: Writer, sid: str) -> None:
    w.entry("harness", "harness", event="start",
            data={"argv": ["synthetic-agent"], "pid_role": "agent", "pid": 1, "pgid": 1})
    rid = w.request("initialize", {
        "protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False,
                                                            "writeTextFile": False},
                                                     "terminal": False},
        "clientInfo": {"name": TOOL_NAME, "version": __version__}})
    w.respond(rid, {"protocolVersion": 1, "agentCapabilities": {"loadSession": True},
                    "agentInfo": {"name": "synthetic-agent", "version": "1.0"},
                    "authMethods": []})
    rid = w.request("session/new", {"cwd": "/project", "mcpServers": []})
    w.respond(rid, {"sessionId": sid})


def _close(w: Writer) -> None:
    w.entry("harness", "harness", event="exit",
            data={"returncode": 0, "signal": None, "killed_by_suite": False,
                  "ended_by": "stdin-eof", "grace": 2.0, "output_held": False,
                  "stderr_bytes": 0, "stderr_kept": 0, "unrecorded_lines": 0,
                  "unrecorded_bytes": 0})


def _tool_call(w: Writer, sid: str, call: str, rng: random.Random, agent_rids: Iterator[int],
               replay: bool = False) -> None:
    if not replay and rng.random() < 0.2:
        w.permission(next(agent_rids), sid, call, "Edit main.py", "edit")
    w.update(sid, {"sessionUpdate": "tool_call", "toolCallId": call, "title": "Read main.py",
                   "kind": "read", "status": "completed" if replay else "pending"})
    for _ in range(0 if replay else rng.randint(1, 3)):
        w.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": call,
                       "status": "in_progress"})
    if not replay:
        w.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": call,
                       "status": "completed", "content": [{"type": "content", "content": {
                           "type": "text", "text": "def main():\n    pass\n"}}]})


def write_real(out: TextIO, *, updates: int, violation: str = "none", no_ids: bool = False,
               seed: int = 1) -> Stats:
    """The real LLM shape (see the module docstring): about ``updates`` updates."""
    rng = random.Random(seed)
    out.write(json.dumps(_header(updates, violation, no_ids, "real"), ensure_ascii=False) + "\n")
    w = Writer(out)
    sid = "sess_0123456789abcdef0123456789abcdef"
    counter = iter(range(10**9))
    agent_rids = iter(range(10**9))
    _open_session(w, sid)
    # history: per turn, the prompt and its items (a Message, or a tool call's ID)
    history: list[tuple[str, list[Message | str]]] = []
    first_agent: str | None = None
    live_budget = updates * 12 // 13  # the replay adds about one update per message

    def turn(index: int, reuse: str | None) -> None:
        nonlocal first_agent
        prompt = f"Step {index + 1}: fix the failing test in main.py."
        prid = w.request("session/prompt", {"sessionId": sid,
                                            "prompt": [{"type": "text", "text": prompt}]})
        items: list[Message | str] = [Message("user", f"msg_{next(counter):026x}", [prompt])]
        for _ in range(rng.randint(1, 4)):  # thought, tool calls, then an agent message
            if rng.random() < 0.6:
                items.append(Message("thought", f"msg_{next(counter):026x}",
                                     _tokens(rng, _run_length(rng))))
            items += [f"call_{next(counter):08d}" for _ in range(rng.choice((0, 1, 1, 2)))]
            mid = f"msg_{next(counter):026x}"
            if reuse is not None:
                mid, reuse = reuse, None
            items.append(Message("agent", mid, _tokens(rng, _run_length(rng))))
        for item in items:
            if isinstance(item, Message):
                w.chunks(sid, item, ids=not no_ids)
                w.stats.messages += 1
                if item.kind == "agent" and first_agent is None:
                    first_agent = item.mid
            else:
                _tool_call(w, sid, item, rng, agent_rids)
        w.respond(prid, {"stopReason": "end_turn"})
        history.append((prompt, items))

    index = 0
    while w.stats.updates < live_budget:
        reuse = first_agent if (violation == "cross-turn-reuse" and index == 3) else None
        turn(index, reuse)
        index += 1
    rid = w.request("session/load", {"sessionId": sid, "cwd": "/project", "mcpServers": []})
    for _prompt, items in history:
        for item in items:
            if isinstance(item, Message):
                w.chunks(sid, Message(item.kind, item.mid, ["".join(item.chunks)]),
                         ids=not no_ids)
            else:
                _tool_call(w, sid, item, rng, agent_rids, replay=True)
    w.respond(rid, {})
    turn(index, None)
    _close(w)
    return w.stats


def write_transcript(out: TextIO, *, updates: int, turns: int = 8,
                     chunks_per_message: int = 300, violation: str = "none",
                     no_ids: bool = False, shape: str = "long") -> Stats:
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    if violation not in VIOLATIONS:
        raise ValueError(f"unknown violation {violation!r}; choose from {', '.join(VIOLATIONS)}")
    if no_ids and violation != "none":
        raise ValueError(f"--violation {violation} reuses an ID: it needs IDs (not --no-ids)")
    if shape == "real":
        return write_real(out, updates=updates, violation=violation, no_ids=no_ids)
    plan = Plan(updates, max(1, turns), max(1, chunks_per_message))
    out.write(json.dumps(_header(updates, violation, no_ids, shape), ensure_ascii=False) + "\n")
    w = Writer(out)
    sid = "sess_0123456789abcdef0123456789abcdef"
    counter = iter(range(10**9))
    ids = (f"msg_{next(counter):032x}" for _ in iter(int, 1))
    _open_session(w, sid)
    history: list[tuple[str, list[Message]]] = []
    first_agent_id: str | None = None
    agent_rids = iter(range(10**9))

    def turn(index: int, reuse: str | None) -> list[Message]:
        prompt, msgs = _turn_messages(plan, index, ids, reuse, long_prompt=no_ids)
        prid = w.request("session/prompt", {"sessionId": sid,
                                            "prompt": [{"type": "text", "text": prompt}]})
        half = len(msgs) // 2 + 1
        for m in msgs[:half]:
            w.chunks(sid, m, ids=not no_ids)
        call = f"call_{index:08d}"
        w.permission(next(agent_rids), sid, call, "Read notes.txt", "read")
        w.update(sid, {"sessionUpdate": "tool_call", "toolCallId": call,
                       "title": "Read notes.txt", "kind": "read", "status": "pending"})
        w.update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": call,
                       "status": "completed"})
        for m in msgs[half:]:
            w.chunks(sid, m, ids=not no_ids)
        w.respond(prid, {"stopReason": "end_turn"})
        w.stats.messages += len(msgs)
        history.append((prompt, msgs))
        return msgs

    for index in range(plan.turns):
        reuse = first_agent_id if violation == "cross-turn-reuse" and index == plan.turns // 2 \
            and index > 0 else None
        msgs = turn(index, reuse)
        if first_agent_id is None:
            first_agent_id = next((m.mid for m in msgs if m.kind == "agent"), None)
    rid = w.request("session/load", {"sessionId": sid, "cwd": "/project", "mcpServers": []})
    for _prompt, msgs in history:
        for m in msgs:
            w.chunks(sid, m, ids=not no_ids)
    w.respond(rid, {})
    turn(plan.turns, None)
    _close(w)
    return w.stats


def generate(path: Path, **options: Any) -> Stats:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        return write_transcript(fh, **options)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m bench.gen_transcript", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--updates", type=int, default=10_000, help="session updates (about)")
    p.add_argument("--turns", type=int, default=8, help="live turns before the load")
    p.add_argument("--chunks-per-message", type=int, default=300)
    p.add_argument("--violation", choices=VIOLATIONS, default="none")
    p.add_argument("--no-ids", action="store_true",
                   help="no messageId at all (allowed in v1); long prompts echoed in chunks")
    p.add_argument("--shape", choices=SHAPES, default="long",
                   help="long: every message one long run of chunks; real: token-sized "
                   "chunks in short runs with thoughts and tool calls between")
    p.add_argument("-o", "--output", type=Path, required=True)
    ns = p.parse_args(argv)
    if ns.no_ids and ns.violation != "none":
        p.error("--violation needs IDs: it cannot go with --no-ids")
    stats = generate(ns.output, updates=ns.updates, turns=ns.turns,
                     chunks_per_message=ns.chunks_per_message, violation=ns.violation,
                     no_ids=ns.no_ids, shape=ns.shape)
    print(f"{ns.output}: {stats.lines} lines, {stats.updates} updates, "
          f"{stats.messages} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
