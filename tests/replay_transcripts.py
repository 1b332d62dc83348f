"""Random transcripts whose replays show the live history again, changed a little.

``tests/random_transcripts.py`` replays random chunks; the replay rules' cross-check
(live turn against replayed turn: kept, regenerated, colliding, folded and split IDs)
needs a replay that is the live conversation again. Here a session streams a few
live turns (an echo, agent messages and thoughts as runs of chunks), then is loaded
(v1) or resumed with ``replayFrom`` (v2), and the agent replays each message as one
chunk (v2: as a whole message), now and then changed: a fresh ID, the ID of another live message, two messages
folded under one ID, one split in two, a message dropped or rewritten. Sometimes a
turn still streams when the request goes out and goes on beside the replay (and after
it), and sometimes the session is loaded a second time. ``storm``: many turns, and
every message folded or split (more faults of a rule than are listed one by one).
"""

from __future__ import annotations

import random
from typing import Any

import random_transcripts

from conformance.transcript import Entry

KINDS = {"user": "user_message_chunk", "agent": "agent_message_chunk",
         "thought": "agent_thought_chunk"}
UPSERTS = {"user": "user_message", "agent": "agent_message", "thought": "agent_thought"}
WORDS = ["Sure", "the file", "is read.", "Next", "I will", "run the tests.", "Done:",
         "all green."]


class _Builder(random_transcripts._Builder):
    """Its lines and requests are written as the random transcripts' are."""

    def __init__(self, rng: random.Random, protocol: int, storm: bool = False) -> None:
        super().__init__(rng, protocol)
        self.storm = storm  # many turns, every message changed: more faults than are listed
        self.made = 0  # message IDs made
        self.live: list[list[tuple[str, str, str]]] = []  # turns of (kind, ID, text)

    def answer(self, rid: int, result: dict[str, Any]) -> None:
        self.line("agent", {"jsonrpc": "2.0", "id": rid, "result": result})

    def send(self, update: dict[str, Any]) -> None:
        self.line("agent", self.update("s", update))

    def say(self, kind: str, mid: str, text: str) -> None:
        """One chunk of a message."""
        self.send({"sessionUpdate": KINDS[kind], "messageId": mid,
                   "content": {"type": "text", "text": text}})

    def whole(self, kind: str, mid: str, text: str) -> None:
        """v2: the whole message (an echo, a replayed message)."""
        self.send({"sessionUpdate": UPSERTS[kind], "messageId": mid,
                     "content": [{"type": "text", "text": text}]})

    def idle(self) -> None:
        self.send({"sessionUpdate": "state_update", "state": "idle",
                     "stopReason": "end_turn"})

    def new_id(self) -> str:
        self.made += 1
        return f"m{self.made}"

    def stream(self, kind: str, mid: str, text: str) -> None:
        words = text.split(" ")
        for i, w in enumerate(words):
            self.say(kind, mid, w if i == 0 else " " + w)

    def message(self, kind: str) -> tuple[str, str, str]:
        text = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 6)))
        return kind, self.new_id(), text

    def turn(self, *, end: bool = True) -> int:
        """A live turn: its prompt, echo and output; its end (the v1 response, the v2 idle)
        unless ``end`` is off. v2 answers the prompt at once and echoes it whole."""
        rid = self.request("session/prompt", {"sessionId": "s",
                                              "prompt": [{"type": "text", "text": "go"}]})
        msgs = [self.message("user")]
        for _ in range(self.rng.randint(1, 4)):
            msgs.append(self.message(self.rng.choice(["agent", "agent", "thought"])))
        self.live.append(msgs)
        v2 = self.protocol >= 2
        if v2:
            self.answer(rid, {"messageId": msgs[0][1]})
            self.whole(*msgs[0])
            self.send({"sessionUpdate": "state_update", "state": "running"})
        for kind, mid, text in msgs[1:] if v2 else msgs:
            self.stream(kind, mid, text)
        if end:
            self.end(rid)
        return rid

    def end(self, rid: int) -> None:
        if self.protocol >= 2:
            self.idle()
        else:
            self.answer(rid, {"stopReason": "end_turn"})

    def replayed(self) -> list[tuple[str, str, str]]:
        """The live history as the agent replays it, each message changed now and then."""
        rng, out = self.rng, []
        every = [m for turn in self.live for m in turn]
        for turn in self.live:
            msgs = list(turn)
            i = 0
            while i < len(msgs):
                kind, mid, text = msgs[i]
                r = rng.random()
                if self.storm:  # each agent message and thought folded or split
                    r = 1.0 if kind == "user" else 0.12 + r * 0.08
                if r < 0.08:
                    mid = self.new_id()  # regenerated
                elif r < 0.12:
                    mid = rng.choice(every)[1]  # the ID of another live message
                elif r < 0.16 and i + 1 < len(msgs) and msgs[i + 1][0] == kind:
                    text = text + msgs[i + 1][2]  # two folded under one ID
                    i += 1
                elif r < 0.20 and " " in text:
                    head, tail = text.split(" ", 1)  # one split in two
                    out.append((kind, mid, head))
                    kind, mid, text = kind, self.new_id(), " " + tail
                elif r < 0.22:
                    i += 1  # dropped
                    continue
                elif r < 0.24:
                    text = text + " (edited)"
                out.append((kind, mid, text))
                i += 1
        return out

    def reload(self, carried: int | None) -> None:
        """Load (v1) or resume with replay (v2); a turn still streaming goes on beside it."""
        if self.protocol >= 2:
            rid = self.request("session/resume", {"sessionId": "s",
                                                  "replayFrom": {"type": "start"}})
        else:
            rid = self.request("session/load", {"sessionId": "s", "cwd": "/",
                                                "mcpServers": []})
        late = self.live[-1] if carried is not None else []
        extra = []
        if carried is not None:  # the streaming turn's next message, before the replay
            extra.append(self.message("agent"))
            self.stream(*extra[-1])
        for message in self.replayed():
            (self.whole if self.protocol >= 2 else self.say)(*message)
        if carried is not None and self.rng.random() < 0.5:  # and more of it, in the window
            extra.append(self.message("agent"))
            self.stream(*extra[-1])
        if self.protocol >= 2:
            self.send({"sessionUpdate": "replay_complete"})
        self.answer(rid, {})
        if carried is not None:  # the rest of the turn after the window, then its end
            if self.rng.random() < 0.7:
                extra.append(self.message("thought"))
                self.stream(*extra[-1])
            late.extend(extra)
            self.end(carried)

    def conversation(self) -> list[Entry]:
        rng = self.rng
        self.t.add(0, "harness", "harness", event="start", data={"pid_role": "agent"})
        rid = self.request("initialize", {"protocolVersion": self.protocol})
        caps: dict[str, Any] = ({"sessionCapabilities": {"resume": {}}} if self.protocol >= 2
                else {"loadSession": True})
        self.answer(rid, {"protocolVersion": self.protocol, "agentCapabilities": caps})
        rid = self.request("session/new", {"cwd": "/", "mcpServers": []})
        self.answer(rid, {"sessionId": "s"})
        for _ in range(rng.randint(1, 2)):  # one load, sometimes two
            for _ in range(rng.randint(12, 20) if self.storm else rng.randint(1, 5)):
                self.turn()
            carried = self.turn(end=False) if rng.random() < 0.4 else None
            self.reload(carried)
        self.turn()
        self.t.add(0, "harness", "harness", event="exit",
                   data={"returncode": 0, "ended_by": "stdin-eof"})
        return list(self.t.entries)


def replay_entries(seed: int, protocol: int, *, storm: bool = False) -> list[Entry]:
    return _Builder(random.Random(seed), protocol, storm).conversation()
