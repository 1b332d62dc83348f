# long: every replay rule (v1 load, v2 resume, the draft rules) reads one replay-window state
"""Replay rules: MID-A-07 (v1 load; no replay in a v1 resume), MID-A-08, MID-V2-06,
MID-V2-11, MID-V2-12, and the live-versus-replay cross-check.

Messages grouped by ID during the live turns are compared with what
``session/load`` (v1) or ``session/resume`` with ``replayFrom`` (v2) replays.
A live message that replay shows as one with others' text exposes IDs that
were not stable across the chunks of one message (MID-A-03); replay that
folds two live messages under one ID exposes a replayed duplicate (MID-A-07,
MID-V2-06).

Under a profile with the draft's replay rules (``Profile.replay_rules``, catalogue
Appendix I): a replayed user message keeps the ID its live ``session/prompt``
response returned (MID-V2-11), and chunks that rebuild a replayed message follow
an upsert of the same ID, ``content: []`` or the full content (MID-V2-12).

Which update in a replay window is the replay and which is the output of a turn still
streaming is the transcript's one reading (``timeline.Carried``): a live one comes here
as a live update of its turn, and these rules never read it as replay.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.base import MAX_FINDINGS_PER_RULE, Checker, Rule, register
from conformance.checks.events import (
    AFTER_REPLAY,
    LIVE,
    REPLAY,
    UNREQUESTED,
    MessageEvent,
    PromptAccepted,
    RepeatRun,
    ReplayEnd,
    ReplayStart,
    TurnStart,
)
from conformance.checks.identity import SENTENCE_END
from conformance.checks.wire import short
from conformance.model import with_article

MESSAGE_UPSERTS = {kind: name for name, kind in model.UPSERT_KINDS.items()}
MESSAGE_UPSERTS.update({kind: name for name, kind in model.SESSION_UPSERT_KINDS.items()})


def _same_prompt(msg: Msg, lp: _LivePrompt) -> bool:
    text = msg.text
    return text == lp.text or (bool(lp.first) and text.startswith(lp.first))


COMPACT_PARTS = 64  # chunk texts kept apart before they are joined into one


@dataclass(slots=True)
class Msg:
    """A message as the reducer builds it: its text so far (``done``) and, while its run of
    chunks goes on, the chunk texts not yet joined to it (a one-chunk message, the most
    common in a replay, keeps no list)."""

    kind: str
    mid: str | None
    seq: int
    done: str = ""
    parts: list[str] | None = None

    @property
    def text(self) -> str:
        if self.parts:
            self.fold()
        return self.done

    def fold(self) -> None:
        """Its run ended: one string, not one a chunk."""
        parts, self.parts = self.parts, None
        if parts:
            self.done = "".join([self.done, *parts]) if self.done else "".join(parts)

    def add(self, text: str) -> None:
        """Append a chunk's text; memory grows with the text, not with the chunk count."""
        parts = self.parts
        if parts is None:
            if not self.done:
                self.done = text
                return
            parts = self.parts = []
        parts.append(text)
        if len(parts) >= COMPACT_PARTS:
            self.done = "".join([self.done, *parts])
            parts.clear()

    def extend(self, texts: list[str]) -> None:
        parts = self.parts
        if parts is None:
            parts = self.parts = []
        parts.extend(texts)
        if len(parts) >= COMPACT_PARTS:
            self.done = "".join([self.done, *parts])
            parts.clear()

    def set(self, text: str) -> None:
        self.done, self.parts = text, None


@dataclass(slots=True)
class Turn:
    # its messages; None once packed (``compact``)
    msgs: list[Msg] | None = field(default_factory=list)
    # messages by ID (the first kind to use it); (kind, ID) for another kind under that ID;
    # None once a later turn of the session began (``compact``): built again from the
    # messages if a late update comes to this turn
    index: dict[str, Msg] | None = field(default_factory=dict)
    others: dict[tuple[str, str], Msg] | None = None
    # a turn no update is expected for, in three objects, not three a message: the
    # messages' kinds and IDs in turn, their entries and where each one's text ends in
    # turn, their texts joined
    packed: tuple[tuple[Any, ...], array[int], str] | None = None

    def rows(self) -> list[Msg]:
        """The turn's messages; made again from ``packed`` (new objects, not kept)."""
        if self.msgs is not None:
            return self.msgs
        assert self.packed is not None
        pairs, marks, text = self.packed
        out, start = [], 0
        for i in range(0, len(marks), 2):
            end = marks[i + 1]
            out.append(Msg(pairs[i], pairs[i + 1], marks[i], text[start:end]))
            start = end
        return out

    def thaw(self) -> None:
        """A late update came to a packed turn: its messages are objects again."""
        if self.msgs is None:
            self.msgs, self.packed = self.rows(), None

    def lookup(self) -> dict[str, Msg]:
        """``index``, built from the messages after ``compact`` (the same tables: at most one
        message per kind and ID, the first under an ID in ``index``)."""
        index = self.index
        if index is None:
            self.thaw()
            assert self.msgs is not None
            index, others = {}, None
            for m in self.msgs:
                if m.mid is None:
                    continue
                if m.mid not in index:
                    index[m.mid] = m
                else:
                    if others is None:
                        others = {}
                    others[(m.kind, m.mid)] = m
            self.index, self.others = index, others
        return index

    def compact(self) -> None:
        """A later turn of the session began: the tables by ID go, and the messages are
        packed (what the cross-check reads: kind, ID, entry, text)."""
        self.index = self.others = None
        msgs = self.msgs
        if not msgs:
            return
        pairs: list[Any] = []
        texts: list[str] = []
        marks = array("q")
        end = 0
        for m in msgs:
            pairs += (m.kind, m.mid)
            text = m.text
            texts.append(text)
            end += len(text)
            marks.append(m.seq)
            marks.append(end)
        self.packed = (tuple(pairs), marks, "".join(texts))
        self.msgs = None

    def apply(self, ev: MessageEvent) -> Msg:
        """Appendix G reducer: chunks append, upserts with content replace."""
        if self.msgs is None:
            self.thaw()
        assert self.msgs is not None
        mid = ev.mid
        msg = None
        if mid is not None:
            index = self.index if self.index is not None else self.lookup()
            msg = index.get(mid)
            if msg is not None and msg.kind != ev.kind:
                msg = self.others.get((ev.kind, mid)) if self.others else None
        elif self.msgs:
            last = self.msgs[-1]
            if last.mid is None and last.kind == ev.kind and ev.form == "chunk":
                msg = last  # legacy grouping: an ID-less run of one kind
        if msg is None:
            msg = Msg(ev.kind, mid, ev.seq)
            self.msgs.append(msg)
            if mid is not None:
                if mid not in index:
                    index[mid] = msg
                else:
                    if self.others is None:
                        self.others = {}
                    self.others[(ev.kind, mid)] = msg
        if ev.form == "chunk":
            msg.add(model.block_text(ev.update.get("content")))
        elif "content" in ev.update:
            content = ev.update["content"]
            msg.set(model.blocks_text(content) if isinstance(content, list) else "")
        return msg


def _first_by_id(turns: list[Turn]) -> dict[str, tuple[int, int, int]]:
    """The first message of ``turns`` under each ID: its turn, its place there, its entry."""
    first: dict[str, tuple[int, int, int]] = {}
    for t, turn in enumerate(turns):
        for i, m in enumerate(turn.rows()):
            if m.mid is not None and m.mid not in first:
                first[m.mid] = (t, i, m.seq)
    return first


def _share_texts(rep: _Replay) -> None:
    """The replay's last turn is complete: each of its messages whose text equals that of
    the live message of the same kind and ID in the live turn it replays keeps the live
    string (one copy of the conversation's text, not two; equal strings: nothing a rule
    reads changes)."""
    n = len(rep.turns) - 1
    if n >= len(rep.history):
        return
    live, replayed = rep.history[n], rep.turns[n]
    if replayed is None:
        return
    for m in replayed.rows():
        if m.mid is None:
            continue
        lm = live.lookup().get(m.mid)
        if lm is None or lm.kind != m.kind:
            continue
        text = lm.text
        if text is not m.text and text == m.done:
            m.done = text


@dataclass(slots=True)
class _LivePrompt:
    """A live v2 prompt whose response named its user message (MID-V2-11)."""

    turn: int
    epoch: int
    request_seq: int
    text: str  # the prompt's text
    first: str  # its first text block
    rid: str | None = None  # the messageId of the session/prompt response
    response_seq: int = -1
    echo_seq: int = -1  # the live echo: the user message of the turn under rid, else the first
    echo_mid: str | None = None


@dataclass
class _Replay:
    session: str
    protocol: int
    start_seq: int
    history: list[Turn]  # live turns before this replay
    # the replayed turns; None for one already compared with its live turn (``Replay.compare``)
    turns: list[Turn | None] = field(default_factory=list)
    # the one live turn that may still stream beside the replay (the newest of the epoch
    # before): its replayed turn is compared only at the end, like every turn beyond it
    open: Turn | None = None
    # the cross-check's findings so far, reported at the end in turn order, as if every turn
    # were compared then: per rule the first few by turn in full (the sink reports no more
    # of a rule in full), and how many came after them
    pending: dict[str, list[tuple[int, str, list[int], Any, Any]]] = field(
        default_factory=dict)
    beyond: dict[str, int] = field(default_factory=dict)
    # regenerated IDs (turn, kind, the live message's place in its turn, replayed ID, entry):
    # checked at the end against the first live message of each ID (one may still come)
    regenerated: list[tuple[int, str, int, str, int]] = field(default_factory=list)
    stable: int = 0  # replayed messages that kept their live ID
    last_key: tuple[str, str] | None = None
    runs: dict[tuple[str, str], int] = field(default_factory=dict)
    upserted: dict[tuple[str, str], int] = field(default_factory=dict)
    last_kind: str | None = None
    last_user_mid: str | None = None
    prompts: list[_LivePrompt] = field(default_factory=list)  # live prompts before the replay
    users: dict[str, Msg] = field(default_factory=dict)  # replayed user messages by ID, in order
    primed: set[tuple[str, str]] = field(default_factory=set)  # keys upserted with content
    chunked: set[tuple[str, str]] = field(default_factory=set)  # keys that had a chunk


@register
class Replay(Checker):
    rules = (
        Rule("MID-A-07/after-response"),
        Rule("MID-A-07/resume-replay"),
        Rule("MID-A-07/replay-duplicate"),
        Rule("MID-A-08/stability"),
        Rule("MID-A-08/collides-other-epoch"),
        Rule("MID-A-03/replay-crosscheck"),
        Rule("MID-V2-06/no-id"),
        Rule("MID-V2-06/replay-duplicate"),
        Rule("MID-V2-06/after-response"),
        Rule("MID-V2-06/unrequested-replay"),
        Rule("MID-V2-06/live-beside-resume"),
        Rule("MID-A-07/live-beside-load"),
        Rule("MID-V2-11/kept-id"),
        Rule("MID-V2-11/not-retained"),
        Rule("MID-V2-12"),
    )
    # Let go early (tests turn it off and demand the same findings): a complete replayed turn
    # is compared with its live turn at once, and a live turn is packed when the session's
    # next turn begins.
    early = True

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.history: dict[str, list[Turn]] = {}
        self.live: dict[tuple[str, int], dict[int, Turn]] = {}  # (session, epoch) -> turns
        self.replays: dict[str, _Replay] = {}
        self.done: list[_Replay] = []
        # the first live message of each ID per session (MID-V2-12's evidence), built from
        # ``history`` when a finding needs it, again only after more live messages came
        self.live_ids: dict[str, dict[str, Msg]] = {}
        self.live_count = 0  # live updates with an ID so far
        self.live_built = -1  # live_count when live_ids was built
        # The message a repeat chunk (timeline.MessageEvent.repeat) appends to: set when the
        # last event was a live or replayed chunk that a repeat continues with nothing else.
        self.tail: Msg | None = None
        self.prompts: dict[str, list[_LivePrompt]] = {}  # per session, v2, in order
        self.open_prompt: dict[tuple[str, int, int], _LivePrompt] = {}  # (session, epoch, turn)
        # the draft rules of catalogue Appendix I (MID-V2-11, MID-V2-12): the register names
        # the profiles that grade them, and the grader says why the others do not
        self.draft = Rule("MID-V2-12").record.applies_under(self.profile.name)
        self.no_replay: set[int] = set()  # entries of v2 resumes without replayFrom
        self.loads: set[int] = set()  # entries of v1 session/load requests

    def on_turn_start(self, ev: TurnStart) -> None:
        if ev.protocol < 2 or not self.draft:
            return
        prompt = ev.params.get("prompt")
        blocks = prompt if isinstance(prompt, list) else []
        first = next((model.block_text(b) for b in blocks if model.block_text(b)), "")
        lp = _LivePrompt(ev.turn, ev.epoch.index, ev.seq, model.blocks_text(prompt), first)
        self.open_prompt[(ev.session, ev.epoch.index, ev.turn)] = lp

    def on_accepted(self, ev: PromptAccepted) -> None:
        lp = self.open_prompt.get((ev.session, ev.epoch.index, ev.turn))
        if lp is None:
            return
        rid = ev.result.get("messageId") if isinstance(ev.result, dict) else None
        if isinstance(rid, str):
            lp.rid, lp.response_seq = rid, ev.seq
            self.prompts.setdefault(ev.session, []).append(lp)

    def _live_echo(self, ev: MessageEvent) -> None:
        """The live echo of a prompt, as evidence: the user message under the ID its
        response named (prompts may be in flight together), else the turn's first."""
        lp = next((p for p in self.prompts.get(ev.session, ())
                   if ev.mid is not None and p.rid == ev.mid and p.epoch == ev.epoch.index),
                  None) or self.open_prompt.get((ev.session, ev.epoch.index, ev.turn))
        if lp is None:
            return
        if lp.echo_seq < 0 or (ev.mid is not None and ev.mid == lp.rid != lp.echo_mid):
            lp.echo_seq, lp.echo_mid = ev.seq, ev.mid

    def _dup_rule(self, protocol: int) -> str:
        return "MID-V2-06/replay-duplicate" if protocol >= 2 else "MID-A-07/replay-duplicate"

    def on_replay_start(self, ev: ReplayStart) -> None:
        if not ev.requested and ev.protocol >= 2:
            self.no_replay.add(ev.seq)
        if ev.method == "session/load":
            self.loads.add(ev.seq)
        if not ev.requested:
            self.exercised("MID-V2-06/unrequested-replay" if ev.protocol >= 2
                           else "MID-A-07/resume-replay")
        if ev.requested:
            self.exercised("MID-V2-06/after-response" if ev.protocol >= 2
                           else "MID-A-07/after-response")
            # the newest live turn of the epoch before: the one that may stream beside it
            before = self.live.get((ev.session, ev.epoch.index - 1))
            self.replays[ev.session] = _Replay(ev.session, ev.protocol, ev.seq,
                                               list(self.history.get(ev.session, [])),
                                               open=before[max(before)] if before else None,
                                               prompts=list(self.prompts.get(ev.session, [])))

    def _beside_resume(self, ev: MessageEvent) -> None:
        """The one reading put this update of a turn in flight between a v2 resume without
        replayFrom and its response (``timeline.Carried``): the turn's output, not a replay."""
        self._beside(ev, "MID-V2-06/live-beside-resume", "a session/resume without replayFrom",
                     "as a replay", "no replay; the turn goes on")

    def _beside_load(self, ev: MessageEvent) -> None:
        """The one reading put this update in the window of a v1 session/load (between the
        request and its response) as the output of the turn that streamed when the suite
        wrote the request (``timeline.Carried``): the turn's, not the replay's (MID-A-07)."""
        self._beside(ev, "MID-A-07/live-beside-load", "a session/load", "as a replayed message",
                     "the replay, then the response")

    def _beside(self, ev: MessageEvent, rule: str, request: str, not_as: str,
                expected: str) -> None:
        """An update read as a streaming turn's output though it came inside a request's
        window: recorded once per request (info), with the evidence that decided it."""
        self.exercised(rule)
        of = f"of {short(ev.mid)!r}" if ev.mid is not None else "without an ID"
        self.found(rule, f"{with_article(ev.update_type)} {of} arrives after {request} "
                   f"(entry {ev.inside}) and before its response, while a prompt's turn "
                   f"streams: read as that turn's output, not {not_as} (the agent may have "
                   "written it before it read the request; benefit of the doubt)",
                   key=(ev.session, ev.inside), entries=[ev.inside, ev.seq],
                   expected=expected, actual=ev.update_type)

    def on_replay_end(self, ev: ReplayEnd) -> None:
        rep = self.replays.pop(ev.session, None)
        if rep is not None:
            if rep.turns:
                self._turn_done(rep)
            rep.runs.clear()  # read only while the replay runs; the cross-check needs the turns
            rep.upserted.clear()
            rep.primed.clear()
            rep.chunked.clear()
            self.done.append(rep)

    def on_repeats(self, run: RepeatRun) -> None:
        """Many repeats at once: their texts go to the message the run appends to."""
        if self.tail is None:
            for ev in run.events():
                self.on_message(ev)
            return
        self.tail.extend(run.texts())

    def on_message(self, ev: MessageEvent) -> None:
        tail, self.tail = self.tail, None
        if ev.repeat and tail is not None:
            tail.add(ev.text)
            self.tail = tail
            return
        if tail is not None and tail.parts is not None:
            tail.fold()  # its run ended: one string, not one a chunk
        if ev.phase == LIVE and ev.inside in self.no_replay:
            self._beside_resume(ev)
        elif ev.phase == LIVE and ev.inside in self.loads:
            self._beside_load(ev)
        if ev.phase == LIVE:
            key = (ev.session, ev.epoch.index)
            turns = self.live.get(key)
            if turns is None:
                turns = self.live[key] = {}
            turn = turns.get(ev.turn)
            if turn is None:
                turn = turns[ev.turn] = Turn()
                history = self.history.setdefault(ev.session, [])
                if history and self.early:
                    history[-1].compact()
                history.append(turn)
            msg = turn.apply(ev)
            if ev.kind == "user" and ev.protocol >= 2:
                self._live_echo(ev)
            if ev.mid is not None:
                self.live_count += 1
            self.tail = msg  # a repeat appends to it (an ID-less one too: legacy grouping)
            return
        v2 = ev.protocol >= 2
        if ev.phase == UNREQUESTED:
            if v2:
                self.found("MID-V2-06/unrequested-replay", f"{with_article(ev.update_type)} "
                           "arrives for a resume without replayFrom",
                           key=(ev.session, ev.epoch.index), entries=[ev.seq],
                           expected="no message-history updates", actual=ev.update_type)
            else:  # v1 session/resume restores a session without replay (catalogue B.3)
                self.found("MID-A-07/resume-replay", f"{with_article(ev.update_type)} arrives "
                           "for a v1 session/resume, which must not replay",
                           key=(ev.session, ev.epoch.index), entries=[ev.seq],
                           expected="no conversation-history updates", actual=ev.update_type)
            return
        if ev.phase == AFTER_REPLAY:
            rule = "MID-V2-06/after-response" if v2 else "MID-A-07/after-response"
            self.found(rule, f"a replayed {ev.update_type} arrives after the "
                       f"{'session/resume' if v2 else 'session/load'} response",
                       key=(ev.session, ev.epoch.index), entries=[ev.seq],
                       expected="all replay before the response",
                       actual=ev.update_type)
            return
        if ev.phase != REPLAY:
            return
        rep = self.replays.get(ev.session)
        if rep is None:
            return
        if v2:
            self.exercised("MID-V2-06/no-id")
            if ev.mid is None:
                self.found("MID-V2-06/no-id", f"a replayed {ev.update_type} without a string ID",
                           key=(ev.session, ev.epoch.index, ev.kind, ev.id_state),
                           entries=[ev.seq], expected="a unique opaque messageId",
                           actual=ev.id_state)
        # A replayed turn starts at its user message: after other output, or where a user
        # message with another ID follows one (a turn that had only its echo, e.g. one
        # cancelled before any output). ID-less user chunks in a row are one message.
        if not rep.turns or (ev.kind == "user" and (
                rep.last_kind != "user"
                or (ev.mid is not None and ev.mid != rep.last_user_mid))):
            if rep.turns:
                self._turn_done(rep)
            rep.turns.append(Turn())
        rep.last_kind = ev.kind
        if ev.kind == "user":
            rep.last_user_mid = ev.mid
        current = rep.turns[-1]
        assert current is not None  # only a complete turn is compared and let go
        msg = current.apply(ev)
        if ev.mid is None:
            if not v2:  # a repeat appends to it; in v2 each ID-less chunk is a finding
                self.tail = msg
            return  # an ID-less chunk is a gap (MID-A-03), not another message
        dup_rule = self._dup_rule(ev.protocol)
        if dup_rule not in self.marked:
            self.mark(dup_rule)
        mkey: tuple[str, str] = (ev.kind, ev.mid)
        if ev.kind == "user" and v2:
            rep.users.setdefault(ev.mid, msg)
        if v2 and self.draft:
            self._primer(rep, ev, mkey)
        if ev.form == "upsert" and "content" in ev.update:
            if mkey in rep.upserted:
                self.found(dup_rule, f"the replay sends two whole {ev.kind} messages with ID "
                           f"{short(ev.mid)!r}", key=(ev.session, ev.epoch.index, mkey),
                           entries=[rep.upserted[mkey], ev.seq],
                           expected="one ID per replayed message", actual=short(ev.mid))
            rep.upserted[mkey] = ev.seq
        elif ev.form == "chunk":
            if mkey in rep.runs and rep.last_key != mkey:
                self.found(dup_rule, f"replayed {ev.kind} chunks return to ID {short(ev.mid)!r} "
                           f"after another message", key=(ev.session, ev.epoch.index, mkey),
                           entries=[rep.runs[mkey], ev.seq],
                           expected="one ID per replayed message", actual=short(ev.mid))
            rep.runs.setdefault(mkey, ev.seq)
            self.tail = msg
        rep.last_key = mkey

    def _primer(self, rep: _Replay, ev: MessageEvent, mkey: tuple[str, str]) -> None:
        """MID-V2-12: the first replayed chunk of a message follows an upsert of its ID."""
        if ev.form != "chunk":
            if "content" in ev.update:
                rep.primed.add(mkey)
            return
        if mkey in rep.chunked:
            return
        rep.chunked.add(mkey)
        self.exercised("MID-V2-12")
        if mkey in rep.primed:
            return
        live = self._first_live(ev.session, mkey[1])
        entries = ([live.seq] if live is not None else []) + [ev.seq]
        self.found("MID-V2-12",
                   f"the replay rebuilds {with_article(ev.kind)} message {short(ev.mid)!r} "
                   f"from chunks without first sending {MESSAGE_UPSERTS.get(ev.kind, 'an upsert')}"
                   " with content: [] (a client that holds the live content shows it twice)",
                   key=(ev.session, ev.epoch.index, mkey), entries=entries,
                   expected="an upsert of the same ID with content: [] (or the full content) "
                            "before the chunks",
                   actual=f"{ev.update_type} first")

    def _first_live(self, session: str, mid: str) -> Msg | None:
        """The live message the first live update with ``mid`` in ``session`` went to: of
        those under that ID, the one created first (the lowest sequence number)."""
        if self.live_built != self.live_count:
            self.live_built = self.live_count
            self.live_ids = {}
            for sid, turns in self.history.items():
                first: dict[str, Msg] = {}
                for turn in turns:
                    for m in turn.rows():
                        if m.mid is not None:
                            had = first.get(m.mid)
                            if had is None or m.seq < had.seq:
                                first[m.mid] = m
                self.live_ids[sid] = first
        return self.live_ids.get(session, {}).get(mid)

    def finish(self) -> None:
        for rep in self.done + list(self.replays.values()):
            self._crosscheck(rep)
            if rep.protocol >= 2 and self.draft:
                self._kept_ids(rep)

    def _kept_ids(self, rep: _Replay) -> None:
        """MID-V2-11: each live prompt's user message, when replayed, keeps the response's ID.

        Replayed user messages are matched to live prompts by order and by content (the
        first text block is enough); where two prompts had the same text, a replayed
        message under either one's ID is conforming (only the order decides)."""
        if not rep.prompts:
            return
        self.exercised("MID-V2-11/not-retained")
        users = list(rep.users.values())
        pos = 0
        for n, lp in enumerate(rep.prompts, 1):
            j = next((i for i in range(pos, len(users)) if _same_prompt(users[i], lp)), None)
            if j is None:
                self.found("MID-V2-11/not-retained",
                           f"the user message of live prompt {n} is not in the replay "
                           "(retention is optional)", key=(rep.session, lp.rid),
                           entries=[lp.response_seq, rep.start_seq], actual="not retained")
                continue
            pos = j + 1
            replayed = users[j]
            self.exercised("MID-V2-11/kept-id")
            if replayed.mid == lp.rid:
                continue
            if any(q.rid == replayed.mid and q.text == lp.text for q in rep.prompts):
                continue  # two prompts with this text: the order cannot say which it is
            entries = [lp.response_seq] + ([lp.echo_seq] if lp.echo_seq >= 0 else []) + [
                replayed.seq]
            self.found("MID-V2-11/kept-id",
                       f"the replayed user message of live prompt {n} has ID "
                       f"{short(replayed.mid or '')!r}, not {short(lp.rid or '')!r}, the ID its "
                       "session/prompt response returned", key=(rep.session, lp.rid),
                       entries=entries, expected=short(lp.rid), actual=short(replayed.mid))

    def _turn_done(self, rep: _Replay) -> None:
        """The replay's last turn is complete: compared with its live turn now, and let go,
        unless that live turn may still stream (``_Replay.open``) or ``early`` is off."""
        n = len(rep.turns) - 1
        replayed = rep.turns[n]
        assert replayed is not None
        if not self.early or (n < len(rep.history) and rep.history[n] is rep.open):
            _share_texts(rep)
            return
        if n < len(rep.history):
            self.compare(rep, n, rep.history[n], replayed)
        rep.turns[n] = None

    def _crosscheck(self, rep: _Replay) -> None:
        if not rep.history or not rep.turns:
            return
        for rule in ("MID-A-08/stability", "MID-A-08/collides-other-epoch",
                     "MID-A-03/replay-crosscheck"):
            self.exercised(rule)
        for n, (live, replayed) in enumerate(zip(rep.history, rep.turns, strict=False)):
            if replayed is not None:
                self.compare(rep, n, live, replayed)
        for rule, kept in rep.pending.items():
            for _, message, entries, expected, actual in kept:
                self.found(rule, message, entries=entries, expected=expected, actual=actual)
            for _ in range(rep.beyond.get(rule, 0)):  # past the few in full: counted
                self.found(rule, "", entries=())
        if rep.regenerated:
            rep.regenerated.sort(key=lambda r: r[0])
            live_by_id = _first_by_id(rep.history)
            for n, kind, place, mid, seq in rep.regenerated:
                other = live_by_id.get(mid)
                if other is not None and other[:2] != (n, place):
                    self.found("MID-A-08/collides-other-epoch",
                               f"replayed {kind} message takes ID {short(mid)!r}, "
                               f"which a different live message had",
                               entries=[other[2], seq],
                               expected="a fresh ID or the message's own live ID",
                               actual=short(mid))
        stable, regenerated = rep.stable, len(rep.regenerated)
        if stable or regenerated:
            verdict = ("stable" if not regenerated else "regenerated" if not stable else "mixed")
            self.found("MID-A-08/stability",
                       f"replayed IDs are {verdict} ({stable} kept, {regenerated} new)",
                       entries=[rep.start_seq], actual=verdict)

    def compare(self, rep: _Replay, n: int, live: Turn, replayed: Turn) -> None:
        """Live turn ``n`` against its replay: what the IDs say, kept in ``rep`` for the end."""

        def pend(rule: str, message: str, entries: list[int], expected: Any,
                 actual: Any) -> None:
            kept = rep.pending.setdefault(rule, [])
            at = len(kept)
            while at and kept[at - 1][0] > n:  # in turn order; a turn's own in found order
                at -= 1
            kept.insert(at, (n, message, entries, expected, actual))
            if len(kept) > MAX_FINDINGS_PER_RULE and self.early:  # (off: every one kept)
                kept.pop()
                rep.beyond[rule] = rep.beyond.get(rule, 0) + 1

        dup_rule = self._dup_rule(rep.protocol)
        rows = live.rows()
        for kind in ("user", "agent", "thought", "session"):
            places = [i for i, m in enumerate(rows) if m.kind == kind]
            lm = [rows[i] for i in places]
            rm = [m for m in replayed.rows() if m.kind == kind]
            if not lm or not rm:
                continue
            if len(lm) == len(rm) and all(a.text == b.text for a, b in zip(lm, rm, strict=False)):
                for place, a, b in zip(places, lm, rm, strict=False):
                    if a.mid is None or b.mid is None:
                        continue
                    if a.mid == b.mid:
                        rep.stable += 1
                    else:
                        rep.regenerated.append((n, kind, place, b.mid, b.seq))
                continue
            if "".join(m.text for m in lm) != "".join(m.text for m in rm):
                continue  # the agent rewrote history: nothing to infer about IDs
            if len(lm) > len(rm):
                fragments = sum(1 for m in lm[:-1] if not m.text.rstrip(" ").endswith(
                    SENTENCE_END))
                if fragments >= max(1, (len(lm) - 1) // 2):
                    pend("MID-A-03/replay-crosscheck",
                                    f"live {kind} chunks under {len(lm)} IDs replay as "
                                    f"{len(rm)} message(s): the live IDs were not stable across "
                                    f"the chunks of one message", [lm[0].seq, rm[0].seq],
                                    [short(m.text, 60) for m in rm],
                                    [short(m.mid or "", 40) for m in lm[:6]])
                else:
                    pend(dup_rule,
                                    f"replay folds {len(lm)} live {kind} messages into {len(rm)} "
                                    f"(one ID for several messages)", [lm[0].seq, rm[0].seq],
                                    [short(m.text, 60) for m in lm],
                                    [short(m.text, 60) for m in rm])
            else:
                pend("MID-A-03/replay-crosscheck",
                                f"{len(lm)} live {kind} message(s) replay as {len(rm)}: replayed "
                                f"IDs split what one live ID grouped", [lm[0].seq, rm[0].seq],
                                [short(m.text, 60) for m in lm],
                                [short(m.text, 60) for m in rm])
