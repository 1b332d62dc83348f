"""Live versus replay parity on the client's screen (catalogue K.7):
``MID-C-03/live-replay-parity``.

In pwrdrvr/PwrAgent PR #2204 the live path cut messages at non-text updates that the
replay path ignored, so a conversation looked different after a reload. A reload
that replays the live updates as they were streamed (the ``as-live`` reload: the
client runner marks its observation ``parity``) must show what the client showed
after the live turns: the same messages, in the same order, with the same texts.

The checker reads the client's observations (``observed`` harness events): the
display after the live turns (the last one when the client renders the whole
conversation, else each turn's messages in turn) against the display after the
reload, both narrowed to the messages that hold a text the double sent live before the
reload began (a one-shot client that resumed also shows the prompt it resumed with and
its answer, which the double sends live after the replay).
A difference is graded by the register: **fail** in v2, **warn** in v1, where the
ID-less fallback grouping is the client's own but must be one grouping.
"""

from __future__ import annotations

from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.events import LIVE, Frame, MessageEvent, ReplayStart, TurnStart
from conformance.checks.wire import short
from conformance.results import Reason

RULE = "MID-C-03/live-replay-parity"
NOT_REACHED = ("not testable: the client's screen was observed, but no reload replayed the "
               "live updates as streamed")


@register
class LiveReplayParity(Checker):
    rules = (Rule(RULE),)

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.live_texts: set[str] = set()  # every text the double sent live, and the prompts
        # the live texts as the latest reload began: the history it shows again (None: no
        # reload began, every live text is history)
        self.history_texts: set[str] | None = None
        self.with_ids = False  # a live message update carried a string ID
        self.live: list[tuple[str, str]] = []  # the client's display after the live turns
        self.live_seq: int | None = None
        self.observed = False

    def on_message(self, ev: MessageEvent) -> None:
        if ev.phase != LIVE:
            return
        self.with_ids = self.with_ids or ev.mid is not None
        content = ev.update.get("content")
        blocks = content if isinstance(content, list) else [content]
        for block in blocks:
            text = model.block_text(block)
            if text:
                self.live_texts.add(text)

    def on_turn_start(self, ev: TurnStart) -> None:
        prompt = ev.params.get("prompt")
        text = model.blocks_text(prompt) if isinstance(prompt, list) else ""
        if text:
            self.live_texts.add(text)

    def on_replay_start(self, ev: ReplayStart) -> None:
        self.history_texts = set(self.live_texts)

    on_update_frame = None  # harness events only

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        data = e.data
        if e.stream != "harness" or e.event != "observed" or not isinstance(data, dict):
            return
        self.observed = True
        if data.get("exited") or data.get("control_of") or data.get("hangup"):
            return
        shown = [(str(m.get("role", "")), str(m.get("text", "")))
                 for m in data.get("shown") or [] if isinstance(m, dict)]
        if not data.get("reload"):
            if data.get("render") == "incremental":
                self.live += shown
            else:
                self.live = shown
            self.live_seq = e.seq
            return
        if data.get("parity") and self.live_seq is not None:
            self._compare(shown, e.seq, int(data.get("protocol") or ev.protocol))
        self.live, self.live_seq = [], None  # the next live display starts from the replay

    def _history(self, shown: list[tuple[str, str]]) -> list[tuple[str, str]]:
        texts = self.live_texts if self.history_texts is None else self.history_texts
        return [m for m in shown if any(t in m[1] for t in texts)]

    def _compare(self, replayed: list[tuple[str, str]], seq: int, protocol: int) -> None:
        self.exercised(RULE, protocol)
        live, after = self._history(self.live), self._history(replayed)
        if live == after:
            return
        ids = ("with message IDs" if self.with_ids else
               "without message IDs (the fallback grouping is the client's, but it must be one "
               "grouping)")
        self.found(RULE, f"the replay of the live updates ({ids}) shows {_differs(live, after)}",
                   key=seq, entries=[self.live_seq or seq, seq],
                   expected=[f"{r}: {short(t, 80)}" for r, t in live][:12],
                   actual=[f"{r}: {short(t, 80)}" for r, t in after][:12], protocol=protocol)

    def finish(self) -> None:
        if self.observed:
            self.not_applicable(RULE, NOT_REACHED, Reason.NOT_TESTABLE)


def _differs(live: list[tuple[str, str]], after: list[tuple[str, str]]) -> str:
    """In words: how the display after the replay differs from the live one."""
    if len(live) != len(after):
        return (f"{len(after)} messages where the live turns showed {len(live)}: the client "
                "groups the same updates differently live and in replay")
    i = next(i for i, (a, b) in enumerate(zip(live, after, strict=True)) if a != b)
    return (f"message {i + 1} as {after[i][0]} {short(after[i][1], 60)!r} where the live turns "
            f"showed {live[i][0]} {short(live[i][1], 60)!r}")
