"""Prompt retries with an idempotency key (MID-V2-15, catalogue K.4), under a profile that
has them (``Profile.idempotency_keys``; the driver then sends a fresh key on every v2
prompt and repeats it on a retry).

A key yields at most one inserted user message, and every retry is answered with that
message's ``messageId``; two submissions with the same text and different keys are two
messages. The checker follows the wire itself (prompt requests, their responses, the user
messages of the session and later replays), like ``marker.py``: the timeline opens no
turn for a retry (``timeline.Timeline.idempotency_keys``).

A valid key refused with ``-32602`` fails only with evidence that the key was the cause:
the error names it, or the same prompt without a key is accepted afterwards (the driver
sends it so). The answer to a key outside 1 to 255 characters is recorded (info).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance import model
from conformance.checks.base import Rule, register
from conformance.checks.frames import FrameChecker
from conformance.checks.wire import short

USER_UPDATES = ("user_message", "user_message_chunk")
INVALID_PARAMS = -32602
MAX_KEY = 255


@dataclass
class _Submission:
    """The first attempt of one key in one session."""

    key: str
    text: str
    seq: int
    conn: int
    mid: str | None = None  # the messageId its response named
    answered: bool = False
    response_seq: int = -1


@dataclass
class _Attempt:
    session: str
    sub: _Submission
    seq: int
    conn: int
    retry: bool
    text: str
    pending_original: bool = False  # the first attempt was not answered yet


@dataclass
class _Session:
    subs: dict[str, _Submission] = field(default_factory=dict)
    retried: list[_Submission] = field(default_factory=list)  # keys retried, newest last
    watch: _Submission | None = None  # retried last, until the next new submission
    response_ids: set[str] = field(default_factory=set)  # IDs prompt responses named
    replay: list[tuple[str | None, str]] | None = None  # (ID, text) of an open replay
    replayed: set[str] = field(default_factory=set)  # user IDs any replay on a conn showed
    echoes: dict[str, list[Any]] = field(default_factory=dict)  # user ID -> echo contents


def _key(conn: int, request_id: Any) -> tuple[int, str, str]:
    return conn, type(request_id).__name__, repr(request_id)


def _names_key(err: dict[str, Any]) -> bool:
    """Whether an error's message or data names the idempotency key as what it refused."""
    return "idempotency" in (str(err.get("message")) + str(err.get("data"))).lower()


@register
class IdempotencyKeys(FrameChecker):
    quiet_repeats = True  # a repeat chunk continues a message already seen
    rules = (
        Rule("MID-V2-15/same-id"),
        Rule("MID-V2-15/pending-error"),
        Rule("MID-V2-15/not-retained"),
        Rule("MID-V2-15/one-insert"),
        Rule("MID-V2-15/repeated-echo"),
        Rule("MID-V2-15/one-replay"),
        Rule("MID-V2-15/distinct-keys"),
        Rule("MID-V2-15/rejected-key"),
        Rule("MID-V2-15/invalid-key"),
        Rule("MID-V2-15/conflict"),
    )

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        # the register names the profiles that grade these rules; the grader says why the
        # others do not
        self.on = self.rules[0].record.applies_under(self.profile.name)
        self.sessions: dict[str, _Session] = {}
        self.attempts: dict[tuple[int, str, str], _Attempt] = {}
        self.resumes: dict[tuple[int, str, str], str] = {}  # replaying resume -> session
        # a key outside 1 to 255 characters: request -> (session, key, seq)
        self.invalid: dict[tuple[int, str, str], tuple[str, str, int]] = {}
        # a prompt without a key: request -> (session, text, seq)
        self.unkeyed: dict[tuple[int, str, str], tuple[str, str, int]] = {}
        # a valid key refused with -32602 for no reason the error names: (session, text) ->
        # the evidence, until the same prompt without the key is accepted
        self.refused: dict[tuple[str, str], list[int]] = {}

    def _s(self, sid: str) -> _Session:
        s = self.sessions.get(sid)
        if s is None:
            s = self.sessions[sid] = _Session()
        return s

    def _client(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        params = model.as_object(msg.get("params"))
        sid = params.get("sessionId")
        if not isinstance(sid, str) or "id" not in msg:
            return
        method = msg.get("method")
        if method == "session/resume" and params.get("replayFrom") is not None:
            self.resumes[_key(conn, msg["id"])] = sid
            self._s(sid).replay = []
            return
        if method != "session/prompt":
            return
        key = params.get("idempotencyKey")
        text = model.blocks_text(params.get("prompt"))
        if key is None:
            self.unkeyed[_key(conn, msg["id"])] = (sid, text, seq)
            return
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY:
            self.invalid[_key(conn, msg["id"])] = (sid, key if isinstance(key, str) else "",
                                                   seq)
            return
        s = self._s(sid)
        sub = s.subs.get(key)
        retry = sub is not None
        if sub is None:
            sub = s.subs[key] = _Submission(key, text, seq, conn)
        elif text != sub.text:
            self.exercised("MID-V2-15/conflict")
            self.found("MID-V2-15/conflict", f"idempotencyKey {short(key)!r} comes again with "
                       "other content (no text says what happens)", key=(sid, key, seq),
                       entries=[sub.seq, seq], expected=short(sub.text), actual=short(text))
        if retry:
            s.retried.append(sub)
            s.watch = sub
        else:
            s.watch = None  # its echo is a new message
        self.attempts[_key(conn, msg["id"])] = _Attempt(sid, sub, seq, conn, retry, text,
                                                        pending_original=not sub.answered)

    def _response(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        rid = _key(conn, msg["id"])
        sid = self.resumes.pop(rid, None)
        if sid is not None:
            self._replay_ended(sid, seq)
            return
        if rid in self.invalid:
            self._invalid_answered(self.invalid.pop(rid), seq, msg)
            return
        if rid in self.unkeyed:
            self._unkeyed_answered(self.unkeyed.pop(rid), seq, msg)
            return
        at = self.attempts.pop(rid, None)
        if at is None:
            return
        s, sub = self._s(at.session), at.sub
        result = msg.get("result")
        mid = result.get("messageId") if isinstance(result, dict) else None
        if not at.retry:
            self.exercised("MID-V2-15/rejected-key")
            err = model.as_object(msg.get("error"))
            if err and err.get("code") == INVALID_PARAMS:
                if _names_key(err):
                    self._rejected(at.session, sub.key, err, [at.seq, seq])
                else:  # proven only when the same prompt without the key is accepted
                    self.refused[(at.session, sub.text)] = [at.seq, seq]
            if isinstance(mid, str):
                sub.mid, sub.answered, sub.response_seq = mid, True, seq
                self._distinct(s, at, sub, mid, seq)
                s.response_ids.add(mid)
            return
        if "error" in msg:
            if at.pending_original:
                self.exercised("MID-V2-15/pending-error")
                self.found("MID-V2-15/pending-error", "a retry sent while the original was "
                           "pending is answered with an error (unspecified)",
                           key=(at.session, sub.key), entries=[sub.seq, at.seq, seq],
                           actual="error")
                return
            self.exercised("MID-V2-15/same-id")
            self.found("MID-V2-15/same-id", "a retry of an inserted submission is answered "
                       "with an error, not the messageId of its message",
                       key=(at.session, sub.key), entries=[sub.response_seq, at.seq, seq],
                       expected=short(sub.mid), actual="error")
            return
        if not isinstance(mid, str) or sub.mid is None:
            return
        if mid == sub.mid:
            self.exercised("MID-V2-15/same-id")
            return
        if at.conn != sub.conn and sub.mid not in s.replayed:
            self.exercised("MID-V2-15/not-retained")
            self.found("MID-V2-15/not-retained", "a retry on a fresh process gets a new ID; "
                       "the replay did not keep the original, so the agent may not know it",
                       key=(at.session, sub.key), entries=[sub.response_seq, at.seq, seq],
                       expected=short(sub.mid), actual=short(mid))
            return
        self.exercised("MID-V2-15/same-id")
        self.found("MID-V2-15/same-id", f"a retry with idempotencyKey {short(sub.key)!r} is "
                   f"answered with ID {short(mid)!r}, not {short(sub.mid)!r}, the ID its first "
                   "attempt's response named", key=(at.session, sub.key),
                   entries=[sub.response_seq, at.seq, seq], expected=short(sub.mid),
                   actual=short(mid))

    def _rejected(self, sid: str, key: str, err: dict[str, Any], entries: list[int]) -> None:
        self.found("MID-V2-15/rejected-key", "a session/prompt with a valid idempotencyKey is "
                   f"refused ({err.get('code')} {short(str(err.get('message')), 60)})",
                   key=(sid, key), entries=entries, expected="the key honoured",
                   actual=err.get("code"))

    def _unkeyed_answered(self, asked: tuple[str, str, int], seq: int,
                          msg: dict[str, Any]) -> None:
        """A prompt without a key: when it is accepted and the same prompt with a key was
        refused with -32602, the key was what the agent refused."""
        sid, text, sent = asked
        evidence = self.refused.pop((sid, text), None)
        if evidence is None or "result" not in msg:
            return
        first = self.sessions.get(sid)
        key = next((k for k, sub in (first.subs if first else {}).items()
                    if sub.seq == evidence[0]), "")
        self._rejected(sid, key, {"code": INVALID_PARAMS, "message": "the same prompt "
                                  "without the key was accepted"}, [*evidence, sent, seq])

    def _invalid_answered(self, asked: tuple[str, str, int], seq: int,
                          msg: dict[str, Any]) -> None:
        """An empty or over-long key (outside 1 to 255 characters): the answer is recorded."""
        sid, key, sent = asked
        self.exercised("MID-V2-15/invalid-key")
        what = "an empty idempotencyKey" if not key else f"an idempotencyKey of {len(key)} " \
            "characters"
        err = model.as_object(msg.get("error"))
        result = model.as_object(msg.get("result"))
        answer = (f"refused ({err.get('code')})" if err else
                  f"accepted (messageId {short(str(result.get('messageId')))})")
        self.found("MID-V2-15/invalid-key", f"a session/prompt with {what} is {answer}",
                   key=(sid, sent), entries=[sent, seq], expected="1 to 255 characters",
                   actual=err.get("code") if err else "accepted")

    def _distinct(self, s: _Session, at: _Attempt, sub: _Submission, mid: str,
                  seq: int) -> None:
        """Two keys, one text: two messages with two IDs."""
        twins = [o for o in s.subs.values() if o is not sub and o.text == sub.text
                 and o.mid is not None]
        if not twins:
            return
        self.exercised("MID-V2-15/distinct-keys")
        for other in twins:
            if other.mid == mid:
                self.found("MID-V2-15/distinct-keys", f"two prompts with the same text and "
                           f"different keys get one ID {short(mid)!r}: one message for two "
                           "submissions", key=(at.session, mid),
                           entries=[other.seq, other.response_seq, at.seq, seq],
                           expected="two IDs", actual=short(mid))

    def _update(self, conn: int, seq: int, msg: dict[str, Any]) -> None:
        params = model.as_object(msg.get("params"))
        sid, update = params.get("sessionId"), model.as_object(params.get("update"))
        utype = update.get("sessionUpdate")
        if not isinstance(sid, str) or utype not in USER_UPDATES:
            return
        s = self.sessions.get(sid)
        if s is None:
            return
        mid = update.get("messageId")
        mid = mid if isinstance(mid, str) else None
        if s.replay is not None:
            text = (model.blocks_text(update.get("content")) if utype == "user_message"
                    else model.block_text(update.get("content")))
            if s.replay and utype == "user_message_chunk" and s.replay[-1][0] == mid:
                s.replay[-1] = (mid, s.replay[-1][1] + text)
            else:
                s.replay.append((mid, text))
            return
        if mid is None:
            return
        fresh = mid not in s.echoes
        seen = s.echoes.setdefault(mid, [])
        sub = s.watch
        if sub is None or sub.mid is None:
            seen.append(update.get("content"))
            return
        self.exercised("MID-V2-15/one-insert")
        self.exercised("MID-V2-15/repeated-echo")
        if mid == sub.mid and seen:
            if utype == "user_message" and update.get("content") == seen[-1]:
                self.found("MID-V2-15/repeated-echo", "a retry repeats the key's user_message "
                           "upsert, same ID and content", key=(sid, sub.key), entries=[seq],
                           actual=short(mid))
                return
            if utype == "user_message_chunk":
                self.found("MID-V2-15/one-insert", f"a retry appends the prompt again as "
                           f"chunks of the key's message {short(mid)!r}",
                           key=(sid, sub.key), entries=[sub.seq, seq],
                           expected="nothing inserted by a retry", actual=utype)
        elif mid != sub.mid and mid not in s.response_ids and fresh:
            self.found("MID-V2-15/one-insert", f"after a retry of idempotencyKey "
                       f"{short(sub.key)!r} a user message with a new ID {short(mid)!r} "
                       "arrives: a second insert for one key", key=(sid, sub.key),
                       entries=[sub.seq, seq], expected=f"only {short(sub.mid)!r}",
                       actual=short(mid))
        seen.append(update.get("content"))

    def _replay_ended(self, sid: str, seq: int) -> None:
        s = self._s(sid)
        replay, s.replay = s.replay or [], None
        s.replayed.update(m for m, _ in replay if m is not None)
        if not s.retried:
            return
        self.exercised("MID-V2-15/one-replay")
        texts = [t for _, t in replay]
        for sub in {id(x): x for x in s.retried}.values():
            same_text = [o for o in s.subs.values() if o.text == sub.text]
            if len(same_text) != 1:
                continue  # two keys, one text: two messages are right (distinct-keys)
            n = texts.count(sub.text)
            if n > 1:
                self.found("MID-V2-15/one-replay", f"the replay holds {n} user messages for "
                           f"the one submission of idempotencyKey {short(sub.key)!r}",
                           key=(sid, sub.key), entries=[sub.seq, seq],
                           expected="one user message", actual=n)
