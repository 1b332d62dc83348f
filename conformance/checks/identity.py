# long: reports name each checker by its module (identity.Stability), so a split would change every report
"""Uniqueness and stability of IDs: MID-A-02, MID-A-03, MID-A-05, MID-A-06.

The wire cannot show which chunks the agent *meant* as one message, so these
rules use only the inferences the catalogue allows (an ID's meaning is inferred
from the traffic, never from the ID's text): a different
prompt means a different user message; a different v1 turn means a different
agent or thought message; a different kind means a different message (warn
only). Replay has no prompts, so each replayed user message starts a new
"turn" (MID-A-02 rule 6).

Kept whole on purpose: its seam is ``Uniqueness``
(MID-A-02) against ``Stability`` (MID-A-03, -05, -06), but the reports'
traceability section names each checker by its module (``identity.Stability``),
so a move would change every Markdown and HTML report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.base import MAX_ENTRIES_PER_FAULT, Checker, Rule, register
from conformance.checks.events import (
    REPLAY,
    UNREQUESTED,
    MessageEvent,
    PromptAccepted,
    RepeatRun,
    ReplayStart,
    TurnEnd,
    TurnStart,
)
from conformance.checks.wire import short
from conformance.model import with_article
from conformance.results import Reason

SENTENCE_END = (".", "!", "?", "\n", ":", ";")
ID_PER_CHUNK_RUN = 4


# The first use of an ID is one int (a Python object per message and epoch costs about
# three times as much): bit 0 says it was raced (first used after the suite's
# session/cancel of its turn: the target may have written it before it read the cancel, so
# whether it was written at all is the suite's race), bits 1 to 3 its kind (KIND_CODES),
# bits 4 to 43 its entry, the rest its turn (a number of Uniqueness.turn_keys).
KIND_CODES = {"user": 0, "agent": 1, "thought": 2, "session": 3}
KIND_NAMES = {code: kind for kind, code in KIND_CODES.items()}
SEQ_BITS = 40  # 2**40 entries: a transcript of a thousand billion lines
TURN_TUPLE = 8  # a turn's chunk IDs of a kind are a tuple up to this many, then a set


def _seen(turn: int, seq: int, kind: str, raced: bool) -> int:
    return ((turn << SEQ_BITS | seq) << 3 | KIND_CODES[kind]) << 1 | raced


def _seen_turn(seen: int) -> int:
    return seen >> (SEQ_BITS + 4)


def _seen_seq(seen: int) -> int:
    return (seen >> 4) & ((1 << SEQ_BITS) - 1)


def _seen_kind(seen: int) -> str:
    return KIND_NAMES[(seen >> 1) & 7]


@dataclass
class _EpochState:
    # The first use of each ID (any kind), and the first use per kind: the first use of an
    # ID by a kind is ``by_id[id]`` when that is of the kind (nearly always: one entry, not
    # two, per message), else ``kinds[(kind, id)]``. Each is a packed int (``_seen``).
    by_id: dict[str, int] = field(default_factory=dict)
    kinds: dict[tuple[str, str], int] = field(default_factory=dict)
    replay_turn: int = 0
    last_kind: str | None = None
    # turn keys that carried an ID, two at most: a second one exercises
    # MID-A-02/cross-turn-reuse, and no rule asks for more
    turns: set[Any] = field(default_factory=set)
    numbers: dict[Any, int] = field(default_factory=dict)  # this epoch's turn keys, numbered
    last_live: int = -1  # the number of the live turn its last live update went to
    last_replay: int = -1  # and of the replayed turn
    tk: Any = None  # the last turn key: one tuple per turn, not one per message
    tn: int = -1  # its number (Uniqueness.turn_keys)


def turn_key(ev: MessageEvent, st: _EpochState) -> Any:
    replay = ev.phase == REPLAY
    n = st.replay_turn if replay else ev.turn
    tk = st.tk
    if tk is not None and tk[1] == n and tk[2] == ev.epoch.index and (tk[0] == "replay") == replay:
        return tk
    tk = st.tk = ("replay" if replay else "live", n, ev.epoch.index)
    st.tn = -1  # Uniqueness._turn_number gives it its number
    return tk


@register
class Uniqueness(Checker):
    quiet_repeats = True  # past the first repeat (MID-A-02/interleave exercised) nothing is new
    early = True  # a turn's chunk-ID tables go once it gets no more updates (_moved_on)
    rules = (
        Rule("MID-A-02/user-message-reuse"),
        Rule("MID-A-02/cross-turn-reuse"),
        Rule("MID-A-02/cross-kind-reuse"),
        Rule("MID-A-02/interleave"),
        Rule("MID-A-02/cross-session"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.epochs: dict[tuple[str, int], _EpochState] = {}
        # the Epoch (its index does not change) and session of the last message, its state
        self.last_epoch: Any = None
        self.last_session = ""
        self.last_state: _EpochState | None = None
        # the turn keys of each session that carried an ID, numbered: a first use keeps
        # the number, and a turn's tables below are keyed by it (with the kind's code)
        self.turn_keys: list[Any] = []
        # the last ID of a turn's chunks per kind, once they had more than TURN_TUPLE IDs
        self.turn_last: dict[int, str] = {}
        # the IDs of each turn's chunks, per kind: None before any, one ID, then a set
        # (a tuple of them, the last one used last, until more than TURN_TUPLE)
        self.turn_ids: dict[int, str | tuple[str, ...] | set[str] | None] = {}
        # the first session to use each ID; while one session alone used IDs, none is kept
        # (``one_session``: they are all its own), and the table starts with a second one
        self.session_of_id: dict[str, str] = {}
        self.one_session: str | None = None
        self.cross_session_reported = False
        self.response_ids: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}
        # turns the suite cancelled while they ran, and the (cancelled turn, later turn)
        # pairs already graded: which of a cancelled turn's IDs came before the cancel is
        # the suite's race, so a later turn's reuse of them is one finding per pair
        self.cancelled_turns: set[tuple[str, Any]] = set()
        self.resumed: set[tuple[str, int]] = set()  # (session, epoch) resumed without replay
        self.cancelled_pairs: set[tuple[str, Any, Any]] = set()

    def _state(self, ev: MessageEvent) -> _EpochState:
        if ev.epoch is self.last_epoch and ev.session == self.last_session:
            return self.last_state  # type: ignore[return-value]  # set with last_epoch
        st = self._epoch_state(ev)
        self.last_epoch, self.last_session, self.last_state = ev.epoch, ev.session, st
        return st

    def _epoch_state(self, ev: MessageEvent) -> _EpochState:
        key = (ev.session, ev.epoch.index)
        st = self.epochs.get(key)
        if st is None:
            st = self.epochs[key] = _EpochState()
            before = self.epochs.get((ev.session, ev.epoch.index - 1))
            if ev.epoch.empty and before is not None:
                # One reading: a replay that carried nothing rebuilt no view, so the IDs of
                # the epoch before are still the session's messages (as after a resume
                # without replay): a reuse of one is graded like any other.
                st.by_id = dict(before.by_id)
                st.kinds = dict(before.kinds)
                st.turns = set(before.turns)
            self.turn_last.clear()
            self.turn_ids.clear()
        return st

    def on_message(self, ev: MessageEvent) -> None:
        if ev.phase == UNREQUESTED:
            return  # a replay nobody asked for: that fault is the replay rules' (one finding)
        st = self._state(ev)
        if ev.phase == REPLAY and ev.kind == "user" and st.last_kind not in (None, "user"):
            st.replay_turn += 1
        st.last_kind = ev.kind
        mid = ev.mid
        if mid is None:
            return
        tk = turn_key(ev, st)
        turns = st.turns
        if len(turns) < 2 and tk not in turns:
            turns.add(tk)
        tn = st.tn
        if tn < 0:
            tn = st.tn = self._turn_number(st, tk)
            self._moved_on(st, tk, tn, ev)
        v2 = ev.protocol >= 2
        self._cross_session(ev, mid)
        by_id, kinds = st.by_id, st.kinds
        first = by_id.get(mid)
        code = KIND_CODES[ev.kind]
        prev: int | None
        own = first is not None and (first >> 1) & 7 == code
        if own:
            prev = first  # this kind's first use is the ID's
        else:
            prev = kinds.get((ev.kind, mid)) if kinds else None
        if prev is not None and prev & 1 and _seen_turn(prev) != tn:
            # The benefit of the doubt: an ID first used only in a cancelled turn's tail (after
            # the suite's session/cancel) exists there by the suite's race with the target, so
            # no reuse is graded against it; this use is the first that counts.
            new = _seen(tn, ev.seq, ev.kind, ev.cancelled >= 0)
            if own:  # raced: the ID's first use and this kind's are the new one
                by_id[mid] = new
            elif first is not None and first & 1:  # the ID's first use becomes this one
                kinds[(_seen_kind(first), mid)] = first  # still the first of its own kind
                kinds.pop((ev.kind, mid), None)
                by_id[mid] = new
            else:
                kinds[(ev.kind, mid)] = new
            prev = None
        prev_turn = self.turn_keys[_seen_turn(prev)] if prev is not None else None
        # Rule 1: user-message reuse.
        if ev.kind == "user":
            if "MID-A-02/user-message-reuse" not in self.marked:
                self.mark("MID-A-02/user-message-reuse")
            first_of_turn = (tn << 3 | code) not in self.turn_ids  # code: the user kind's
            judge = (not v2) or first_of_turn or ev.phase == REPLAY
            if prev is not None and prev_turn != tk and judge:
                self.found("MID-A-02/user-message-reuse",
                           f"user message of {_turn_name(tk, ev.epoch.index)} reuses ID {short(mid)!r} of the "
                           f"user message of {_turn_name(prev_turn, ev.epoch.index)}",
                           key=(ev.session, mid), entries=[_seen_seq(prev), ev.seq],
                           expected="a fresh ID per user message",
                           actual=short(mid))
        # Rule 2: cross-turn reuse (v1; replay pseudo-turns count too).
        elif not v2:
            if len(st.turns) > 1:
                if "MID-A-02/cross-turn-reuse" not in self.marked:
                    self.mark("MID-A-02/cross-turn-reuse")
            cancelled_prior = (prev is not None and prev_turn != tk
                               and (ev.session, prev_turn) in self.cancelled_turns)
            if prev is not None and cancelled_prior:
                # The benefit of the doubt: how many of the cancelled turn's IDs the target
                # wrote before it read the cancel is the race, so the reuse is one finding
                # per pair of turns (its first reuse, which the untimed head decides).
                pair = (ev.session, prev_turn, tk)
                if pair not in self.cancelled_pairs:
                    self.cancelled_pairs.add(pair)
                    self.found("MID-A-02/cross-turn-reuse",
                               f"{ev.kind} ID {short(mid)!r} of {_turn_name(prev_turn, ev.epoch.index)} "
                               f"reappears in {_turn_name(tk, ev.epoch.index)}",
                               key=pair, entries=[_seen_seq(prev), ev.seq],
                               expected="a fresh ID per message", actual=short(mid))
            elif prev is not None and prev_turn != tk:
                self.found("MID-A-02/cross-turn-reuse",
                           f"{ev.kind} ID {short(mid)!r} of {_turn_name(prev_turn, ev.epoch.index)} reappears in "
                           f"{_turn_name(tk, ev.epoch.index)}",
                           key=(ev.session, ev.kind, mid), entries=[_seen_seq(prev), ev.seq],
                           expected="a fresh ID per message",
                           actual=short(mid))
        # Rule 3: cross-kind reuse.
        other = by_id.get(mid)
        per_kind = v2 and self.profile.id_space == "per-kind"
        if per_kind:
            self.not_applicable("MID-A-02/cross-kind-reuse",
                                f"profile {self.profile.name} gives each kind its own ID space",
                                Reason.ALLOWED_BY_PROFILE)
        else:
            if "MID-A-02/cross-kind-reuse" not in self.marked:
                self.mark("MID-A-02/cross-kind-reuse")
            if other is not None and (other >> 1) & 7 != code:
                self.found("MID-A-02/cross-kind-reuse",
                           f"ID {short(mid)!r} names {with_article(_seen_kind(other))} message "
                           f"and {with_article(ev.kind)} message", key=(ev.session, mid),
                           entries=[_seen_seq(other), ev.seq],
                           expected="one ID per message across kinds", actual=short(mid))
        # Rule 4: A..B..A within one turn.
        tkey = tn << 3 | code  # the turn (of this session and epoch) and the kind
        turn_ids = self.turn_ids
        ids = turn_ids.get(tkey, _NONE)
        if ids is _NONE:
            ids = turn_ids[tkey] = None
        if ev.form == "chunk":
            if ids is not None:
                if "MID-A-02/interleave" not in self.marked:
                    self.mark("MID-A-02/interleave")
            # The last ID of the turn's chunks is the one ID while there is one (no return
            # to an ID is possible then), the last of a tuple, turn_last's past TURN_TUPLE.
            many = type(ids)
            last = (ids[-1] if many is tuple else self.turn_last[tkey] if many is set
                    else ids)
            if last is not None and last != mid and many is not str and mid in ids:
                self.found("MID-A-02/interleave",
                           f"{ev.kind} chunks return to ID {short(mid)!r} after {short(last)!r} "
                           f"in {_turn_name(tk, ev.epoch.index)} (interleaving or a reused ID)",
                           key=(ev.session, ev.kind, mid), entries=[ev.seq],
                           expected="each message's chunks in one run",
                           actual=short(mid), protocol=ev.protocol)
            # a run of chunks: an upsert starts none (its chunks may follow it)
            if ids is None:
                turn_ids[tkey] = mid
            elif many is str:
                if ids != mid:
                    turn_ids[tkey] = (ids, mid)
            elif many is tuple:
                if last != mid:
                    if mid in ids:
                        turn_ids[tkey] = (*[i for i in ids if i != mid], mid)
                    elif len(ids) < TURN_TUPLE:
                        turn_ids[tkey] = (*ids, mid)
                    else:
                        turn_ids[tkey] = {*ids, mid}
                        self.turn_last[tkey] = mid
            else:
                ids.add(mid)
                self.turn_last[tkey] = mid
        if prev is None or other is None:
            seen = _seen(tn, ev.seq, ev.kind, ev.cancelled >= 0)  # the first use of both
            if other is None or (other >> 1) & 7 == code:
                by_id[mid] = seen  # (for a raced one: the same values as ``other``)
            else:
                kinds[(ev.kind, mid)] = seen

    def _moved_on(self, st: _EpochState, tk: Any, tn: int, ev: MessageEvent) -> None:
        """An update of turn ``tn`` after updates of another turn of the epoch. The
        timeline gives an epoch's replayed turns their updates in order, and in v1 its live
        turns too (the session's newest turn; a turn carried beside a load or a resume with
        replay is the last of the epoch before): a later turn of the same phase means the
        one before gets no more updates, so its chunk-ID tables go (MID-A-02/interleave
        reads only a turn's own). Not v2's live turns (an update goes to the oldest open
        turn, which can be an earlier one), nor an epoch's live turns once a resume without
        replay carried a turn in it (its updates can come after a later turn's)."""
        replay = tk[0] == "replay"
        if not self.early or (not replay and (
                ev.protocol >= 2 or (ev.session, ev.epoch.index) in self.resumed)):
            return
        prev = st.last_replay if replay else st.last_live
        if prev == tn or (prev >= 0 and self.turn_keys[prev][1] > tk[1]):
            return
        if prev >= 0:
            for code in KIND_NAMES:
                self.turn_ids.pop(prev << 3 | code, None)
                self.turn_last.pop(prev << 3 | code, None)
        if replay:
            st.last_replay = tn
        else:
            st.last_live = tn

    def _turn_number(self, st: _EpochState, tk: Any) -> int:
        n = st.numbers.get(tk)
        if n is None:
            n = st.numbers[tk] = len(self.turn_keys)
            self.turn_keys.append(tk)
        return n

    def on_replay_start(self, ev: ReplayStart) -> None:
        if not ev.requested:  # a resume without replay: a streaming turn goes on in the epoch
            self.resumed.add((ev.session, ev.epoch.index))

    def on_turn_end(self, ev: TurnEnd) -> None:
        if ev.cancelled >= 0:
            self.cancelled_turns.add((ev.session, ("live", ev.turn, ev.epoch.index)))

    def on_accepted(self, ev: PromptAccepted) -> None:
        """v2: two prompts of one session (identical ones too) get two user-message IDs, so
        their responses name two IDs (catalogue Appendix I, MID-A-02 addition). The fault
        is the reused ID, one finding with the echo's, under the same key."""
        rid = ev.result.get("messageId") if isinstance(ev.result, dict) else None
        if not isinstance(rid, str):
            return
        self.exercised("MID-A-02/user-message-reuse")
        seen = self.response_ids.setdefault((ev.session, ev.epoch.index), {})
        prev = seen.setdefault(rid, (ev.turn, ev.seq))
        if prev[0] != ev.turn:
            self.found("MID-A-02/user-message-reuse",
                       f"the session/prompt response of turn {ev.turn + 1} names ID "
                       f"{short(rid)!r}, which the response of turn {prev[0] + 1} named",
                       key=(ev.session, rid), entries=[prev[1], ev.seq],
                       expected="a fresh ID per user message", actual=short(rid))

    def _cross_session(self, ev: MessageEvent, mid: str) -> None:
        if self.session_of_id:  # a second session used IDs: the table holds every one
            owner = self.session_of_id.setdefault(mid, ev.session)
        else:
            if self.one_session is None:
                self.one_session = ev.session
            if ev.session == self.one_session:
                owner = ev.session  # every ID so far is this session's: nothing kept per ID
            else:  # a second session: the first one's IDs, from its epochs' first uses
                for (session, _), st in self.epochs.items():
                    if session == self.one_session:
                        self.session_of_id.update(dict.fromkeys(st.by_id, session))
                owner = self.session_of_id.setdefault(mid, ev.session)
        if len(self.epochs) > 1:
            if "MID-A-02/cross-session" not in self.marked:
                self.mark("MID-A-02/cross-session")
        if owner != ev.session and not self.cross_session_reported:
            self.cross_session_reported = True
            self.found("MID-A-02/cross-session",
                       f"ID {short(mid)!r} is used in two sessions (allowed: scope is a session)",
                       entries=[ev.seq], actual=short(mid))


_NONE: Any = object()  # no entry in turn_ids


def _turn_name(tk: Any, now: int) -> str:
    """A turn's name, as seen from an update of epoch ``now`` (a reuse across an empty
    replay names the turn before the resume or load)."""
    phase, n, epoch = tk
    name = f"replayed turn {n + 1}" if phase == "replay" else f"turn {n + 1}"
    return f"{name} before the resume or load" if epoch < now else name


@dataclass
class _Run:
    kind: str
    session: str
    ids: list[str] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    fragments: int = 0
    last_text: str = ""


@register
class Stability(Checker):
    rules = (
        Rule("MID-A-03/id-per-chunk"),
        Rule("MID-A-03/gap"),
        Rule("MID-A-03/mixed-presence"),
        Rule("MID-A-05/no-ids"),
        Rule("MID-A-05/partial-kinds"),
        Rule("MID-A-06/user-chunk-without-id"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.id_mode: set[str] = set()
        self.no_ids_marked: set[int] = set()  # the protocols MID-A-05/no-ids was marked with
        self.sessions: set[str] = set()
        self.first_chunk: dict[str, int] = {}
        self.run: _Run | None = None
        self.recent: dict[tuple[str, int, int, str], list[tuple[str, int]]] = {}
        self.presence: dict[tuple[str, int, int, str], list[int]] = {}
        self.gap_reported: set[tuple[str, int, int, str]] = set()
        # v1 user chunks without ID, per session: the first few seqs (evidence) and a count
        # of the rest, so memory does not grow with chunks
        self.ownerless_user: dict[str, list[int]] = {}
        self.ownerless_more: dict[str, int] = {}
        self.user_sessions: set[str] = set()  # v1 sessions with user chunks
        # v1: per (session, kind) of the agent's own chunks, the first chunk without an ID
        # (None once one carried an ID): a kind that never does is partial use (MID-A-05)
        self.kind_ids: dict[tuple[str, str], int | None] = {}
        self.user_id_sessions: set[str] = set()  # v1 sessions with a user chunk with an ID
        # presence counters and window of the last chunk's (session, epoch, turn, kind)
        self.tail: tuple[list[int], list[tuple[str, int]]] | None = None

    def on_turn_start(self, ev: TurnStart) -> None:
        self._close_run()

    def on_turn_end(self, ev: TurnEnd) -> None:
        self._close_run()
        self._flush_presence()

    def on_message(self, ev: MessageEvent) -> None:
        if ev.repeat and self.tail is not None:
            self._repeat(ev)
            return
        if ev.form != "chunk":
            self.tail = None
            self._close_run()
            return
        self.sessions.add(ev.session)
        self.first_chunk.setdefault(ev.session, ev.seq)
        if ev.protocol not in self.no_ids_marked:
            self.no_ids_marked.add(ev.protocol)
            self.exercised("MID-A-05/no-ids", ev.protocol)
        if ev.mid is not None:
            self.id_mode.add(ev.session)
        key = (ev.session, ev.epoch.index, ev.turn, ev.kind)
        state = "id" if ev.mid is not None else "none"
        pres = self.presence.setdefault(key, [0, 0, ev.seq, ev.seq])
        pres[0 if state == "id" else 1] += 1
        if state == "none":
            pres[3] = ev.seq
        else:
            pres[2] = ev.seq
        # Gap: X, absent, X (consecutive chunks of one kind).
        window = self.recent.setdefault(key, [])
        window.append((ev.mid if ev.mid is not None else "\0absent", ev.seq))
        if len(window) > 3:
            window.pop(0)
        self.tail = (pres, window)
        if ev.session in self.id_mode:
            if "MID-A-03/gap" not in self.marked:
                self.mark("MID-A-03/gap")
            if "MID-A-03/mixed-presence" not in self.marked:
                self.mark("MID-A-03/mixed-presence")
            if (len(window) == 3 and window[1][0] == "\0absent" and window[0][0] == window[2][0]
                    and window[0][0] != "\0absent"):
                self.gap_reported.add(key)
                self.found("MID-A-03/gap",
                           f"{with_article(ev.kind)} chunk without ID sits between two chunks of "
                           f"{short(window[0][0])!r}", key=(ev.session, window[0][0]),
                           entries=[s for _, s in window],
                           expected=f"messageId {short(window[0][0])!r} on the middle chunk",
                           actual="absent")
        if ev.kind != "user" and ev.protocol < 2:
            kkey = (ev.session, ev.kind)
            if ev.id_state not in (model.ABSENT, model.NULL):  # a malformed ID: MID-S-01's
                self.kind_ids[kkey] = None
            elif kkey not in self.kind_ids:
                self.kind_ids[kkey] = ev.seq
        if ev.kind == "user" and ev.protocol < 2:
            self.user_sessions.add(ev.session)
            if ev.mid is not None:
                self.user_id_sessions.add(ev.session)
            if ev.mid is None:
                kept = self.ownerless_user.setdefault(ev.session, [])
                if len(kept) < MAX_ENTRIES_PER_FAULT:
                    kept.append(ev.seq)
                else:
                    self.ownerless_more[ev.session] = self.ownerless_more.get(ev.session, 0) + 1
        self._run_step(ev)

    def _repeat(self, ev: MessageEvent) -> None:
        """What on_message does for a chunk continuing the previous chunk's message.

        Session, ID mode and user bookkeeping are already done; no gap is possible
        (the middle of the window is the previous chunk, which has the ID). A run
        of one ID goes from [id] to [id, continued] and stays there while the ID goes
        on; that happens in place here instead of through new _Run objects.
        """
        pres, window = self.tail  # type: ignore[misc]  # set by the chunk before
        seq, mid = ev.seq, ev.mid
        if mid is None:  # an ID-less run: counted; no gap, no run of IDs
            self._idless([seq], ev.session, ev.kind == "user" and ev.protocol < 2)
            return
        pres[0] += 1
        pres[2] = seq
        window.append((mid, seq))  # an ID-less repeat returned above
        if len(window) > 3:
            del window[0]
        run = self.run
        if run is not None:
            ids = run.ids
            if ids and ids[0] == mid:
                n = len(ids)
                if n == 1:  # [id] -> [id, continued]: closing [id] finds nothing
                    ids.append("\0continued")
                    run.seqs[0] = seq
                    run.last_text = ev.text
                    return
                if n == 2 and ids[1] == "\0continued":  # the message still goes on
                    run.seqs[0] = seq
                    run.last_text = ev.text
                    return
        self._run_step(ev)

    def on_repeats(self, run: RepeatRun) -> None:
        """Many repeats at once: what _repeat does for each, in one step (see Checker)."""
        mid, seqs = run.first.mid, run.seqs
        if mid is None and self.tail is not None:
            first = run.first
            self._idless(seqs, first.session, first.kind == "user" and first.protocol < 2)
            return
        cur = self.run
        ids = cur.ids if cur is not None else None
        if (self.tail is None or cur is None or not ids or ids[0] != mid or len(ids) > 2
                or (len(ids) == 2 and ids[1] != "\0continued")):
            for ev in run.events():
                self.on_message(ev)
            return
        pres, window = self.tail
        pres[0] += len(seqs)
        pres[2] = seqs[-1]
        window.extend([(mid, s) for s in seqs[-3:]])
        del window[:-3]
        if len(ids) == 1:  # [id] -> [id, continued], which stays while the ID goes on
            ids.append("\0continued")
        cur.seqs[0] = seqs[-1]
        cur.last_text = model.block_text(run.updates[-1].get("content"))

    def _idless(self, seqs: list[int], session: str, user_v1: bool) -> None:
        """What on_message does for ID-less chunks continuing the chunk before (``tail``)."""
        pres, window = self.tail  # type: ignore[misc]  # set by the chunk before
        pres[1] += len(seqs)
        pres[3] = seqs[-1]
        window.extend([("\0absent", s) for s in seqs[-3:]])
        del window[:-3]
        if user_v1:
            kept = self.ownerless_user.setdefault(session, [])
            room = max(0, MAX_ENTRIES_PER_FAULT - len(kept))
            kept.extend(seqs[:room])
            if len(seqs) > room:
                self.ownerless_more[session] = (self.ownerless_more.get(session, 0)
                                                + len(seqs) - room)

    def _run_step(self, ev: MessageEvent) -> None:
        run = self.run
        if run is None or run.kind != ev.kind or run.session != ev.session or ev.mid is None:
            self._close_run()
            if ev.mid is None:
                return
            run = self.run = _Run(ev.kind, ev.session)
        if "MID-A-03/id-per-chunk" not in self.marked:
            self.mark("MID-A-03/id-per-chunk")
        text = model.block_text(ev.update.get("content"))
        if run.ids and run.ids[-1] == "\0continued" and ev.mid == run.ids[-2]:
            run.seqs[0] = ev.seq  # a third (fourth, ...) chunk of one message: it goes on
            run.last_text = text
            return
        if run.ids and ev.mid == run.ids[-1]:
            # The same ID continues: this run is not "a new ID on every chunk".
            self._close_run()
            self.run = _Run(ev.kind, ev.session, [ev.mid], [ev.seq], 0, text)
            self.run.ids.append("\0continued")
            return
        if run.ids and run.ids[-1] == "\0continued":
            self.run = run = _Run(ev.kind, ev.session)
        if run.ids and run.last_text and not run.last_text.rstrip(" ").endswith(SENTENCE_END):
            run.fragments += 1
        run.ids.append(ev.mid)
        run.seqs.append(ev.seq)
        run.last_text = text

    def _close_run(self) -> None:
        run, self.run = self.run, None
        if run is None or not run.ids or run.ids[-1] == "\0continued":
            return
        n = len(run.ids)
        if n >= ID_PER_CHUNK_RUN and len(set(run.ids)) == n and run.fragments >= n - 2:
            self.found("MID-A-03/id-per-chunk",
                       f"{n} consecutive {run.kind} chunks each carry a new ID while their text "
                       f"reads as one stream", entries=run.seqs[:8],
                       expected="one ID for all chunks of one message",
                       actual=[short(i, 40) for i in run.ids[:5]])

    def _flush_presence(self) -> None:
        for key, (with_id, without, seq_id, seq_none) in self.presence.items():
            session, _epoch, turn, kind = key
            if (with_id and without and session in self.id_mode and key not in self.gap_reported
                    and kind != "user"):
                self.found("MID-A-03/mixed-presence",
                           f"in turn {turn + 1}, {with_id} {kind} chunk(s) carry an ID and "
                           f"{without} do not", entries=[seq_id, seq_none],
                           expected="all or none", actual={"with_id": with_id, "without": without})
        self.presence.clear()
        self.recent.clear()
        self.tail = None

    def finish(self) -> None:
        self._close_run()
        self._flush_presence()
        for session in sorted(self.sessions - self.id_mode):
            self.found("MID-A-05/no-ids", "the agent sent no messageId at all in this session "
                       "(allowed in v1; features that need IDs will not work)",
                       entries=[self.first_chunk[session]], actual="no IDs")
        # Partial use across kinds: the user kind is MID-A-06's; a kind of the agent's own
        # that never carried an ID in an ID-mode session is one fault per session and kind.
        for (session, kind), seq in sorted(self.kind_ids.items(),
                                           key=lambda kv: (kv[1] is None, kv[1] or 0)):
            if session not in self.id_mode:
                continue
            self.exercised("MID-A-05/partial-kinds")
            if seq is not None:
                with_ids = sorted({k for (s, k), first in self.kind_ids.items()
                                   if s == session and first is None}
                                  | ({"user"} if session in self.user_id_sessions else set()))
                self.found("MID-A-05/partial-kinds",
                           f"the agent's {kind} chunks never carry an ID in a session where "
                           f"its {' and '.join(with_ids) or 'other'} chunks do",
                           key=(session, kind), entries=[seq],
                           expected=f"a messageId on {kind} chunks too", actual="absent")
        # One fault per session, in transcript order: the first few chunks as evidence.
        matching = sorted((seqs[0], s) for s, seqs in self.ownerless_user.items()
                          if s in self.id_mode)
        for _, session in matching:
            seqs = self.ownerless_user[session]
            self.found("MID-A-06/user-chunk-without-id",
                       "user_message_chunks without ID in a session whose agent uses IDs",
                       key=session, entries=seqs, expected="an agent-generated messageId",
                       actual="absent", times=len(seqs) + self.ownerless_more.get(session, 0))
        if self.user_sessions & self.id_mode:
            self.exercised("MID-A-06/user-chunk-without-id")
