"""Named mutations: each turns a valid stream into one that breaks exactly one rule.

A test helper (tests/test_fuzz_strategies.py): no fuzzer draws these (the client fuzzer
mutates chunks with :data:`conformance.strategies.MUTATIONS`), so they live beside the
tests that use them, not in the package.

Streams are the agent double's stream steps (:mod:`conformance.client.script`,
drawn by :func:`conformance.strategies.chunk_streams`). Valid generation
stays in ``strategies``; every function here takes a valid stream and returns a
new one that an *agent* must never send, with the rule its checker reports::

    with_numeric_id      a chunk's messageId is the number 42     MID-S-01/type (fail)
    with_null_id         a v2 chunk's messageId is null           MID-V2-01 (fail)
    with_missing_id      a v2 chunk has no messageId              MID-V2-01 (fail)
    with_empty_id        a message's ID is ""                     MID-S-01/empty-id (warn)
    with_long_id         a message's ID has 2000 characters       MID-S-01/long-id (warn)
    with_reused_id       a later message reuses an earlier ID     MID-A-02/interleave (v1 warn)
    with_split_message   every chunk of one message gets its own
                         ID while the text runs on                MID-A-03/id-per-chunk (warn)
    with_gap             X, no ID, X in one v1 message            MID-A-03/gap (warn)
    with_cross_kind_id   a thought takes an agent message's ID    MID-A-02/cross-kind-reuse (v1 warn)
    with_id_on_tool_call a tool call carries a messageId          MID-S-04/non-message-kind (warn)
    with_near_miss_key   "message_id" instead of "messageId"      MID-S-01/near-miss-key
    with_content_object  a v2 upsert's content is one block       MID-V2-02/content-shape (fail)
    with_upsert_without_id  a v2 upsert has no messageId          MID-V2-02/missing-id (fail)

The same streams, played *to a client*, are the malformed input it must survive.
:func:`broken_streams` draws a valid stream and one mutation that applies to the
protocol version. The tests show every mutation reachable from it and caught by
its checker, and nothing else newly broken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from conformance.profiles import DEFAULT_PROFILE
from conformance.requirements import load_grades
from conformance.results import Outcome

Step = dict[str, Any]
Stream = list[Step]
KINDS = ("user", "agent", "thought")


@dataclass(frozen=True)
class Mutation:
    name: str
    apply: Callable[[Stream, int], Stream]
    rule: dict[int, str]  # protocol -> the rule the agent checker reports
    also: dict[int, tuple[str, ...]]  # protocol -> rules the same fault trips on the way

    def applies_to(self, protocol: int) -> bool:
        return protocol in self.rule

    @property
    def breaks(self) -> dict[int, tuple[str, Outcome]]:
        """protocol -> (rule, grade): the grade is the register's, under the default
        profile (the fuzzer keeps no grade table of its own)."""
        grades = load_grades()
        return {p: (r, grades[r].of(DEFAULT_PROFILE, p)) for p, r in self.rule.items()}


# -- helpers --------------------------------------------------------------------------

def kind_of(step: Step) -> str | None:
    return next((k for k in KINDS if k in step), None)


def _chunk_indices(stream: Stream) -> list[int]:
    return [i for i, s in enumerate(stream) if kind_of(s) is not None]


def _ids(stream: Stream) -> set[Any]:
    return {s.get("id") for s in stream if "id" in s and isinstance(s.get("id"), str)}


def _fresh_id(stream: Stream, base: str) -> str:
    used = _ids(stream)
    n = 1
    while f"{base}{n}" in used:
        n += 1
    return f"{base}{n}"


def _text(n: int, end: str = ". ") -> str:
    return f"mut{n}{end}"


class _Texts:
    """Texts the mutation adds: unique in the stream and recognisable."""

    def __init__(self, stream: Stream) -> None:
        self.n = 0
        self.used = {str(s.get(k)) for s in stream for k in KINDS if k in s}

    def __call__(self, end: str = ". ") -> str:
        while True:
            self.n += 1
            text = _text(self.n, end)
            if text not in self.used:
                self.used.add(text)
                return text


def _first_message(stream: Stream) -> tuple[str, str] | None:
    """(kind, id) of the first chunk message with a string ID."""
    for s in stream:
        k = kind_of(s)
        if k is not None and isinstance(s.get("id"), str):
            return k, s["id"]
    return None


def _set_id(step: Step, value: Any, *, present: bool = True) -> Step:
    out = {k: v for k, v in step.items() if k not in ("id", "id_repeat")}
    if present:
        out["id"] = value
    return out


def _ensure_message(stream: Stream) -> tuple[Stream, str, str]:
    """The stream with at least one agent chunk message; its (kind, id)."""
    first = _first_message(stream)
    if first is not None:
        return list(stream), first[0], first[1]
    mid = _fresh_id(stream, "m")
    return [*stream, {"agent": _Texts(stream)(), "id": mid}], "agent", mid


# -- the mutations ----------------------------------------------------------------------

def with_numeric_id(stream: Stream, protocol: int) -> Stream:
    out = list(stream)
    i = _chunk_indices(out)
    if not i:
        return [*out, {"agent": _Texts(out)(), "id": 42}]
    out[i[0]] = _set_id(out[i[0]], 42)
    return out


def with_null_id(stream: Stream, protocol: int) -> Stream:
    out = list(stream)
    i = _chunk_indices(out)
    if not i:
        return [*out, {"agent": _Texts(out)(), "id": None}]
    out[i[0]] = _set_id(out[i[0]], None)
    return out


def with_missing_id(stream: Stream, protocol: int) -> Stream:
    out = list(stream)
    i = _chunk_indices(out)
    if not i:
        return [*out, {"agent": _Texts(out)()}]
    out[i[0]] = _set_id(out[i[0]], None, present=False)
    return out


def _rename(stream: Stream, kind: str, mid: str, new: str) -> Stream:
    out = []
    for s in stream:
        if s.get("id") == mid and (kind_of(s) == kind or s.get("upsert") == kind):
            s = _set_id(s, new)
        out.append(s)
    return out


def with_empty_id(stream: Stream, protocol: int) -> Stream:
    out, kind, mid = _ensure_message(stream)
    return _rename(out, kind, mid, "")


def with_long_id(stream: Stream, protocol: int) -> Stream:
    out, kind, mid = _ensure_message(stream)
    return _rename(out, kind, mid, "L" * 2000)


def with_reused_id(stream: Stream, protocol: int) -> Stream:
    """A, another message of the same kind, then A again: a second message under A's ID
    (or A's chunks interleaved with another message's; the wire cannot tell them apart)."""
    out, kind, mid = _ensure_message(stream)
    texts = _Texts(out)
    other = _fresh_id(out, "r")
    return [*out, {kind: texts(), "id": other}, {kind: texts(), "id": mid}]


def with_split_message(stream: Stream, protocol: int) -> Stream:
    """One message streamed as word fragments, each chunk under a new ID."""
    texts = _Texts(stream)
    out = list(stream)
    parts = [texts(" ") for _ in range(3)] + [texts()]
    for n, part in enumerate(parts):
        out.append({"agent": part, "id": _fresh_id(out, f"s{n}-")})
    return out


def with_gap(stream: Stream, protocol: int) -> Stream:
    """X, an ID-less chunk, X: one v1 message with a hole in its IDs."""
    texts = _Texts(stream)
    mid = _fresh_id(stream, "g")
    return [*stream, {"agent": texts(" "), "id": mid}, {"agent": texts(" ")},
            {"agent": texts(), "id": mid}]


def with_cross_kind_id(stream: Stream, protocol: int) -> Stream:
    out, kind, mid = _ensure_message(stream)
    other = "thought" if kind != "thought" else "agent"
    return [*out, {other: _Texts(out)(), "id": mid}]


def with_id_on_tool_call(stream: Stream, protocol: int) -> Stream:
    update = {"sessionUpdate": "tool_call_update" if protocol >= 2 else "tool_call",
              "toolCallId": "call-mutated", "title": "Read a file", "kind": "read",
              "status": "in_progress" if protocol >= 2 else "pending",
              "messageId": _fresh_id(stream, "t")}
    return [*stream, {"raw": update}]


def with_near_miss_key(stream: Stream, protocol: int) -> Stream:
    update = {"sessionUpdate": "agent_message_chunk", "message_id": _fresh_id(stream, "n"),
              "content": {"type": "text", "text": _Texts(stream)()}}
    return [*stream, {"raw": update}]


def with_content_object(stream: Stream, protocol: int) -> Stream:
    return [*stream, {"upsert": "agent", "id": _fresh_id(stream, "c"),
                      "content": {"type": "text", "text": _Texts(stream)()}}]


def with_upsert_without_id(stream: Stream, protocol: int) -> Stream:
    return [*stream, {"upsert": "agent", "content": [_Texts(stream)()]}]


# A chunk that loses its ID in a message that has IDs also leaves a hole in the message;
# when it is the only chunk of its kind in a session whose other kinds carry IDs, the kind
# never carries one (a drawn stream may have no other agent chunk: seen in a full run).
_HOLE = ("MID-A-03/mixed-presence", "MID-A-03/gap", "MID-A-05/partial-kinds")

MUTATIONS: dict[str, Mutation] = {m.name: m for m in (
    Mutation("with_numeric_id", with_numeric_id,
             {1: "MID-S-01/type", 2: "MID-S-01/type"},
             {1: _HOLE, 2: ("MID-V2-01",) + _HOLE}),
    Mutation("with_null_id", with_null_id, {2: "MID-V2-01"}, {2: _HOLE}),
    Mutation("with_missing_id", with_missing_id, {2: "MID-V2-01"}, {2: _HOLE}),
    Mutation("with_empty_id", with_empty_id,
             {1: "MID-S-01/empty-id", 2: "MID-S-01/empty-id"}, {}),
    Mutation("with_long_id", with_long_id,
             {1: "MID-S-01/long-id", 2: "MID-S-01/long-id"}, {}),
    Mutation("with_reused_id", with_reused_id, {1: "MID-A-02/interleave"}, {}),
    Mutation("with_split_message", with_split_message,
             {1: "MID-A-03/id-per-chunk", 2: "MID-A-03/id-per-chunk"}, {}),
    Mutation("with_gap", with_gap, {1: "MID-A-03/gap"}, {}),
    Mutation("with_cross_kind_id", with_cross_kind_id, {1: "MID-A-02/cross-kind-reuse"},
             {}),
    Mutation("with_id_on_tool_call", with_id_on_tool_call,
             {1: "MID-S-04/non-message-kind", 2: "MID-S-04/non-message-kind"}, {}),
    Mutation("with_near_miss_key", with_near_miss_key,
             {1: "MID-S-01/near-miss-key", 2: "MID-S-01/near-miss-key"},
             {1: _HOLE, 2: ("MID-V2-01",) + _HOLE}),
    Mutation("with_content_object", with_content_object, {2: "MID-V2-02/content-shape"},
             {}),
    Mutation("with_upsert_without_id", with_upsert_without_id,
             {2: "MID-V2-02/missing-id"}, {}),
)}


def broken_streams(*, protocol: int, mutations: Sequence[str] | None = None,
                   max_messages: int = 4) -> Any:
    """A valid plain-ID stream with one named mutation applied (as ``(name, stream)``).
    Shrinks towards the first mutation on a one-message stream."""
    from hypothesis import strategies as st
    from hypothesis.errors import InvalidArgument

    from conformance.strategies import chunk_streams

    names = tuple(mutations) if mutations is not None else tuple(
        n for n, m in MUTATIONS.items() if m.applies_to(protocol))
    unknown = [n for n in names if n not in MUTATIONS]
    if unknown:
        raise InvalidArgument(f"unknown mutation(s) {unknown} (known: {', '.join(MUTATIONS)})")
    inapplicable = [n for n in names if not MUTATIONS[n].applies_to(protocol)]
    if inapplicable or not names:
        raise InvalidArgument(f"mutation(s) {inapplicable or names} do not apply to "
                              f"protocol v{protocol}")
    streams = chunk_streams(protocol=protocol, max_messages=max_messages, attacks=False)
    return st.tuples(st.sampled_from(names), streams).map(
        lambda ns: (ns[0], MUTATIONS[ns[0]].apply(ns[1], protocol)))


__all__ = ["MUTATIONS", "Mutation", "broken_streams"] + [m for m in MUTATIONS]
