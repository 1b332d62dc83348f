"""Live versus replay drift (catalogue K.7): MID-A-05/replay-without-ids.

A v1 agent whose live turns carried IDs on a kind and whose replay of the same session
carries none on that kind has IDs that vanish in replay (NousResearch/hermes-agent PR
#17874: the SDK's chunk models had no ``message_id`` field and dropped the replayed IDs
silently). In v2 the same is ``MID-V2-06/no-id`` (fail).
"""

from __future__ import annotations

from typing import Any

from conformance.checks.base import Checker, Rule, register
from conformance.checks.events import LIVE, REPLAY, MessageEvent, ReplayEnd, ReplayStart


@register
class ReplayIds(Checker):
    quiet_repeats = True  # a repeat continues a message already counted
    rules = (
        Rule("MID-A-05/replay-without-ids"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.live: dict[str, dict[str, int]] = {}  # session -> kind -> first live seq with an ID
        # session -> (request seq, kind -> [updates, updates with an ID, first seq])
        self.replays: dict[str, tuple[int, dict[str, list[int]]]] = {}

    def on_replay_start(self, ev: ReplayStart) -> None:
        if ev.requested and ev.protocol < 2:
            self.replays[ev.session] = (ev.seq, {})

    def on_message(self, ev: MessageEvent) -> None:
        if ev.protocol >= 2:
            return
        if ev.phase == LIVE:
            if ev.mid is not None:
                self.live.setdefault(ev.session, {}).setdefault(ev.kind, ev.seq)
            return
        rep = self.replays.get(ev.session)
        if ev.phase != REPLAY or rep is None:
            return
        count = rep[1].setdefault(ev.kind, [0, 0, ev.seq])
        count[0] += 1
        count[1] += ev.mid is not None

    def on_replay_end(self, ev: ReplayEnd) -> None:
        self._judge(ev.session)

    def finish(self) -> None:
        for session in list(self.replays):
            self._judge(session)

    def _judge(self, session: str) -> None:
        rep = self.replays.pop(session, None)
        if rep is None:
            return
        start, kinds = rep
        live = self.live.get(session, {})
        for kind, (_, with_id, first) in kinds.items():
            if kind not in live:
                continue
            self.exercised("MID-A-05/replay-without-ids")
            if with_id == 0:
                self.found("MID-A-05/replay-without-ids", f"{kind} messages carried IDs live, "
                           f"but the replayed {kind} updates carry none: the IDs vanish in "
                           "replay", key=(session, kind, start),
                           entries=[live[kind], start, first],
                           expected="the messageIds of the live messages", actual="no messageId")
