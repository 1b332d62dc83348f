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
from conformance.checks.controls import Crash, Differential, control_view, has_cause
from conformance.checks.events import Frame, MessageEvent, OtherUpdate, ReplayStart, TurnStart
from conformance.checks.reducer import UNSET, Reducer, hazardous, locate, related, shown_from
from conformance.results import Reason

NO_PROFILE = ("no profile: the client's rendered messages were not observed "
              "(give --client-profile or --client-adapter)")
OBSERVED = "observed"  # the harness event the client runner writes after each turn
# A rule no observation graded although the screen was observed: the profile worked,
# the traffic never reached what the rule is about (never "no profile").
NOT_REACHED = ("the client's screen was observed, but never after a stream this rule is "
               "about")


# ---------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------


# Rules a turn exercises, by the features of what the double sent.
_FEATURE_RULES: dict[str, tuple[str, ...]] = {
    "v1-absent": ("MID-C-04", "MID-S-02/client"),
    "v1-null": ("MID-C-04", "MID-S-02/client"),
    "v1-wrong-type": ("MID-C-05", "MID-S-03/client"),
    "empty-id": ("MID-C-06",),
    "upsert": ("MID-V2-02/client", "MID-V2-03"),
    "v2-invalid-chunk": ("MID-V2-07", "MID-V2-07/shown-alone"),
    "malformed-content": ("MID-V2-08",),
}


@register
class ShownMessages(Checker):
    rules = (
        Rule("MID-C-02/merged"),
        Rule("MID-C-02/split"),
        Rule("MID-C-02/order"),
        Rule("MID-C-03/merged"),
        Rule("MID-C-03/split"),
        Rule("MID-C-03/content"),
        Rule("MID-C-03/prompt-twice"),
        Rule("MID-C-03/order"),
        Rule("MID-C-04"),
        Rule("MID-S-02/client"),
        Rule("MID-C-05"),
        Rule("MID-S-03/client"),
        Rule("MID-C-06"),
        Rule("MID-C-07"),
        Rule("MID-V2-14/truncated"),
        Rule("MID-V2-02/client"),
        Rule("MID-V2-03"),
        Rule("MID-V2-04"),
        Rule("MID-V2-04/meta"),
        Rule("MID-V2-07"),
        Rule("MID-V2-07/shown-alone"),
        Rule("MID-V2-08"),
        Rule("MID-C-08/crash"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.reducers: dict[int, Reducer] = {}
        self.protocols: dict[int, int] = {}
        # The connection the client last played a turn or a reload on: what it shows next
        # is compared with that one, whatever other agent processes it started since
        # (a gateway's health check opens and closes one that carries no message).
        self.played: int | None = None
        self.observed = False  # the client's screen was observed at least once
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
        self.played = ev.conn

    def on_turn_start(self, ev: TurnStart) -> None:
        self.protocols[ev.conn] = ev.protocol
        self._reducer(ev.conn).turn()
        self.played = ev.conn
        prompt = ev.params.get("prompt")
        text = model.blocks_text(prompt) if isinstance(prompt, list) else ""
        if text:
            self._reducer(ev.conn).prompts.add(text)

    on_update_frame = None  # harness events only

    def on_frame(self, ev: Frame) -> None:
        e = ev.entry
        if e.stream != "harness" or e.event != OBSERVED or not isinstance(e.data, dict):
            return
        data = e.data
        self.observed = True
        conn = e.conn if self.played is None else self.played
        protocol = int(data.get("protocol") or self.protocols.get(conn, ev.protocol))
        reducer = self._reducer(conn)
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
        if protocol < 2 and any(x.kind == "user" and x.text() in reducer.prompts
                                for x in expected):
            specific.add("MID-C-03/prompt-twice")  # a v1 live echo of the prompt was played
        shown = shown_from(data.get("shown") or [])
        if protocol >= 2 and any(s.meta is not UNSET for s in shown):
            specific.add("MID-V2-04/meta")
            if "chunk-meta" in reducer.features:
                specific.add("MID-V2-04")
        control_of, control = str(data.get("control_of") or ""), str(data.get("control") or "")
        if data.get("hangup"):
            return  # a replay the agent cut short: the client may show it or not (MID-V2-14)
        if data.get("exited"):
            why = str(data.get("why") or "the client exited")
            # The control of a probe the client died on: its own death decides that crash
            # (MID-C-08/crash, once), it is no second fault.
            decides = bool(control_of) and self.diff.crashed(control_of)
            if control_of:
                self.diff.control(control_of, None, f"{why} during the control stream",
                                  at=(e.seq,))
            tested = sorted(specific - {"MID-C-02/order", "MID-C-02/split", "MID-V2-04/meta",
                                        "MID-C-03/prompt-twice"})
            causes = [r for r in tested if has_cause(r)]
            if causes and control and not control_of:  # its control decides the cause
                self.diff.hold_crash(str(data.get("turn")), Crash(
                    causes, f"{why} after a stream that tests {', '.join(tested)}",
                    (e.seq,), data.get("tail", ""), protocol))
            elif tested and not decides:  # it died on message-ID input: the fault (its exit
                # follows)
                self.found("MID-C-08/crash", f"{why} after a stream that tests "
                           f"{', '.join(tested)}", entries=[e.seq],
                           expected="the client alive, showing the turn",
                           actual=data.get("tail", ""), protocol=protocol)
            return  # else the exit (or hang) is the fault, graded where it is seen
        if not (control_of and self.diff.crashed(control_of)):
            self.exercised("MID-C-08/crash", protocol)
        kinds = data.get("kinds") or ("user", "agent", "thought")
        if control_of:  # evidence for its probe's findings, not graded on its own
            visible = [x for x in expected if x.kind in kinds and x.blocks]
            self.diff.control(control_of, control_view(visible, locate(reducer, shown)[0]))
            return
        if not any(x.kind in kinds for x in expected) and not reducer.stale:
            return  # no message was sent to compare the display with: no credit
        for rule in rules | specific:
            if control and has_cause(rule):
                self.diff.exercise(rule, protocol)
            else:
                self.exercised(rule, protocol)
        reload = bool(data.get("reload"))
        # After a truncated replay, the full one must not be added to it (MID-V2-14).
        reload_rule = "MID-V2-14/truncated" if data.get("after_truncated") else "MID-C-07"
        if reload:
            self.exercised(reload_rule, protocol)
        issues = list(compare(reducer, expected, shown, protocol=protocol, kinds=kinds,
                              controlled=bool(control)))
        reloaded: set[int] = set()  # entries of messages a reload showed lost or twice
        for i, issue in enumerate(issues):
            # Lost or shown twice after a reload: in v2 the replay's whole-message updates
            # make these MID-V2-02/V2-03 issues; all are the reload's fault (MID-C-07).
            if reload and issue.rule in ("MID-C-03/content", "MID-V2-02/client", "MID-V2-03"):
                after = ("after a truncated replay and a full one"
                         if reload_rule != "MID-C-07" else "after the reload")
                issues[i] = Issue(reload_rule, f"{after}, {issue.message}",
                                  issue.entries, issue.expected, issue.actual)
                reloaded.update(issue.entries)
        for issue in issues:
            if reload and issue.rule == "MID-C-03/split" and reloaded & set(issue.entries):
                continue  # a replayed message shown twice: the MID-C-07 fault, not a split
            if control and issue.test and has_cause(issue.rule):
                self.diff.hold(str(data.get("turn")), issue, (*issue.entries, e.seq), protocol)
                continue
            self.found(issue.rule, issue.message, key=(e.conn, issue.entries),
                       entries=[*issue.entries, e.seq],
                       expected=issue.expected, actual=issue.actual, protocol=protocol)

    def finish(self) -> None:
        self.diff.finish()
        if self.diff.crash_attributed:
            # The client did die: "it survives every stream" passes for no earlier turn.
            self._seen.pop("MID-C-08/crash", None)
        if self.observed:  # what was exercised or found keeps its row; the rest says why
            for rule in self.rules:
                self.not_applicable(rule.id, f"not testable: {NOT_REACHED}", Reason.NOT_TESTABLE)
