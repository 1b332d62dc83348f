"""Hypothesis strategies for message identity: IDs and the streams an agent plays.

House style: plural nouns, keyword-only options validated when the strategy is
built (not when it is drawn), valid generation kept apart from named
mutations, nasty values reachable while shrinking heads for plain ones.

* :func:`message_ids` - opaque ID strings, plain or from the opacity attack set.
* :func:`id_families` - groups of distinct IDs that a normalising, trimming,
  case-folding or number-parsing client would wrongly treat as one.
* :func:`chunk_streams` - one turn's worth of agent output as stream steps
  (the ``stream`` step format of client cases, see
  :mod:`conformance.client.script`): several messages, consecutive messages
  of one kind, thoughts, tool calls between chunks of a message, and in v2
  whole-message upserts mixed with chunks. Every message has its own
  ``(kind, id)``; every text is unique and recognisable (``w3. ``).
* :func:`mutated_chunk_streams` - a valid stream with one named mutation
  (:data:`MUTATIONS`) applied to one chunk.
* :func:`example_streams` - deterministic examples for a seed, for the client
  suite's generated turns.
* :func:`model_scripts` - what an LLM-backed agent's model says, per turn and
  per request (:mod:`conformance.modelserver.script` data): reasoning or not,
  text parts, tool calls between them, chunk sizes and pauses, and the
  provider's item IDs (:data:`ITEM_ID_FORMS`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from conformance.modelserver.apis.base import HARMLESS_TOOLS

Step = dict[str, Any]
KINDS = ("user", "agent", "thought")

_UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"
#: Families of distinct IDs that look alike to a client that transforms IDs (MID-C-02).
OPACITY_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("msg-a1", "MSG-A1", "Msg-A1"),  # case
    (_UUID, _UUID.upper()),  # UUID-looking, in two cases
    ("m1", "m1 ", " m1", "m1\t"),  # leading / trailing whitespace
    ("caf\u00e9", "cafe\u0301"),  # NFC vs NFD
    ("\u210c1", "H1"),  # compatibility normalisation (NFKC)
    ("1", "01", "1.0", "001"),  # leading zeros, numeric-looking
    ("42", "4.2e1", "042"),  # numeric-looking
)
#: Single IDs that are hazardous on their own (MID-C-02, C-13).
HAZARD_IDS: tuple[str, ...] = (
    "__proto__", "constructor", "toString", "hasOwnProperty", "null", "undefined",
    "",  # the empty string is a real ID (MID-C-06)
    "x" * 65536,  # 64 KiB
    "\U0001f600\U0001f601",  # non-BMP
    "a\nb", "a\u0000b", "a\u2028b", "\u001b[31mred",  # escaped control characters
)
ATTACK_IDS: tuple[str, ...] = tuple(i for f in OPACITY_FAMILIES for i in f) + HAZARD_IDS

MUTATIONS: dict[str, Callable[[Step], Step]] = {
    "omit-id": lambda s: {k: v for k, v in s.items() if k not in ("id", "id_repeat")},
    "null-id": lambda s: {**_without_id(s), "id": None},
    "number-id": lambda s: {**_without_id(s), "id": 42},
    "bool-id": lambda s: {**_without_id(s), "id": True},
    "object-id": lambda s: {**_without_id(s), "id": {"id": "x"}},
    "array-id": lambda s: {**_without_id(s), "id": ["x"]},
    "empty-id": lambda s: {**_without_id(s), "id": ""},
}


def _without_id(step: Step) -> Step:
    return {k: v for k, v in step.items() if k not in ("id", "id_repeat")}


def _check_int(name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InvalidArgument(f"{name}={value!r} must be an integer >= {low}")


def _plain_ids() -> st.SearchStrategy[str]:
    return st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)


def message_ids(*, attacks: bool = True) -> st.SearchStrategy[str]:
    """Opaque message IDs; with ``attacks``, members of the attack set are reachable.

    Shrinks towards short lowercase IDs."""
    if not isinstance(attacks, bool):
        raise InvalidArgument(f"attacks={attacks!r} must be a bool")
    plain = _plain_ids()
    return st.one_of(plain, st.sampled_from(ATTACK_IDS)) if attacks else plain


def id_families() -> st.SearchStrategy[tuple[str, ...]]:
    """One family of distinct IDs that a transforming client would conflate."""
    return st.sampled_from(OPACITY_FAMILIES)


def _step_with_id(kind: str, text: str, mid: str) -> Step:
    if len(mid) > 1024 and len(set(mid)) == 1:  # keep big IDs readable in recorded steps
        return {kind: text, "id_repeat": {"text": mid[0], "times": len(mid)}}
    return {kind: text, "id": mid}


@st.composite
def _streams(draw: Any, protocol: int, min_messages: int, max_messages: int, max_chunks: int,
             kinds: tuple[str, ...], tool_calls: bool, upserts: bool, attacks: bool,
             text_prefix: str, interleave: bool = False, patches: bool = False) -> list[Step]:
    n = draw(st.integers(min_messages, max_messages))
    pool: list[str] = []
    if attacks:
        pool += list(draw(id_families()))
        pool += draw(st.lists(st.sampled_from(HAZARD_IDS), max_size=2, unique=True))
    pool += draw(st.lists(_plain_ids(), min_size=n, max_size=n, unique=True))
    # One ID names one message: an attack family and the hazard list may share an ID
    # (``undefined``), and a shared ID across kinds is a cross-kind reuse, not a valid stream.
    ids = draw(st.permutations(list(dict.fromkeys(pool))))
    counter = [0]

    def text() -> str:
        counter[0] += 1
        return f"{text_prefix}w{counter[0]}. "

    def upsert(kind: str, mid: str) -> Step:
        if patches:  # v2 patch semantics: replace, clear (null or []), or _meta only
            form = draw(st.sampled_from(("replace", "null", "empty", "meta-only")))
            if form == "null":
                return {"upsert": kind, "id": mid, "content": None}
            if form == "empty":
                return {"upsert": kind, "id": mid, "content": []}
            if form == "meta-only":
                return {"upsert": kind, "id": mid, "meta": {"rev": counter[0]}}
        return {"upsert": kind, "id": mid, "content": [text()]}

    groups: list[list[Step]] = []  # one message's steps each, in order
    used: set[tuple[str, str]] = set()
    for mid in ids:
        if len(used) == n:
            break
        kind = draw(st.sampled_from(kinds))
        used.add((kind, mid))
        steps: list[Step] = []
        if upserts and draw(st.booleans()):
            steps.append(upsert(kind, mid))
        chunks = draw(st.integers(1, max_chunks))
        for c in range(chunks):
            steps.append(_step_with_id(kind, text(), mid))
            if tool_calls and c < chunks - 1 and draw(st.booleans()):
                steps.append({"tool_call": f"Tool {counter[0]}"})
        if upserts and draw(st.booleans()):
            steps.append(upsert(kind, mid))
        groups.append(steps)
    if not interleave:
        return [step for group in groups for step in group]
    # Interleave the messages, each keeping its own order; shrinks to one after another.
    out: list[Step] = []
    pending = [g for g in groups if g]
    while pending:
        i = draw(st.integers(0, len(pending) - 1))
        out.append(pending[i].pop(0))
        pending = [g for g in pending if g]
    return out


def chunk_streams(*, protocol: int = 1, min_messages: int = 1, max_messages: int = 6,
                  max_chunks: int = 3, kinds: Sequence[str] = ("agent", "thought"),
                  tool_calls: bool = True, upserts: bool | None = None,
                  attacks: bool = True, text_prefix: str = "", interleave: bool = False,
                  patches: bool = False) -> st.SearchStrategy[list[Step]]:
    """Valid streams of one turn (stream steps), IDs from the opacity attack set.

    ``upserts`` (v2 only) defaults to on in v2. ``interleave`` (v2 only, for
    profiles that allow it) lets the steps of different messages interleave,
    each message keeping its own order. ``patches`` (needs upserts) draws the v2
    patch forms of an upsert: replace, clear with ``null`` or ``[]``, or change
    only ``_meta``. Shrinks towards one message of one plain-ID chunk."""
    if protocol not in (1, 2):
        raise InvalidArgument(f"protocol={protocol!r} must be 1 or 2")
    _check_int("min_messages", min_messages, 1)
    _check_int("max_messages", max_messages, min_messages)
    _check_int("max_chunks", max_chunks, 1)
    kinds = tuple(kinds)
    if not kinds or any(k not in KINDS for k in kinds):
        raise InvalidArgument(f"kinds={kinds!r} must be a non-empty subset of {KINDS}")
    if upserts is None:
        upserts = protocol >= 2
    if upserts and protocol < 2:
        raise InvalidArgument("upserts=True needs protocol=2: whole-message updates are v2 only")
    if "\n" in text_prefix or "\r" in text_prefix:
        raise InvalidArgument("text_prefix must be one line")
    if interleave and protocol < 2:
        raise InvalidArgument("interleave=True needs protocol=2: v1 messages run one after "
                              "another")
    if patches and not upserts:
        raise InvalidArgument("patches=True needs upserts (protocol=2)")
    return _streams(protocol, min_messages, max_messages, max_chunks, kinds, tool_calls,
                    bool(upserts), attacks, text_prefix, interleave, patches)


def mutate(stream: list[Step], name: str, index: int) -> list[Step]:
    """Apply mutation ``name`` to the ``index``-th chunk step (modulo the chunk count)."""
    if name not in MUTATIONS:
        raise InvalidArgument(f"unknown mutation {name!r} (known: {', '.join(MUTATIONS)})")
    chunks = [i for i, s in enumerate(stream) if any(k in s for k in KINDS)]
    if not chunks:
        return list(stream)
    out = list(stream)
    at = chunks[index % len(chunks)]
    out[at] = MUTATIONS[name](out[at])
    return out


def mutated_chunk_streams(streams: st.SearchStrategy[list[Step]], *,
                          mutations: Sequence[str] = tuple(MUTATIONS)
                          ) -> st.SearchStrategy[list[Step]]:
    """A stream from ``streams`` with one named mutation applied to one chunk."""
    names = tuple(mutations)
    if not names or any(m not in MUTATIONS for m in names):
        raise InvalidArgument(f"mutations={names!r} must name entries of MUTATIONS")
    return st.builds(mutate, streams, st.sampled_from(names), st.integers(0, 1000))


def example_streams(*, protocol: int, seed: int, count: int = 1,
                    text_prefix: str = "") -> list[list[Step]]:
    """``count`` streams for ``seed``, the same on every run (the client suite's generated
    turns). Among the first examples Hypothesis draws, the richest are taken."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    _check_int("count", count, 1)
    drawn: list[list[Step]] = []

    @with_seed(seed)
    @settings(max_examples=count + 9, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(chunk_streams(protocol=protocol, min_messages=3, max_messages=6,
                         text_prefix=text_prefix))
    def collect(stream: list[Step]) -> None:
        drawn.append(stream)

    collect()
    ranked = sorted(range(len(drawn)), key=lambda i: (-_richness(drawn[i]), i))
    return [drawn[i] for i in sorted(ranked[:count])]


def _richness(stream: list[Step]) -> int:
    ids = [s.get("id") for s in stream if "id" in s]
    related = sum(1 for a in ids for b in ids if isinstance(a, str) and isinstance(b, str)
                  and a != b and (a.casefold() == b.casefold() or a.strip() == b.strip()
                                  or unicodedata.normalize("NFKC", a) ==
                                  unicodedata.normalize("NFKC", b)))
    kinds = {k for s in stream for k in KINDS if k in s}
    return len(stream) + 3 * related + 2 * len(kinds) + 2 * sum("tool_call" in s for s in stream)


#: How a provider item ID is drawn, simplest first (shrinking heads for "fresh").
ITEM_ID_FORMS = ("fresh", "earlier-turn", "this-turn", "reasoning", "empty", "long",
                 "look-alike")
LONG_ID_LENGTH = 2048


def _look_alike(mid: str, how: int) -> str:
    """A different ID that a careless agent or client could take for ``mid``."""
    return (mid.upper(), mid + " ", mid.replace("_", "-"))[how % 3]


@st.composite
def _model_scripts(draw: Any, turns: int, max_rounds: int, max_texts: int,
                   tools: tuple[str, ...], reasoning: bool, pauses: bool) -> dict[str, Any]:
    fresh = [0]
    earlier: list[str] = []  # item IDs of earlier turns
    responses: list[str] = []

    def new(prefix: str) -> str:
        fresh[0] += 1
        return f"{prefix}_{fresh[0]}"

    def item_id(prefix: str, this_turn: list[str], reasoning_id: str | None) -> str:
        form = draw(st.sampled_from(ITEM_ID_FORMS), label="item id")
        pools = {"earlier-turn": earlier, "this-turn": this_turn,
                 "reasoning": [reasoning_id] if reasoning_id else [],
                 "look-alike": earlier + this_turn}
        if form == "empty":
            return ""
        if form == "long":
            return new(prefix) + "x" * LONG_ID_LENGTH
        pool = [i for i in pools.get(form, []) if i]
        if not pool:
            return new(prefix)
        chosen: str = draw(st.sampled_from(pool), label="repeated id")
        if form == "look-alike":
            return _look_alike(chosen, draw(st.integers(0, 2)))
        return chosen

    def text_part(key: str, prefix: str, text: str, this_turn: list[str],
                  reasoning_id: str | None) -> dict[str, Any]:
        part: dict[str, Any] = {key: text, "id": item_id(prefix, this_turn, reasoning_id)}
        chunks = draw(st.one_of(st.none(), st.integers(1, 6)), label="chunks")
        if chunks is not None:
            part["chunks"] = chunks
        this_turn.append(part["id"])
        return part

    def tool_part() -> dict[str, Any]:
        # The first of ``names`` from a drawn one on that the agent declared: the same
        # script picks among any agent's tools, whichever it declares.
        names = tools or tuple(name for name, _ in HARMLESS_TOOLS)
        k = draw(st.integers(0, len(names) - 1), label="tool")
        return {"tool": {"choose": list(names[k:] + names[:k])}}

    drawn_turns = []
    for t in range(1, draw(st.integers(1, turns), label="turns") + 1):
        this_turn: list[str] = []
        replies = []
        rounds = draw(st.integers(1, max_rounds), label="rounds")
        for r in range(rounds):
            say: list[dict[str, Any]] = []
            reasoning_id = None
            if reasoning and draw(st.booleans(), label="reasoning"):
                say.append(text_part("reasoning", "rs", f"Thinking about turn {t}.", this_turn,
                                     None))
                reasoning_id = say[-1]["id"]
            texts = draw(st.integers(1, max_texts), label="texts")
            for k in range(texts):
                if k and r < rounds - 1 and draw(st.booleans(), label="tool between"):
                    say.append(tool_part())
                say.append(text_part("text", "msg", f"Turn {t}, reply {r + 1}, part {k + 1}.",
                                     this_turn, reasoning_id))
            if r < rounds - 1:  # the turn goes on only after a tool call
                say.append(tool_part())
            reply: dict[str, Any] = {"say": say}
            rid = draw(st.sampled_from(("fresh", "repeat", "empty")), label="response id")
            reply["id"] = ("" if rid == "empty" else
                           draw(st.sampled_from(responses)) if rid == "repeat" and responses
                           else new("resp"))
            responses.append(reply["id"])
            if pauses:
                pace = draw(st.sampled_from((0.0, 0.005, 0.02)), label="pause")
                if pace:
                    reply["pace"] = pace
            replies.append(reply)
        earlier.extend(this_turn)
        drawn_turns.append(replies)
    return {"format": 1, "description": "drawn by the fuzzer",
            "replies": [{"say": [{"text": "Done."}]}], "turns": drawn_turns}


def model_scripts(*, turns: int = 3, max_rounds: int = 2, max_texts: int = 3,
                  tools: Sequence[str] = (), reasoning: bool = True,
                  pauses: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """Model scripts (the data form of :mod:`conformance.modelserver.script`): per user
    turn up to ``max_rounds`` requests, each an optional reasoning item and up to
    ``max_texts`` text items with tool calls between them (the first tool the agent
    declared of ``tools``, from a drawn one on; default: the model server's harmless
    tools, so a call never does harm), every item with a
    provider ID drawn from :data:`ITEM_ID_FORMS` (fresh, repeated from an earlier turn
    or this one, the reasoning item's, empty, very long, or a look-alike of an earlier
    one), streamed in drawn chunk sizes and pauses. A turn past ``turns`` gets a plain
    text with a fresh ID. Shrinks towards one turn of one text with fresh IDs."""
    _check_int("turns", turns, 1)
    _check_int("max_rounds", max_rounds, 1)
    _check_int("max_texts", max_texts, 1)
    tools = tuple(tools)
    if any(not isinstance(t, str) or not t for t in tools):
        raise InvalidArgument(f"tools={tools!r} must be tool names")
    for name, value in (("reasoning", reasoning), ("pauses", pauses)):
        if not isinstance(value, bool):
            raise InvalidArgument(f"{name}={value!r} must be a bool")
    return _model_scripts(turns, max_rounds, max_texts, tools, reasoning, pauses)
