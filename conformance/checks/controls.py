"""Differential diagnosis: a finding that names a cause is decided against a control stream.

A client case that checks a rule naming a specific cause (an ID transform under
MID-C-02, ``null`` under MID-C-04 / MID-S-02, a malformed ID under MID-C-05 /
MID-S-03, ``""`` under MID-C-06, an invalid v2 chunk under MID-V2-07) plays each
turn twice, the same way: the probe, then its control
(``build_control`` in ``conformance/client/script.py``), the same arrangement with
ordinary IDs and ``Ctrl `` before every text. The reference reducer expects
the same display for both.

A probe issue with a cause is held until its control is shown, then:

* the control was shown as expected: the client treats the probe differently
  because of the property under test, so the cause-specific finding stands;
* the control was shown the same way (the same pair merged, the same message
  split, the same order, the same content lost): the property is not the cause.
  The cause-specific rule says "not attributable: the control was shown the same
  way" (neither pass nor fail), and the fault is reported once where it belongs,
  under MID-C-03 (merged and split: warn in v1, fail in v2; order: info; lost
  content: fail);
* no control was shown (the case ended first): no cause can be named either.

A client that dies on a probe stream is decided the same way (the suite starts it
again and shows it the control): when the control is shown, the crash is the
fault of the rule the stream tests (its exit and unanswered probe are folded
into that fail as consequences, ``grading.fold_consequences``); when the
control kills it too, or no control is shown, the crash is ``MID-C-08/crash``,
whatever the IDs.

Pure: the observation checker (:mod:`conformance.checks.observe`) feeds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conformance.controlstream import CAUSE_RULES, CONTROL_ID, CONTROL_PREFIX
from conformance.results import Reason

if TYPE_CHECKING:
    from conformance.checks.compare import Issue
    from conformance.checks.reducer import Expected

# The rule a fault belongs to when its cause is not the ID property under test.
GENERIC = {"merged": "MID-C-03/merged", "attached": "MID-C-03/merged",
           "split": "MID-C-03/split", "order": "MID-C-03/order", "lost": "MID-C-03/content"}
# The fault as seen, then what its control showed.
_FAULT = {
    "merged": "two distinct messages are shown as one message",
    "attached": "a chunk is shown inside another message",
    "split": "one message is shown in several parts",
    "order": "messages are shown in another order than first appearance",
    "lost": "content of an ID-less chunk is not shown",
}
_SAME = {
    "merged": "and so were the same two in the control stream (ordinary IDs, same "
              "arrangement): the client does not keep messages apart by messageId here",
    "attached": "and so was its control, which had an ID of its own: the client does not "
                "keep messages apart by messageId here",
    "split": "and so was its control (an ordinary ID, same arrangement): the client does not "
             "keep one messageId together here",
    "order": "and so were their controls with ordinary IDs (display order is not normative)",
    "lost": "nor in the control stream, where the chunk had no messageId at all",
}
NOT_ATTRIBUTABLE = "not attributable: the control was shown the same way"


def has_cause(rule: str) -> bool:
    return rule.split("/", 1)[0] in CAUSE_RULES


@dataclass
class ControlView:
    """What a client showed for a control stream, by sent text."""

    places: dict[str, frozenset[int]]  # a text -> the shown messages its message is in
    missing: set[str]  # texts of visible messages that are not shown
    in_order: bool  # the control messages are shown in order of first appearance


def control_view(exp: list[Expected], where: dict[str, list[tuple[int, int]]]) -> ControlView:
    """``exp``: the visible expected messages with content; ``where``: reducer.locate()."""
    places: dict[str, frozenset[int]] = {}
    missing: set[str] = set()
    firsts: list[tuple[tuple[int, int], int]] = []
    for e in exp:
        spots = [p for b in e.blocks for p in where.get(b.text, ())]
        shown_in = frozenset(j for j, _ in spots)
        for b in e.blocks:
            places[b.text] = shown_in
            if b.text not in where:
                missing.add(b.text)
        # Order: the control's own messages (IDs it numbered in order of first appearance,
        # or none); the double's echo of the prompt has an ID of the double's making.
        if (spots and e.blocks[0].text.startswith(CONTROL_PREFIX)
                and (e.mid is None or e.mid.startswith(CONTROL_ID))):
            firsts.append((min(spots), e.order))
    order = [o for _, o in sorted(firsts)]
    return ControlView(places, missing, order == sorted(order))


def shown_same(test: tuple[str, ...], view: ControlView) -> bool | None:
    """Was the control shown the way the probe was? None: the control cannot tell."""
    kind, texts = test[0], [CONTROL_PREFIX + t for t in test[1:]]
    if kind == "order":
        return not view.in_order
    if kind == "lost":
        if not all(t in view.places for t in texts):
            return None
        return any(t in view.missing for t in texts)
    spots = [view.places.get(t) for t in texts]
    if not spots or any(not s for s in spots):
        return None  # the control message is not among what the client showed
    if kind == "split":
        return len(spots[0] or ()) >= 2
    a, b = spots[0] or frozenset(), spots[1] or frozenset()
    return bool(a & b)  # merged / attached


@dataclass
class Crash:
    """A client's exit on a probe stream, held until its control is shown."""

    causes: list[str]  # the cause-specific rules the stream tests
    message: str  # "<why> after a stream that tests ..."
    entries: tuple[int, ...]
    tail: Any
    protocol: int


@dataclass
class _Held:
    issue: Issue
    entries: tuple[int, ...]
    protocol: int


@dataclass
class Differential:
    """Probe issues held until their control is shown; rules exercised under a control are
    passed only if no probe of theirs turned out not attributable."""

    checker: Any  # the observation checker: found / exercised / not_applicable
    held: dict[str, list[_Held]] = field(default_factory=dict)  # probe turn -> issues
    exercised: set[tuple[str, int]] = field(default_factory=set)
    unattributable: set[str] = field(default_factory=set)
    reported: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    crashes: dict[str, Crash] = field(default_factory=dict)  # probe turn -> its crash
    crash_attributed: bool = False  # a crash was put down to the rule its stream tests

    def hold_crash(self, probe: str, crash: Crash) -> None:
        self.crashes[probe] = crash

    def crashed(self, probe: str) -> bool:
        return probe in self.crashes

    def _crash(self, probe: str, view: ControlView | None, why: str,
               at: tuple[int, ...] = ()) -> None:
        crash = self.crashes.pop(probe, None)
        if crash is None:
            return
        if view is None:  # the control killed it too (at its entries ``at``), or was not shown
            self.checker.found("MID-C-08/crash", f"{crash.message}; " + (
                why or "no control stream tells why"), entries=crash.entries + at,
                expected="the client alive, showing the turn", actual=crash.tail,
                protocol=crash.protocol)
            return
        self.crash_attributed = True
        for rule in crash.causes:
            self.checker.found(rule, f"{crash.message}; its control (the same turn with "
                               "ordinary IDs) was shown: the stream's IDs killed it",
                               entries=crash.entries, expected="the client alive, showing "
                               "the turn", actual=crash.tail, protocol=crash.protocol)
        self.checker.not_applicable(
            "MID-C-08/crash", f"not testable: the client died on a stream that tests "
            f"{', '.join(crash.causes)} and showed its control: the fault is graded there",
            Reason.NOT_ATTRIBUTABLE)

    def hold(self, probe: str, issue: Issue, entries: tuple[int, ...], protocol: int) -> None:
        self.held.setdefault(probe, []).append(_Held(issue, entries, protocol))

    def exercise(self, rule: str, protocol: int) -> None:
        self.exercised.add((rule, protocol))

    def control(self, probe: str, view: ControlView | None, why: str = "",
                at: tuple[int, ...] = ()) -> None:
        """The control of turn ``probe`` was shown (``view``), or not (None, with ``why``;
        ``at``: the entries where the client died on it)."""
        self._crash(probe, view, why, at)
        for h in self.held.pop(probe, []):
            same = shown_same(h.issue.test, view) if view is not None else None
            if same is False:
                self.checker.found(h.issue.rule, h.issue.message + "; its control (the same "
                                   "arrangement with ordinary IDs) was shown as expected",
                                   entries=h.entries, expected=h.issue.expected,
                                   actual=h.issue.actual, protocol=h.protocol)
                continue
            rule = h.issue.rule
            self.unattributable.add(rule)
            generic = GENERIC[h.issue.test[0]]
            if same is None:
                self.checker.not_applicable(rule, "not attributable: " + (
                    why or "the control stream could not be compared"), Reason.NOT_ATTRIBUTABLE)
                message = (f"{_FAULT[h.issue.test[0]]} (no control tells why: "
                           f"{why or 'the control stream could not be compared'})")
            else:
                self.checker.not_applicable(rule, f"{NOT_ATTRIBUTABLE} (the same arrangement "
                                            f"with ordinary IDs); the fault is reported under "
                                            f"{generic}", Reason.NOT_ATTRIBUTABLE)
                message = f"{_FAULT[h.issue.test[0]]}, {_SAME[h.issue.test[0]]}"
            key = (generic, h.issue.test)
            if key in self.reported:
                continue  # one fault (e.g. MID-C-04 and MID-S-02/client for one merge)
            self.reported.add(key)
            self.checker.found(generic, message, entries=h.entries, expected=h.issue.expected,
                               actual=h.issue.actual, protocol=h.protocol)

    def finish(self) -> None:
        for name in list(self.crashes):
            self._crash(name, None, "the case ended before the control stream was shown")
        for name in list(self.held):
            self.control(name, None, "the case ended before the control stream was shown")
        for rule, protocol in sorted(self.exercised):
            if rule not in self.unattributable:
                self.checker.exercised(rule, protocol)
