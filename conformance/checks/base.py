# long: one grading pass: the sink, the dispatch of events with its short path for repeated chunks, and the rows
"""Checker registry and the grading engine.

A checker is a pure, streaming function of a transcript: it receives the
timeline's events in order and reports findings through ``found``. It never
touches processes, files or clocks, so the same checker grades a live run and a
recorded file. Each checker declares its rules (requirement ID plus sub-rule
slug), the protocol versions they apply to and the side they grade; the grade of a
violation is data: the register (``conformance/data/requirements.yaml``) holds it per
profile and protocol version, and the sink looks it up, so no checker decides one.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from conformance.profiles import DEFAULT_PROFILE, Profile
from conformance.profiles import get as get_profile
from conformance.requirements import Grades, RuleRecord, load_grades, load_rule_records
from conformance.results import SEVERITY, Finding, Outcome, Reason
from conformance.transcript import Entry

MAX_FINDINGS_PER_RULE = 5  # faults per rule reported in full; the rest are counted
MAX_ENTRIES_PER_FAULT = 8  # transcript entries kept as a fault's evidence
MAX_FAULT_KEYS = 100_000  # faults per rule told apart past the few (a few MB at most)


@dataclass(frozen=True)
class Rule:
    """A sub-rule a checker grades, by ID ("MID-A-02/cross-turn-reuse"); everything else
    about it (title, role, versions, the "not testable" text, profiles, grades) is one
    record in the register, looked up here."""

    id: str

    @property
    def record(self) -> RuleRecord:
        """Its register record (a rule missing there is our bug: KeyError)."""
        return load_rule_records()[self.id]

    @property
    def title(self) -> str:
        return self.record.title

    @property
    def versions(self) -> tuple[int, ...]:
        return self.record.versions

    @property
    def role(self) -> str:
        return self.record.role

    @property
    def untested(self) -> str:
        return self.record.untested

    @property
    def requirement(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def grades(self) -> Grades:
        """Its grades, from the register (a rule missing there is our bug: KeyError)."""
        return load_grades()[self.id]


@dataclass
class Options:
    profile: Profile = field(default_factory=lambda: get_profile(DEFAULT_PROFILE))
    cross_turn_reuse: Outcome = Outcome.FAIL  # MID-A-02.2 is configurable to warn
    strict_ids: bool = False  # --strict-ids: a v1 agent with no IDs at all is warn, not info

    @property
    def modifiers(self) -> frozenset[str]:
        """The options that change a grade, named as the register's ``options`` name them."""
        out = set()
        if self.cross_turn_reuse is Outcome.WARN:
            out.add("cross-turn-reuse=warn")
        if self.strict_ids:
            out.add("strict-ids")
        return frozenset(out)


class Checker:
    rules: ClassVar[tuple[Rule, ...]] = ()
    # True when, once a run of chunks of one message has had its first two events (see
    # timeline.MessageEvent.repeat), a further one changes nothing and finds nothing,
    # unless the checker found something on the second: the grader then skips it for the
    # rest of the run. Leave False for a checker that counts or keeps every chunk.
    quiet_repeats: ClassVar[bool] = False
    # ``quiet_on`` may narrow it to some runs (e.g. those with IDs).
    # A checker may also define ``on_repeats(run: timeline.RepeatRun)``: the grader then
    # hands it the rest of a settled run in bulk, and it must do exactly what
    # ``on_message`` would do for each of ``run.events()`` in order.
    # And ``on_update_frame(ev: Frame)``: the grader calls it instead of ``on_frame`` for
    # the Frame of an update line (``is_update_frame``: the agent's plain session/update
    # notification, most of a transcript), and it must do exactly what ``on_frame`` would
    # do for that line; ``on_update_frame = None`` says ``on_frame`` does nothing there.

    def __init__(self, options: Options, sink: Sink) -> None:
        self.options = options
        self.profile = options.profile
        self._sink = sink
        self._seen = sink.seen
        # rules exercised (protocol 0) already: a hot path asks ``rule not in self.marked``
        # and calls ``mark`` only then, not ``exercised`` on every event
        self.marked: set[str] = set()

    def found(self, rule: str, message: str, *, key: Hashable = None,
              entries: Iterable[int] = (), expected: Any = None, actual: Any = None,
              protocol: int | None = None, times: int = 1) -> None:
        """Report ``times`` occurrences of a breach of ``rule``, graded as the register
        grades it for the run's profile and ``protocol`` (default: the transcript's).

        ``key`` names the fault (an ID, a pair of messages, ...): every report with the
        same key is one finding, counted, with the first few entries as evidence and
        the first message. Without a key each call is a fault of its own.
        """
        self._sink.add(rule, message, tuple(entries), expected, actual, times, key, protocol)

    def quiet_on(self, ev: Any) -> bool:
        """``quiet_repeats`` for the run that ``ev`` (its first repeat) settles."""
        return self.quiet_repeats

    def exercised(self, rule: str, protocol: int | None = None) -> None:
        self._seen[rule].add(protocol or 0)  # Sink.exercised, one call less (a hot path)

    def mark(self, rule: str) -> None:
        """``exercised(rule)``, remembered in ``marked``."""
        self.marked.add(rule)
        self._seen[rule].add(0)

    def not_applicable(self, rule: str, reason: str, code: Reason) -> None:
        """The rule does not apply to this traffic (e.g. a profile allows it): say why, in
        words (``reason``) and as a code of the fixed vocabulary (``code``)."""
        self._sink.reasons.setdefault(rule, (reason, code))

    def finish(self) -> None:
        """Called after the last event; report what needs the whole transcript."""


REGISTRY: list[type[Checker]] = []


def register(cls: type[Checker]) -> type[Checker]:
    REGISTRY.append(cls)
    return cls


def all_rules() -> dict[str, Rule]:
    """Every registered rule by ID (the checker modules register when ``conformance.checks``
    is imported, which importing this module implies)."""
    return {r.id: r for cls in REGISTRY for r in cls.rules}


class _Fault:
    """One fault of one rule while grading: the first report, the count, the evidence."""

    __slots__ = ("actual", "entries", "expected", "message", "occurrences", "outcome")

    def __init__(self, outcome: Outcome, message: str, entries: tuple[int, ...],
                 expected: Any, actual: Any, occurrences: int) -> None:
        self.outcome, self.message = outcome, message
        self.expected, self.actual = expected, actual
        self.entries = list(entries[:MAX_ENTRIES_PER_FAULT])
        self.occurrences = occurrences

    def again(self, outcome: Outcome, entries: tuple[int, ...], times: int) -> None:
        self.occurrences += times
        if SEVERITY[outcome] > SEVERITY[self.outcome]:
            self.outcome = outcome
        kept = self.entries
        for e in entries:
            if len(kept) >= MAX_ENTRIES_PER_FAULT:
                break
            if e not in kept:
                kept.append(e)

    def finding(self, rule_id: str) -> Finding:
        return Finding(rule_id, self.outcome, self.message, self.expected, self.actual,
                       tuple(self.entries), occurrences=self.occurrences)


class Sink:
    """Collects findings, one per fault, with bounded memory: a few faults per rule in
    full, the rest counted. Their keys' hashes are kept, so a fault is counted once;
    past MAX_FAULT_KEYS faults of one rule a repeat of a later one may count again."""

    def __init__(self, rules: dict[str, Rule], *, protocol: int = 1,
                 options: Options | None = None) -> None:
        self.rules = rules
        options = options or Options()
        self.protocol, self.profile, self.modifiers = (protocol, options.profile.name,
                                                       options.modifiers)
        self._grade: dict[tuple[str, int], Outcome] = {}
        # {connection: version} as the timeline reads it from initialize: a fault is graded
        # under the version the target negotiated, not the one the case asked for
        self.negotiated: dict[int, int] = {}
        self.faults: dict[str, dict[Hashable, _Fault]] = defaultdict(dict)
        # the hashes of keyed faults past the few, so a fault is counted once (up to a bound)
        self.more_keys: dict[str, set[int]] = defaultdict(set)
        self.more_faults: dict[str, int] = defaultdict(int)
        self.more_times: dict[str, int] = defaultdict(int)
        self.seen: dict[str, set[int]] = defaultdict(set)
        self.added = 0  # occurrences so far, kept or counted
        self.reasons: dict[str, tuple[str, Reason]] = {}

    def grade(self, rule_id: str, protocol: int | None = None) -> Outcome:
        """The register's grade of a violation of ``rule_id`` in this run."""
        if protocol is None and self.negotiated:
            protocol = next(reversed(self.negotiated.values()))
        at = (rule_id, protocol or self.protocol)
        got = self._grade.get(at)
        if got is None:
            got = self._grade[at] = load_grades()[rule_id].of(self.profile, at[1],
                                                              self.modifiers)
        return got

    def add(self, rule_id: str, message: str, entries: tuple[int, ...], expected: Any,
            actual: Any, times: int = 1, key: Hashable = None,
            protocol: int | None = None) -> None:
        self.added += times
        self.seen[rule_id].add(-1)
        out = self.grade(rule_id, protocol)
        faults = self.faults[rule_id]
        seen = None
        if key is None:
            key = object()  # a fault of its own
        else:
            fault = faults.get(key)
            if fault is not None:
                fault.again(out, entries, times)
                return
            seen = self.more_keys[rule_id]
            if hash(key) in seen:
                self.more_times[rule_id] += times
                return
        if len(faults) < MAX_FINDINGS_PER_RULE:
            faults[key] = _Fault(out, message, entries, expected, actual, times)
            return
        if seen is not None and len(seen) < MAX_FAULT_KEYS:
            seen.add(hash(key))
        self.more_faults[rule_id] += 1
        self.more_times[rule_id] += times

    def exercised(self, rule_id: str, protocol: int | None) -> None:
        self.seen[rule_id].add(protocol or 0)

    def rows(self, rule_id: str) -> list[Finding]:
        """The rule's findings: one per fault kept in full, then one counting the rest."""
        faults = self.faults.get(rule_id)
        if not faults:
            return []
        out = [f.finding(rule_id) for f in faults.values()]
        more = self.more_faults.get(rule_id, 0)
        if more:
            out.append(Finding(rule_id, max((f.outcome for f in out), key=SEVERITY.__getitem__),
                               f"{more} more fault(s) of this rule, not listed one by one",
                               entries=(), occurrences=self.more_times[rule_id], faults=more))
        return out


EventHandler = Callable[[Any], None]


def grade(entries: Iterable[Entry], *, protocol: int, options: Options | None = None,
          select: Iterable[str] | None = None, role: str = "agent",
          repeats: bool = True, schema_dir: Path | None = None) -> list[Finding]:
    """Grade a transcript: every selected rule gets at least one row. The one way the
    suite grades: the runner, ``check``, ``replay`` and both fuzzers call it.

    ``select`` is a list of requirement IDs or sub-rule IDs (prefix match);
    None selects every rule for ``role``. ``repeats=False`` turns off the short
    path for long chunk runs (the findings are the same; tests prove it).
    ``schema_dir`` (``--schema-dir``) adds the official schemas' findings
    (``SCHEMA/official``).
    """
    from conformance.checks.timeline import Timeline

    if schema_dir is not None:
        entries = list(entries)  # read twice: by the checkers and by the schemas

    options = options or Options()
    rules = all_rules()
    chosen = [r for r in rules.values() if r.role == role and _selected(r.id, select)]
    sink = Sink(rules, protocol=protocol, options=options)
    chosen_ids = {r.id for r in chosen}
    checkers = [cls(options, sink) for cls in REGISTRY
                if any(r.id in chosen_ids for r in cls.rules)]
    handlers: dict[type, list[tuple[EventHandler, Callable[[Any], bool]]]] = defaultdict(list)
    for ch in checkers:
        for name, etype in _handler_names(type(ch)):
            handlers[etype].append((getattr(ch, name), ch.quiet_on))
            if name == "on_frame":
                on_update = getattr(ch, "on_update_frame", getattr(ch, name))
                if on_update is not None:
                    handlers[_UpdateFrame].append((on_update, ch.quiet_on))
    timeline = Timeline(protocol, repeats=repeats,
                        session_messages=options.profile.session_messages,
                        replay_marker=options.profile.replay_marker,
                        idempotency_keys=options.profile.idempotency_keys)
    sink.negotiated = timeline.negotiated
    # The checkers' state makes no reference cycles; the cyclic collector would only walk
    # it again and again as it grows with the messages (about 8% of a 1M-update check).
    collecting = gc.isenabled()
    gc.disable()
    try:
        _dispatch(entries, timeline, handlers, sink)
    finally:
        if collecting:
            gc.enable()
    for ch in checkers:
        ch.finish()
    versions_seen = set(timeline.negotiated.values()) or {protocol}
    rows = _rows(chosen, sink, versions_seen, options.profile.name)
    if schema_dir is not None:
        from conformance.schema import validate_transcript

        rows += validate_transcript(entries, schema_dir, protocol, options.profile, role=role)
    return rows


RUN_BATCH = 64  # settled repeat lines held for on_repeats at most (more costs cache misses)


class _UpdateFrame:
    """The key of the handlers of an update line's Frame (``Checker.on_update_frame``)."""


def is_update_frame(entry: Entry, ev: Any) -> bool:
    """Whether ``entry``, whose first event after its Frame is ``ev``, is an update line:
    the agent's one JSON-RPC 2.0 notification on stdout, method session/update, params an
    object with an update object and a string sessionId (the timeline makes ``ev``, an
    update event of no batch, only for such a line; asked here all the same, so that no
    change of the timeline's can send another line to ``on_update_frame``). Every repeat
    line is one."""
    msg = entry.msg
    if (entry.src != "agent" or entry.stream != "stdout" or ev.batch is not None
            or type(msg) is not dict or msg.get("method") != "session/update"
            or msg.get("jsonrpc") != "2.0" or "id" in msg):
        return False
    params = msg.get("params")
    return (type(params) is dict and type(params.get("update")) is dict
            and type(params.get("sessionId")) is str)


def _dispatch(entries: Iterable[Entry], timeline: Any,
              handlers: dict[type, list[tuple[EventHandler, Callable[[Any], bool]]]],
              sink: Sink) -> None:
    """Feed the timeline and hand each event to its handlers, in order.

    A run of chunks of one message is mostly repeat lines (``timeline.repeat_update``:
    a Frame and a MessageEvent that continue the previous line's message). Once a
    run has had its first repeat (it is *settled*), its events go only to the
    handlers that are not ``quiet_repeats`` or that found something on that
    repeat: for the others they would be no-ops. When every one of those has an
    ``on_repeats``, the lines go to them in bulk, without an event per line.
    """
    from conformance.checks.events import Frame, MessageEvent, OtherUpdate, RepeatRun

    frame_all = handlers.get(_UpdateFrame, [])  # a repeat line's Frame is an update line's
    update_frame = [h for h, _ in frame_all]
    update_events = (MessageEvent, OtherUpdate)
    message_all = handlers.get(MessageEvent, [])
    bulk_of = {h: getattr(getattr(h, "__self__", None), "on_repeats", None)
               for h, _ in message_all}
    frame_again: list[EventHandler] = [h for h, _ in frame_all]
    message_again: list[EventHandler] = [h for h, _ in message_all]
    plain = {etype: [h for h, _ in hs] for etype, hs in handlers.items()}
    get = plain.get
    repeat_update, repeat_event, feed_new = (timeline.repeat_update, timeline.repeat_event,
                                             timeline.feed_new)

    def settle(handlers: list[tuple[EventHandler, Callable[[Any], bool]]],
               ev: Any) -> list[EventHandler]:
        """Hand ``ev`` (a run's first repeat) to every handler; those the rest of the run
        still needs."""
        again = []
        for h, quiet in handlers:
            before = sink.added
            h(ev)
            if sink.added != before or not quiet(ev):
                again.append(h)
        return again

    settled = False  # the current run has had its first repeat
    bulk: list[Callable[[Any], None]] = []  # on_repeats of message_again, when all have one
    run: Any = None  # a RepeatRun of settled lines not yet handed to ``bulk``
    for entry in entries:
        update = repeat_update(entry)
        if update is None:
            if run is not None:
                if run.seqs:
                    for fn in bulk:
                        fn(run)
                run = None
            settled = False
            events = feed_new(entry)
            if len(events) > 1 and type(events[1]) in update_events and is_update_frame(
                    entry, events[1]):
                frame = events[0]
                for h in update_frame:
                    h(frame)
                for ev in events[1:]:
                    for h in get(type(ev), ()):
                        h(ev)
                continue
            for ev in events:
                for h in get(type(ev), ()):
                    h(ev)
            continue
        if settled:
            if run is not None:
                run.seqs.append(entry.seq)
                run.updates.append(update)
                if len(run.seqs) >= RUN_BATCH:
                    for fn in bulk:
                        fn(run)
                    run = RepeatRun(run.first)
                continue
            repeat = repeat_event(entry, update)
            if frame_again:
                frame = Frame(entry, repeat.protocol)
                for h in frame_again:
                    h(frame)
            for h in message_again:
                h(repeat)
            continue
        settled = True
        repeat = repeat_event(entry, update)
        frame_again = settle(frame_all, Frame(entry, repeat.protocol))
        message_again = settle(message_all, repeat)
        if not frame_again:
            fns = [bulk_of.get(h) for h in message_again]
            if all(fns):
                bulk = fns  # type: ignore[assignment]  # all() ruled out None
                run = RepeatRun(repeat)
    if run is not None and run.seqs:
        for fn in bulk:
            fn(run)


def _rows(chosen: list[Rule], sink: Sink, versions: set[int], profile: str) -> list[Finding]:
    out: list[Finding] = []
    for rule in chosen:
        found = sink.rows(rule.id)
        record = rule.record
        if found:
            out.extend(found)
        elif not versions & set(record.versions):
            out.append(Finding(rule.id, Outcome.NOT_APPLICABLE,
                               f"applies to protocol v{'/v'.join(map(str, record.versions))} only",
                               reason=Reason.NOT_TESTABLE))
        elif not record.applies_under(profile):
            out.append(Finding(rule.id, Outcome.NOT_APPLICABLE,
                               record.profile_note.format(profile=profile)
                               or f"profile {profile} does not grade it "
                               f"(graded under {', '.join(record.profiles)})",
                               reason=Reason.ALLOWED_BY_PROFILE))
        elif rule.id in sink.seen:
            out.append(Finding(rule.id, Outcome.PASS, rule.title))
        elif rule.id in sink.reasons:
            text, code = sink.reasons[rule.id]
            out.append(Finding(rule.id, Outcome.NOT_APPLICABLE, text, reason=code))
        else:
            out.append(Finding(rule.id, Outcome.NOT_APPLICABLE, f"not testable: {rule.untested}",
                               reason=Reason.NOT_TESTABLE))
    return out


_HANDLER_NAMES: dict[type, tuple[tuple[str, type], ...]] = {}


def _handler_names(cls: type[Checker]) -> tuple[tuple[str, type], ...]:
    """A checker class's event handlers (``on_message`` ...) with their event types."""
    names = _HANDLER_NAMES.get(cls)
    if names is None:
        names = _HANDLER_NAMES[cls] = tuple((name, _EVENT_TYPES[name]) for name in dir(cls)
                                            if name in _EVENT_TYPES)
    return names


def _selected(rule_id: str, select: Iterable[str] | None) -> bool:
    if select is None:
        return True
    for s in select:
        if rule_id == s or rule_id.startswith(s + "/") or (s.endswith("*") and
                                                           rule_id.startswith(s[:-1])):
            return True
    return False


def _event_types() -> dict[str, type]:
    from conformance.checks import events as t

    return {
        "on_message": t.MessageEvent, "on_other": t.OtherUpdate, "on_turn_start": t.TurnStart,
        "on_turn_end": t.TurnEnd, "on_accepted": t.PromptAccepted,
        "on_replay_start": t.ReplayStart, "on_replay_end": t.ReplayEnd, "on_frame": t.Frame,
        "on_conn_end": t.ConnEnd,
    }


_EVENT_TYPES = _event_types()
