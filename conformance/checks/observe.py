"""What the client showed against what it should have shown: the client observation checker.

Three pure parts, one module each:

* :mod:`conformance.checks.reducer`, the catalogue's reference reducer
  (Appendix G) and the recognition of sent texts in what a client rendered;
* :mod:`conformance.checks.compare`, which reports merges, splits, lost,
  duplicated, stale or re-ordered content, each under the requirement the
  catalogue grades it by;
* :mod:`conformance.checks.controls`, which decides a finding that names a
  cause against its control stream.

:class:`ShownMessages` is the registered checker: it feeds the reducer from the
timeline and grades each ``observed`` harness event that the client runner
writes into the transcript, so a recorded client transcript regrades offline
exactly like a live run. Grading is a function of the streams the double sent
and the messages the client showed, nothing else.
"""

from __future__ import annotations

from typing import Any

from conformance import model
from conformance.checks.base import Checker, Rule, register
from conformance.checks.compare import Issue, compare
from conformance.checks.controls import Differential, control_view, has_cause
from conformance.checks.events import Frame, MessageEvent, OtherUpdate, ReplayStart, TurnStart
from conformance.checks.reducer import UNSET, Reducer, hazardous, locate, related, shown_from
from conformance.results import Outcome

F, W, I = Outcome.FAIL, Outcome.WARN, Outcome.INFO
NO_PROFILE = ("no profile: the client's rendered messages were not observed "
              "(give --client-profile or --client-adapter)")
OBSERVED = "observed"  # the harness event the client runner writes after each turn


# ---------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------


def _rule(rid: str, title: str, outcome: Outcome, versions: tuple[int, ...] = (1, 2)) -> Rule:
    return Rule(rid, title, outcome, versions=versions, role="client", untested=NO_PROFILE)


# Rules a turn exercises, by the features of what the double sent.
_FEATURE_RULES: dict[str, tuple[str, ...]] = {
    "v1-absent": ("MID-C-04", "MID-S-02/client"),
    "v1-null": ("MID-C-04", "MID-S-02/client"),
    "v1-wrong-type": ("MID-C-05", "MID-S-03/client"),
    "empty-id": ("MID-C-06",),
    "upsert": ("MID-V2-02/client", "MID-V2-03"),
    "v2-invalid-chunk": ("MID-V2-07",),
    "malformed-content": ("MID-V2-08",),
}


@register
class ShownMessages(Checker):
    rules = (
        _rule("MID-C-02/merged", "distinct IDs (case, whitespace, normalisation, numbers) are "
              "never shown as one message", F),
        _rule("MID-C-02/split", "a message with an unusual ID is never split", F),
        _rule("MID-C-02/order", "messages are not ordered by parsing or sorting their IDs", F),
        _rule("MID-C-03/merged", "consecutive messages with different IDs are shown apart "
              "(warn in v1, fail in v2)", W),
        _rule("MID-C-03/split", "chunks of one ID stay one message, even across a tool call "
              "(warn in v1, fail in v2)", W),
        _rule("MID-C-03/content", "each message shows exactly its chunks, in order, once", F),
        _rule("MID-C-03/order", "messages are shown in order of first appearance "
              "(not normative)", I),
        _rule("MID-C-04", "a null messageId and an omitted one render the same (v1)", F,
              versions=(1,)),
        _rule("MID-S-02/client", "the client gives null and omitted messageId one meaning (v1)",
              F, versions=(1,)),
        _rule("MID-C-05", "a v1 chunk with a wrongly typed messageId is kept as ID-less", W,
              versions=(1,)),
        _rule("MID-S-03/client", "a wrongly typed v1 messageId reads as absent, the update is "
              "kept", W, versions=(1,)),
        _rule("MID-C-06", "the empty string is a real ID, not \"no ID\"", W),
        _rule("MID-C-07", "after a reload, each message of the replayed history is shown once, "
              "whether the replay keeps the IDs or regenerates them", W),
        _rule("MID-V2-02/client", "whole-message updates are upserts keyed by messageId "
              "(omitted keeps, null and [] clear, a value replaces)", F, versions=(2,)),
        _rule("MID-V2-03", "chunks append to and updates replace one message's content, "
              "in arrival order", F, versions=(2,)),
        _rule("MID-V2-04", "a chunk's _meta never patches the message's _meta", F,
              versions=(2,)),
        _rule("MID-V2-07", "a v2 chunk without a string ID is rejected or ignored, never "
              "attached to a message", F, versions=(2,)),
        _rule("MID-V2-08", "a whole-message update with malformed content changes nothing", W,
              versions=(2,)),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.reducers: dict[int, Reducer] = {}
        self.protocols: dict[int, int] = {}
        self.diff = Differential(self)

    def _reducer(self, conn: int) -> Reducer:
        r = self.reducers.get(conn)
        if r is None:
            r = self.reducers[conn] = Reducer()
        return r

    def on_message(self, ev: MessageEvent) -> None:
        self.protocols[ev.conn] = ev.protocol
        self._reducer(ev.conn).message(ev)

    def on_other(self, ev: OtherUpdate) -> None:
        self.protocols[ev.conn] = ev.protocol
        if ev.update_type != "state_update":
            self._reducer(ev.conn).other(ev.seq)

    def on_replay_start(self, ev: ReplayStart) -> None:
        # After a reload the display is the replayed history (and what follows), whatever
        # the client showed before: the expectation starts afresh (MID-C-07).
        if ev.requested:
            self.reducers[ev.conn] = Reducer()

    def on_turn_start(self, ev: TurnStart) -> None:
        self.protocols[ev.conn] = ev.protocol
        prompt = ev.params.get("prompt")
        text = model.blocks_text(prompt) if isinstance(prompt, list) else ""
        if text:
            self._reducer(ev.conn).prompts.add(text)

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.stream != "harness" or e.event != OBSERVED or not isinstance(e.data, dict):
            return
        data = e.data
        protocol = int(data.get("protocol") or self.protocols.get(e.conn, ev.protocol))
        reducer = self._reducer(e.conn)
        touched = reducer.take_touched()
        expected = touched if data.get("render") == "incremental" else list(reducer.order)
        rules = {"MID-C-03/merged", "MID-C-03/split", "MID-C-03/content", "MID-C-03/order"}
        specific: set[str] = set()
        for feat in reducer.features:
            if feat.startswith("v1-") and protocol >= 2:
                continue
            specific.update(_FEATURE_RULES.get(feat, ()))
        if any(hazardous(x.mid) for x in expected) or any(
                related(a.mid, b.mid) for a in expected for b in expected
                if a.mid is not None and b.mid is not None and a.kind == b.kind):
            specific.update(("MID-C-02/merged", "MID-C-02/split", "MID-C-02/order"))
        keyed = [x for x in expected if x.mid is not None and x.blocks]
        if len(keyed) >= 2:
            rules.add("MID-C-02/order")
        shown = shown_from(data.get("shown") or [])
        if "chunk-meta" in reducer.features and any(s.meta is not UNSET for s in shown):
            specific.add("MID-V2-04")
        control_of, control = str(data.get("control_of") or ""), str(data.get("control") or "")
        if data.get("exited"):
            why = str(data.get("why") or "the client exited")
            if control_of:
                self.diff.control(control_of, None, f"{why} during the control stream")
            for rule in sorted(specific - {"MID-C-02/order", "MID-C-02/split"}
                               or {"MID-C-03/content"}):
                self.found(rule, f"{why} after this stream (the catalogue grades a crash as "
                           "fail)", entries=[e.seq], expected="the client alive, showing the turn",
                           actual=data.get("tail", ""), outcome=F)
            return
        kinds = data.get("kinds") or ("user", "agent", "thought")
        if control_of:  # evidence for its probe's findings, not graded on its own
            visible = [x for x in expected if x.kind in kinds and x.blocks]
            self.diff.control(control_of, control_view(visible, locate(reducer, shown)[0]))
            return
        for rule in rules | specific:
            if control and has_cause(rule):
                self.diff.exercise(rule, protocol)
            else:
                self.exercised(rule, protocol)
        reload = bool(data.get("reload"))
        if reload:
            self.exercised("MID-C-07", protocol)
        for issue in compare(reducer, expected, shown, protocol=protocol, kinds=kinds,
                             controlled=bool(control)):
            # Lost or shown twice after a reload: in v2 the replay's whole-message updates
            # make these MID-V2-02/V2-03 issues, which the reload case is not about.
            if reload and issue.rule in ("MID-C-03/content", "MID-V2-02/client", "MID-V2-03"):
                issue = Issue("MID-C-07", f"after the reload, {issue.message}", issue.entries,
                              issue.expected, issue.actual, W)
            if control and issue.test and has_cause(issue.rule):
                self.diff.hold(str(data.get("turn")), issue, (*issue.entries, e.seq), protocol)
                continue
            self.found(issue.rule, issue.message, key=(e.conn, issue.entries),
                       entries=[*issue.entries, e.seq],
                       expected=issue.expected, actual=issue.actual, outcome=issue.outcome)

    def finish(self) -> None:
        self.diff.finish()
