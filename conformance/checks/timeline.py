# long: the one reading of a transcript (turns, epochs, replay windows, the benefit of the doubt) is one pass, so no rule decides them again
"""From transcript entries to protocol events: the one pass every checker shares.

The timeline reads entries in order and says, for each message update, which
session, epoch, turn and phase it belongs to. It is derived from the wire
alone (requests, responses, notifications and the harness's process events),
so it grades live runs and recorded files the same way.

Epochs (catalogue 0.3): a new one starts at ``session/new``, at v1
``session/load`` and at v2 ``session/resume`` with ``replayFrom``. Turns: v1
from a ``session/prompt`` request to its response; v2 from the request to the
idle ``state_update`` that ends the work it started. The events it yields are
defined in ``events.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.events import (
    AFTER_CANCEL,
    AFTER_REPLAY,
    LIVE,
    NO_TURN,
    OUT_OF_TURN,
    REPLAY,
    UNREQUESTED,
    ConnEnd,
    Epoch,
    Event,
    Frame,
    MessageEvent,
    OtherUpdate,
    PromptAccepted,
    ReplayEnd,
    ReplayStart,
    TurnEnd,
    TurnStart,
    repeat_of,
)
from conformance.transcript import Entry


@dataclass
class _Pending:
    method: str
    params: Any
    seq: int
    session: str | None
    fuzz: bool


@dataclass
class _Session:
    epoch: Epoch
    turn: int = -1
    turn_open: bool = False
    turn_request: Any = None  # (conn, id) of the prompt request
    last_stop: Any = None
    replay: str | None = None  # method while replay phase is open
    replay_requested: bool = True
    after_replay: bool = False
    epochs: int = 1
    # v2, prompts in flight: a prompt sent while another runs opens a turn of its own.
    flight: dict[Any, int] = field(default_factory=dict)  # unanswered prompt -> its turn
    open: list[int] = field(default_factory=list)  # turns not ended yet, oldest first
    accepted: set[int] = field(default_factory=set)  # open turns whose prompt was accepted
    pending_idle: list[Any] = field(default_factory=list)  # idle stop reasons not yet applied
    # v2: a turn was accepted (its response, its echo, a running state or its output) since
    # the last idle that ended one: an idle without it is a state report, no turn's end.
    running: bool = False
    # The chunk IDs the open turns streamed, (kind, id) -> the first chunk's text: what a
    # replay window opened while they stream is read against (``Carried``).
    streamed: dict[tuple[str, str], str] = field(default_factory=dict)
    carried: Carried | None = None
    echoed: bool = False  # the open turn's echo came (it runs: the target read the prompt)
    # the session/cancel the suite wrote while the turn ran (its entry; -1: none): the
    # turn's updates after it may have been written before the target read it
    cancel_seq: int = -1
    window_messages: int = 0  # message updates read as replay in the open replay window
    # the user-message IDs the session showed live (one a prompt): an echo with a new one
    # in a window that replays nothing is a queued prompt's, not history (``Carried``)
    echo_ids: set[str] = field(default_factory=set)
    # the other message IDs it showed live: an upsert with a new one in a window that
    # replays nothing is the streaming turn's next message, not history (``Carried``)
    shown: set[str] = field(default_factory=set)
    # v2: the IDs its prompt responses named -> the turns that named them; the turns that
    # echoed their prompt live
    named: dict[str, set[int]] = field(default_factory=dict)
    echoed_turns: set[int] = field(default_factory=set)


@dataclass
class Carried:
    """The reading of a replay window opened while a turn of the session streams.

    The suite wrote its ``session/load`` or ``session/resume`` (with ``replayFrom``) while
    the target was still writing that turn; the target cannot say which of its updates it
    wrote before it read the request, so the reading gives it the benefit of the doubt,
    once, for every rule (catalogue K.3, MID-V2-13):

    - a chunk of a message the turn was streaming is live, unless the replay rebuilds that
      message (it starts again with the message's first chunk text, or an upsert of the
      ID with content came in the window);
    - a chunk of a new agent or thought message before the replay begins (before the first
      replayed user message, whole message or rebuilt message) is live too: the turn's
      next message, which the target could have written before it read the request;
    - after the window (the marker or the response) the turn goes on until its idle: its
      messages, and agent or thought messages the replay did not show, are its output;
      so are they after a new prompt of the session until that prompt is accepted (the
      target could have written them before it read the prompt);
    - a chunk without an ID is the turn's before the replay begins, and after the window
      as a new message is;
    - in a window that replays nothing (same epoch), a whole-message upsert of a message
      the turn streamed is its restatement (a v2 upsert of a live ID), one of a message the
      session never showed (before the window shows history) is the turn's next message
      written whole, and a queued prompt's turn that runs next is carried too (``echo``);
    - a user message is never the turn's; once the turn ends (its idle, or in v1 its
      prompt response), nothing more is; after a window that replays nothing, a chunk
      going on with one of its messages (``continues``) is its output after its end
      (out of turn), not history.

    A live update in the window carries the request's entry (``MessageEvent.inside``), so
    a rule that records it names its evidence. The turn keeps its epoch and turn index.
    """

    epoch: Epoch
    turn: int
    conn: int
    request_seq: int
    ids: dict[tuple[str, str], str]  # (kind, id) -> the first chunk's text
    fresh: dict[tuple[str, str], int] = field(default_factory=dict)  # new messages -> first seq
    whole: set[tuple[str, str]] = field(default_factory=set)  # new messages begun by an upsert
    begun: bool = False  # a replayed update came: the target has read the request
    upserted: set[tuple[str, str]] = field(default_factory=set)
    rebuilt: set[tuple[str, str]] = field(default_factory=set)
    replayed: set[tuple[str, str]] = field(default_factory=set)  # read as replay in the window
    ended: bool = False
    # A resume without replay (v2 without replayFrom, v1 resume): no new epoch, so the
    # carried turn is the session's own open turn and ends when it does.
    same_epoch: bool = False
    # v1: the carried turn's prompt request, (conn, id): its response, which may come after
    # the window opened (an agent that reads the load only once the turn is done), ends the
    # turn in its own epoch (MID-A-09: a v1 turn ends with its prompt response)
    request: Any = None
    cancel_seq: int = -1  # the session/cancel written while the carried turn ran (-1: none)
    echoed: bool = False  # same_epoch: the carried turn's echo came in the window

    def echo(self, mid: str | None, window: bool, shown: set[str],
             named: dict[str, set[int]]) -> bool:
        """Same epoch (a window that replays nothing): whether this user update is the
        carried turn's echo (a queued prompt's turn may start before the agent reads the
        request, and runs on beside the window): a user message under an ID the session
        never showed, the first echo of a turn that has shown none under a shown ID a
        prompt response named (a reused or wrong one is MID-A-02's and MID-V2-05's to
        grade), an ID-less first echo, or a later chunk of one of them. Otherwise it is
        history shown again."""
        if self.ended or not window:
            self.begun = self.begun or window
            return False
        if mid is not None and ("user", mid) in self.ids:
            return True
        if mid is None or mid not in shown:
            # no ID to match, or one the session never showed: no history shown again (an
            # echo under an ID no response named is MID-V2-05's to grade)
            ours = mid is not None or not self.echoed
        else:  # shown before: a turn's first echo under a named ID (a reused or another
            # prompt's one is MID-A-02's and MID-V2-05's to grade), else history
            ours = not self.echoed and mid in named
        if not ours:
            self.begun = True
            return False
        self.echoed = True
        if mid is not None:
            self.ids[("user", mid)] = ""
        return True

    def continues(self, kind: str, form: str, mid: str | None, update: dict[str, Any]) -> bool:
        """Whether this update is a chunk that goes on with one of the turn's agent or
        thought messages: its ID, and not the message's first chunk text again (a replay
        that rebuilds the message starts with that)."""
        if form != "chunk" or kind == "user" or mid is None:
            return False
        first = self.ids.get((kind, mid))
        return first is not None and model.block_text(update.get("content")) != first

    def live(self, kind: str, form: str, mid: str | None, update: dict[str, Any],
             window: bool, seq: int, fresh: bool = True,
             shown: frozenset[str] | set[str] = frozenset()) -> bool:
        """Whether this message update of the session is the carried turn's output.

        ``window``: it arrived in the replay window; ``fresh``: outside it, a message the
        session has not shown yet may be the turn's (no prompt the target could have read
        since is known to be running); ``shown``: the message IDs other than user
        messages' that the session showed live (a window that replays nothing: an upsert
        under another is no history)."""
        if self.ended or kind == "user":
            if window:
                self.begun = True
            return False
        if mid is None:  # no ID to match (v1 allows that): where it falls decides, once
            return not self.begun if window else fresh
        key = (kind, mid)
        if not window:  # after the window: the turn goes on until its idle
            if key in self.ids:
                return key not in self.rebuilt
            if fresh and key not in self.replayed:
                self.ids[key] = model.block_text(update.get("content"))
                return True
            return False
        if form != "chunk":
            if self.same_epoch and key in self.ids:
                return True  # nothing replays here: the turn restates its own message
            if self.same_epoch and not self.begun and mid not in shown:
                # nothing replays here, and no history came yet: a message the session
                # never showed is the turn's next one, written whole before the request
                self.ids[key] = model.block_text(update.get("content"))
                self.fresh[key] = seq
                self.whole.add(key)
                return True
            self.begun = True
            self.replayed.add(key)
            if "content" in update:
                self.upserted.add(key)
            return False
        if key in self.ids:
            if key in self.upserted or key in self.rebuilt:
                return False
            if key in self.whole:
                return True  # chunks of the turn's message begun whole: no rebuild
            if model.block_text(update.get("content")) == self.ids[key]:
                self.rebuilt.add(key)  # the replay rebuilds it from its first chunk on
                self.begun = True
                return False
            return True
        if not self.begun:
            self.ids[key] = model.block_text(update.get("content"))
            self.fresh[key] = seq
            return True
        self.replayed.add(key)
        return False


@dataclass
class _Conn:
    protocol: int
    pending: dict[Any, _Pending] = field(default_factory=dict)


class Timeline:
    """Stateful interpreter: feed entries, get events.

    Long runs of chunks of one message are most of a transcript. A chunk line
    that continues the message of the line just before it takes a short path
    (:meth:`repeat_update`), and ``MessageEvent.repeat`` tells the grader and the
    checkers that nothing but the chunk itself is new.
    """

    def __init__(self, protocol: int = 1, *, repeats: bool = True,
                 session_messages: bool = False, replay_marker: bool = False,
                 idempotency_keys: bool = False) -> None:
        self.default_protocol = protocol
        ids: dict[str, str] = {}  # ID -> its first string object (see _from_agent)
        self.same_ids = ids.setdefault
        # The update kinds that are messages (with the "session" kind under a profile
        # that has inter-session messages: Profile.session_messages).
        self.kinds = model.message_kinds(session_messages)
        self.repeats = repeats  # False: no short path (tests compare both ways)
        # Under a profile with the replay marker (Profile.replay_marker, catalogue K.3) a
        # replay_complete on a session whose requested v2 replay is open closes the window:
        # what follows, also before the resume response, is live.
        self.replay_marker = replay_marker
        # ... and a v2 session/prompt that repeats an idempotencyKey of its session is a
        # retry of a submission (catalogue K.4): it opens no turn (Profile.idempotency_keys).
        self.idempotency_keys = idempotency_keys
        self.prompt_keys: dict[str, set[str]] = {}  # session -> keys of its prompts
        self.conns: dict[int, _Conn] = {}
        self.sessions: dict[str, _Session] = {}
        self.agent_info: dict[str, Any] = {}
        self.negotiated: dict[int, int] = {}
        # The first chunk of the run the previous line belonged to, while the run can go on.
        self.last_chunk: MessageEvent | None = None
        self.idless_keys = 0  # keys of the update of an ID-less last_chunk

    def _conn(self, conn: int) -> _Conn:
        c = self.conns.get(conn)
        if c is None:
            c = self.conns[conn] = _Conn(self.default_protocol)
        return c

    def _session(self, sid: str, conn: int, seq: int, kind: str = "unknown") -> _Session:
        s = self.sessions.get(sid)
        if s is None:
            s = self.sessions[sid] = _Session(Epoch(sid, 0, kind, conn, seq))
        return s

    def _new_epoch(self, sid: str, kind: str, conn: int, seq: int) -> _Session:
        old = self.sessions.get(sid)
        index = old.epochs if old else 0
        s = _Session(Epoch(sid, index, kind, conn, seq), epochs=index + 1)
        self.sessions[sid] = s
        return s

    def feed(self, entry: Entry) -> list[Event]:
        """The events of one entry, in order (a protocol line's Frame comes first)."""
        update = self.repeat_update(entry)
        if update is not None:
            ev = self.repeat_event(entry, update)
            return [Frame(entry, ev.protocol), ev]
        return self.feed_new(entry)

    def repeat_update(self, entry: Entry) -> dict[str, Any] | None:
        """The update of a repeat line (see ``MessageEvent.repeat``), else None.

        A repeat's events are :meth:`repeat_event` and ``Frame(entry, protocol)``;
        any other entry's come from :meth:`feed_new`.
        """
        last = self.last_chunk
        if (last is None or entry.stream != "stdout" or entry.conn != last.conn
                or entry.src != "agent" or entry.error is not None):
            return None
        # The same message as the line before, in a plain notification. Its event equals
        # what the general path makes (nothing that decides session, epoch, turn or phase
        # can change between two such lines), plus repeat=True. Not a dict where one is
        # needed: TypeError; a key missing: KeyError; either way not a repeat.
        msg = entry.msg
        try:
            if msg["method"] != "session/update" or msg["jsonrpc"] != "2.0" or "id" in msg:
                return None
            params = msg["params"]
            update = params["update"]
            if (params["sessionId"] != last.session
                    or update["sessionUpdate"] != last.update_type or type(update) is not dict):
                return None
            if last.mid is not None:
                if update["messageId"] != last.mid:
                    return None
            # An ID-less run goes on only while its lines carry nothing but the content (and
            # the same null ID): a near-miss key or a _meta on one chunk ends the run.
            elif (len(update) != self.idless_keys or "content" not in update
                  or (self.idless_keys == 3 and update.get("messageId", 0) is not None)):
                return None
        except (KeyError, TypeError):
            return None
        return update

    def repeat_event(self, entry: Entry, update: dict[str, Any]) -> MessageEvent:
        assert self.last_chunk is not None
        return repeat_of(self.last_chunk, entry.seq, update)

    def feed_new(self, entry: Entry) -> list[Event]:
        """The events of an entry that is not a repeat (:meth:`repeat_update` gave None)."""
        stream = entry.stream
        if stream == "stderr":
            return []  # no event: a run of chunks goes on across stderr lines
        self.last_chunk = None
        if stream == "harness":
            frame = Frame(entry, self._conn(entry.conn).protocol)
            if entry.event == "exit":
                return [frame, *self._close_conn(entry)]
            return [frame]
        conn = self._conn(entry.conn)
        frame = Frame(entry, conn.protocol)
        msg = entry.msg
        if entry.error is not None or msg is None:
            return [frame]
        events: list[Event] = [frame]
        if isinstance(msg, list):
            for m in msg:
                if isinstance(m, dict):
                    if entry.src == "client":
                        events.extend(self._from_client(entry, conn, m))
                    else:
                        events.extend(self._from_agent(entry, conn, m, entry.seq))
            return events
        if not isinstance(msg, dict):
            return events
        if entry.src == "client":
            events.extend(self._from_client(entry, conn, msg))
            return events
        events.extend(self._from_agent(entry, conn, msg, None))
        if self.repeats and len(events) == 2 and entry.src == "agent" and stream == "stdout":
            ev = events[1]
            if (type(ev) is MessageEvent and ev.form == "chunk"
                    and msg.get("jsonrpc") == "2.0" and "id" not in msg):
                if self.sessions[ev.session].carried is not None:
                    pass  # a window beside a live turn: every line is read (Carried.live)
                elif ev.mid is not None:
                    self.last_chunk = ev  # the next line may continue this message
                elif ev.id_state in (model.ABSENT, model.NULL) and "content" in ev.update:
                    # An ID-less chunk of nothing but its content: repeats must be the same.
                    n = 2 if ev.id_state == model.ABSENT else 3
                    if len(ev.update) == n:
                        self.last_chunk = ev
                        self.idless_keys = n
        return events

    # -- client -> agent ---------------------------------------------------
    def _from_client(self, entry: Entry, conn: _Conn, msg: dict[str, Any]) -> Iterator[Event]:
        method = msg.get("method")
        raw_params = msg.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        if method is None:
            return  # a response to an agent request
        sid = params.get("sessionId") if isinstance(params.get("sessionId"), str) else None
        if "id" in msg:
            conn.pending[_key(msg["id"])] = _Pending(method, params, entry.seq, sid, entry.fuzz)
        if method == "initialize" and isinstance(params.get("protocolVersion"), int):
            conn.protocol = params["protocolVersion"]
        elif method == "session/prompt" and sid is not None and "id" in msg:
            key = params.get("idempotencyKey")
            if self.idempotency_keys and conn.protocol >= 2 and isinstance(key, str):
                keys = self.prompt_keys.setdefault(sid, set())
                if key in keys:
                    return  # a retry: graded by checks/keys.py, never a turn of its own
                keys.add(key)
            s = self._session(sid, entry.conn, entry.seq)
            s.turn += 1
            if not s.turn_open:
                s.streamed = {}
            s.turn_open = True
            s.echoed = False
            s.cancel_seq = -1
            s.turn_request = (entry.conn, _key(msg["id"]))
            s.after_replay = False
            s.replay = None
            if conn.protocol >= 2:
                s.flight[s.turn_request] = s.turn
                s.open.append(s.turn)
            yield TurnStart(entry.seq, entry.conn, sid, s.epoch, s.turn, msg["id"], params,
                            conn.protocol, entry.fuzz)
        elif method == "session/cancel" and sid is not None:
            cs = self.sessions.get(sid)
            if cs is not None and cs.turn_open and cs.cancel_seq < 0:
                cs.cancel_seq = entry.seq
        elif method == "session/load" and sid is not None:
            old = self.sessions.get(sid)
            s = self._new_epoch(sid, "load", entry.conn, entry.seq)
            s.replay, s.replay_requested = method, True
            self._carry(old, s, entry)
            yield ReplayStart(entry.seq, entry.conn, sid, s.epoch, method, True, conn.protocol)
        elif method == "session/resume" and sid is not None:
            replay_from = params.get("replayFrom")
            if conn.protocol >= 2 and replay_from is not None:
                old = self.sessions.get(sid)
                s = self._new_epoch(sid, "resume", entry.conn, entry.seq)
                s.replay, s.replay_requested = method, True
                self._carry(old, s, entry)
            else:
                s = self._session(sid, entry.conn, entry.seq, "resume")
                s.replay, s.replay_requested = method, False
                if s.turn_open and (s.carried is None or s.carried.ended):
                    # a turn streams: it goes on beside the window, which replays nothing
                    turn = self._writing(s, conn)
                    s.carried = Carried(s.epoch, turn, entry.conn, entry.seq, dict(s.streamed),
                                        same_epoch=True, echoed=turn in s.echoed_turns)
            yield ReplayStart(entry.seq, entry.conn, sid, s.epoch, method, s.replay_requested,
                              conn.protocol)

    @staticmethod
    def _carry(old: _Session | None, s: _Session, entry: Entry) -> None:
        """A replay window opened while a turn of the session streams: the turn goes on
        beside it (``Carried``)."""
        if old is not None and old.turn_open:
            s.carried = Carried(old.epoch, old.turn, entry.conn, entry.seq, dict(old.streamed),
                                request=old.turn_request, cancel_seq=old.cancel_seq)

    # -- agent -> client ---------------------------------------------------
    def _from_agent(self, entry: Entry, conn: _Conn, msg: dict[str, Any],
                    batch: int | None) -> Iterator[Event]:
        method = msg.get("method")
        if method is None and "id" in msg:
            yield from self._response(entry, conn, msg)
            return
        if method != "session/update":
            return
        params = msg.get("params")
        if not isinstance(params, dict):
            return
        update = params.get("update")
        sid = params.get("sessionId")
        if not isinstance(update, dict) or not isinstance(sid, str):
            return
        # One string object per session and message ID: a JSON parser makes a new one
        # for each line and the checkers keep an ID for every message (in a session of
        # 56,000 messages, 12 MB of copies). Equal strings: nothing a rule reads changes.
        # A repeat line (repeat_update) is never read here: its IDs are its first line's.
        same = self.same_ids
        sid = params["sessionId"] = same(sid, sid)
        s = self._session(sid, entry.conn, entry.seq)
        utype = update.get("sessionUpdate")
        phase = self._phase(s)
        kinds = self.kinds
        if isinstance(utype, str) and utype in kinds:
            state, value = model.id_state(update)
            if state == model.STRING:
                value = update["messageId"] = same(value, value)
            kind = kinds[utype]
            form = "chunk" if model.is_chunk(utype) else "upsert"
            mid = value if state == model.STRING else None
            epoch, turn, inside = s.epoch, self._writing(s, conn), -1
            c = s.carried
            if c is not None and entry.conn == c.conn and not c.ended and (
                    phase in (REPLAY, AFTER_REPLAY, NO_TURN, UNREQUESTED) or phase == LIVE):
                window = phase in (REPLAY, UNREQUESTED)
                # a prompt of the new epoch runs once accepted (its response or its echo)
                fresh = phase != LIVE or not (s.accepted or s.echoed)
                if kind == "user" and phase == LIVE:
                    s.echoed = True
                if (c.echo(mid, window, s.echo_ids, s.named) if kind == "user" and c.same_epoch
                        else c.live(kind, form, mid, update, window, entry.seq, fresh,
                                    s.shown)):
                    if kind == "user" and mid is not None:
                        s.echo_ids.add(mid)
                        s.echoed_turns.add(c.turn)
                    elif mid is not None:
                        s.shown.add(mid)
                    phase, epoch, turn = LIVE, c.epoch, c.turn
                    inside = c.request_seq if window else -1
                    yield MessageEvent(
                        entry.seq, entry.conn, sid, kind, utype, form, state, mid,
                        update.get("messageId"), update, epoch, turn, phase, conn.protocol,
                        batch, inside=inside)
                    return
            if (phase == UNREQUESTED and c is not None and c.same_epoch and c.ended
                    and entry.conn == c.conn and c.continues(kind, form, mid, update)):
                # a resume without replay, beside a turn that has ended (its idle came in or
                # before the window): a chunk that goes on with one of the turn's messages
                # (its ID, another text than its first chunk's) is no history shown again
                # but the turn's output after its idle (MID-A-09/out-of-turn)
                phase, epoch, turn = OUT_OF_TURN, c.epoch, c.turn
            if s.turn_open:
                s.running = True
            if phase == LIVE and mid is not None:
                if kind == "user":
                    s.echo_ids.add(mid)
                    s.echoed_turns.add(turn)
                else:
                    s.shown.add(mid)
            if phase == LIVE and form == "chunk" and mid is not None:
                s.streamed.setdefault((kind, mid), model.block_text(update.get("content")))
            if phase == REPLAY:
                s.window_messages += 1
            elif phase == AFTER_REPLAY:
                s.epoch.empty = False  # a replay after the response (MID-A-07, MID-V2-06)
            yield MessageEvent(
                entry.seq, entry.conn, sid, kind, utype, form, state, mid,
                update.get("messageId"), update, epoch, turn, phase, conn.protocol, batch,
                inside=inside, cancelled=s.cancel_seq if phase == LIVE else -1)
            return
        yield OtherUpdate(entry.seq, entry.conn, sid, str(utype), update, s.epoch,
                          self._writing(s, conn),
                          phase, conn.protocol, batch)
        c = s.carried
        if (utype == "state_update" and update.get("state") == "idle" and c is not None
                and not c.ended and entry.conn == c.conn
                and not (s.turn_open and (s.accepted or s.echoed))):
            # the carried turn ends (a prompt of the new epoch not yet running cannot)
            c.ended = True
            return
        carried = c is not None and not c.ended and not (s.accepted or s.echoed)
        if s.turn_open and not carried and (utype == "tool_call_update" or (
                utype == "state_update" and update.get("state") == "running")):
            s.running = True
        if (utype == "replay_complete" and self.replay_marker and conn.protocol >= 2
                and s.replay == "session/resume" and s.replay_requested):
            s.replay = None  # the response then opens no after-replay phase
            s.epoch.empty = s.epoch.index > 0 and not s.window_messages
            yield ReplayEnd(entry.seq, entry.conn, sid, s.epoch, "session/resume", True, True,
                            conn.protocol)
            return
        if (utype == "state_update" and update.get("state") == "idle" and conn.protocol >= 2
                and s.turn_open and s.open
                and (s.turn_request is None or s.turn_request[0] == entry.conn)
                and (s.running or s.open[0] in s.accepted)):
            # v2: idle ends the foreground work of the oldest open turn; before that turn's
            # acceptance response it waits for it (the response may trail the updates). An
            # idle before any sign of acceptance (a real agent reports the session's state as
            # a prompt arrives) is a state report: no turn's end.
            s.running = False
            s.pending_idle.append(update.get("stopReason"))
            yield from self._idle_ends(s, entry, sid, conn.protocol)

    @staticmethod
    def _writing(s: _Session, conn: _Conn) -> int:
        """The turn an update of the session belongs to. v2: the oldest open turn, until
        its idle ends it (the benefit of the doubt: a prompt the suite wrote while the
        target was still writing is not answered by what the target could have written
        before it read that prompt; catalogue B.2, prompts in flight are queued)."""
        if conn.protocol >= 2 and s.open:
            return s.open[0]
        return s.turn

    def _phase(self, s: _Session) -> str:
        if s.replay is not None:
            return REPLAY if s.replay_requested else UNREQUESTED
        if s.turn_open:
            return LIVE
        if s.after_replay:
            return AFTER_REPLAY if s.replay_requested else UNREQUESTED
        if s.turn < 0:
            return NO_TURN
        if s.last_stop == "cancelled":
            return AFTER_CANCEL
        return OUT_OF_TURN

    def _response(self, entry: Entry, conn: _Conn, msg: dict[str, Any]) -> Iterator[Event]:
        pending = conn.pending.pop(_key(msg["id"]), None)
        if pending is None:
            return
        result = msg.get("result")
        ok = "result" in msg
        if pending.method == "initialize" and ok and isinstance(result, dict):
            pv = result.get("protocolVersion")
            if isinstance(pv, int):
                conn.protocol = pv
                self.negotiated[entry.conn] = pv
            info = result.get("agentInfo") or result.get("info")
            if isinstance(info, dict):
                self.agent_info = info
        elif pending.method == "session/new" and ok and isinstance(result, dict):
            sid = result.get("sessionId")
            if isinstance(sid, str):
                self._new_epoch(sid, "new", entry.conn, entry.seq)
        elif pending.method == "session/prompt" and pending.session is not None:
            s = self._session(pending.session, entry.conn, entry.seq)
            request = (entry.conn, _key(msg["id"]))
            if conn.protocol >= 2:
                turn = s.flight.pop(request, None)
                if turn is None:
                    return
                if s.turn_request == request:
                    s.turn_request = None
                if ok:
                    s.accepted.add(turn)
                    s.running = True
                    named = result.get("messageId") if isinstance(result, dict) else None
                    if isinstance(named, str):
                        s.named.setdefault(named, set()).add(turn)
                    yield PromptAccepted(entry.seq, entry.conn, pending.session, s.epoch, turn,
                                         result, conn.protocol)
                    yield from self._idle_ends(s, entry, pending.session, conn.protocol)
                    return
                if turn in s.open:
                    s.open.remove(turn)
                s.turn_open = bool(s.open)
                if not s.turn_open:
                    s.last_stop = "error"
                stop = result.get("stopReason") if isinstance(result, dict) else None
                yield TurnEnd(entry.seq, entry.conn, pending.session, s.epoch, turn, stop,
                              conn.protocol, None, "error")
                return
            if s.turn_request != request:
                yield from self._carried_response(s, entry, pending, msg, request)
                return
            s.turn_open = False
            s.turn_request = None
            cancelled, s.cancel_seq = s.cancel_seq, -1
            stop = result.get("stopReason") if isinstance(result, dict) else None
            s.last_stop = stop if ok else "error"
            self._end_carried(s, s.turn)
            yield TurnEnd(entry.seq, entry.conn, pending.session, s.epoch, s.turn, stop,
                          conn.protocol, result if isinstance(result, dict) else None,
                          "response" if ok else "error", cancelled)
        elif pending.method in ("session/load", "session/resume") and pending.session:
            s = self._session(pending.session, entry.conn, entry.seq)
            if s.replay is None:
                return
            requested = s.replay_requested
            s.replay = None
            s.after_replay = True
            if requested and ok:
                s.epoch.empty = s.epoch.index > 0 and not s.window_messages
            yield ReplayEnd(entry.seq, entry.conn, pending.session, s.epoch, pending.method,
                            requested, ok, conn.protocol)

    def _idle_ends(self, s: _Session, entry: Entry, sid: str, protocol: int) -> Iterator[Event]:
        """v2: the idle updates seen so far end the oldest open turns that were accepted."""
        while s.pending_idle and s.open and s.open[0] in s.accepted:
            turn = s.open.pop(0)
            s.accepted.discard(turn)
            stop = s.pending_idle.pop(0)
            s.turn_open = bool(s.open)
            # v2 turns stream one after another: what streamed was the ended turn's, never
            # the next queued one's (a window opened beside that one must not read its first
            # chunks as the old turn's messages rebuilt)
            s.streamed = {}
            cancelled, s.cancel_seq = s.cancel_seq, -1
            if not s.turn_open:
                s.last_stop = stop
                s.pending_idle.clear()
            self._end_carried(s, turn)
            yield TurnEnd(entry.seq, entry.conn, sid, s.epoch, turn, stop, protocol, None,
                          "idle", cancelled)

    @staticmethod
    def _carried_response(s: _Session, entry: Entry, pending: _Pending, msg: dict[str, Any],
                          request: Any) -> Iterator[Event]:
        """v1: the response of the prompt whose turn streamed when a load opened a new epoch
        ends that turn in its epoch: later updates are no longer its output (a new prompt's
        chunks are the new turn's, not the carried one's)."""
        c = s.carried
        if c is None or c.ended or c.same_epoch or c.request != request:
            return
        c.ended = True
        result, ok = msg.get("result"), "result" in msg
        stop = result.get("stopReason") if isinstance(result, dict) else None
        yield TurnEnd(entry.seq, entry.conn, pending.session or "", c.epoch, c.turn, stop, 1,
                      result if isinstance(result, dict) else None,
                      "response" if ok else "error", c.cancel_seq)

    @staticmethod
    def _end_carried(s: _Session, turn: int) -> None:
        """A turn carried beside a window that opened no epoch ends with the turn; while
        the window is open, a queued prompt's turn that runs next is carried on beside it
        (the agent may have started it before it read the request)."""
        c = s.carried
        if c is None or not c.same_epoch or c.turn != turn:
            return
        c.ended = True
        if s.replay is not None and not s.replay_requested and s.open:
            s.carried = Carried(s.epoch, s.open[0], c.conn, c.request_seq, {}, same_epoch=True,
                                echoed=s.open[0] in s.echoed_turns)

    def _close_conn(self, entry: Entry) -> Iterator[Event]:
        for sid, s in self.sessions.items():
            if s.turn_open and s.turn_request is not None and s.turn_request[0] == entry.conn:
                s.turn_open = False
                s.turn_request = None
                protocol = self._conn(entry.conn).protocol
                # v2: every turn still open ends with the connection (oldest first)
                for turn in [t for t in s.open if t != s.turn]:
                    yield TurnEnd(entry.seq, entry.conn, sid, s.epoch, turn, None, protocol,
                                  None, "connection-closed")
                s.open.clear()
                s.accepted.clear()
                s.flight.clear()
                s.pending_idle.clear()
                yield TurnEnd(entry.seq, entry.conn, sid, s.epoch, s.turn, None, protocol, None,
                              "connection-closed")
            if s.replay is not None and s.epoch.conn == entry.conn:
                s.replay = None
        yield ConnEnd(entry.conn, entry.seq, entry.data)


def _key(request_id: Any) -> Any:
    # JSON-RPC ids: 1 and "1" are different ids.
    return (type(request_id).__name__, request_id if not isinstance(request_id, (dict, list))
            else repr(request_id))


def events(entries: Iterable[Entry], protocol: int = 1, *,
           session_messages: bool = False, replay_marker: bool = False) -> Iterator[Event]:
    timeline = Timeline(protocol, session_messages=session_messages,
                        replay_marker=replay_marker)
    for entry in entries:
        yield from timeline.feed(entry)
