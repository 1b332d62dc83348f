"""Strategies for the client side of agent fuzzing: what the suite sends an agent.

House style: plural nouns, keyword-only options validated when the strategy is
built (not when it is drawn), valid values only; nasty values are reachable but
everything shrinks towards the plainest prompt ("Reply with two separate
messages.", one text block, no legacy ID, no cancel).

* :func:`prompt_texts` - what the prompt asks for: the scripted intents of the
  catalogue (B.5) first, then free text.
* :func:`content_blocks` - one content block (text, resource link, embedded
  resource, image), valid against the official schemas.
* :func:`prompt_blocks` - the content blocks of one prompt, limited to what the
  agent advertised (text and resource links always; embedded resources and
  images only with the matching prompt capability).
* legacy IDs an outdated client puts into a prompt (catalogue Appendix E), for
  the MID-A-01 probes, come from :func:`~conformance.strategies.message_ids`.
* :func:`prompt_specs` - one ``prompt`` step of the agent state machine.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from hypothesis import strategies as st

from conformance.agent.steps import LONG_TEXT, PLAIN_TEXT
from conformance.strategies import message_ids

# Intents every agent understands in some way (catalogue B.5). The reference agent
# answers "long" with a long, cancellable reply; other agents just write more.
SCRIPTED_TEXTS = (
    PLAIN_TEXT,
    "Read a file in the working directory, then summarise it.",
    "Say hello twice, as two separate messages.",
)
LONG_TEXTS = (LONG_TEXT,)
_LONG_WORD = re.compile(r"\blong\b", re.IGNORECASE)
BLOCK_KINDS = ("text", "resource_link", "resource", "image")
BASELINE_KINDS = ("text", "resource_link")  # every agent must take these in a prompt
MAX_CANCEL_AFTER = 12

# A 1x1 transparent PNG, for agents that advertise image prompts.
_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVO"
        "RK5CYII=")


# Every character UTF-8 can encode: all but the surrogates, which are exactly category Cs.
# The same characters, so the same draws, as ``characters(codec="utf-8")`` (also
# ``from_regex``'s default alphabet), whose table Hypothesis builds by encoding every code
# point: about 1.5 s of CPU in each process whose Hypothesis folder (``--out``) has no
# cached copy yet, where this costs a few milliseconds.
_UTF8 = st.characters(exclude_categories=["Cs"])


def _free_texts(max_size: int) -> st.SearchStrategy[str]:
    # Any Unicode but lone surrogates (a prompt must be valid UTF-8 on the wire), never
    # the word "long", which would ask for a long reply without a cancel to end it.
    return st.text(_UTF8, min_size=1, max_size=max_size).filter(
        lambda t: not _LONG_WORD.search(t))


def prompt_texts(*, long: bool = False, max_size: int = 40) -> st.SearchStrategy[str]:
    """The text a prompt asks with. ``long=True`` puts the long-reply intents first."""
    if max_size < 1:
        raise ValueError(f"max_size={max_size} must be at least 1")
    scripted = LONG_TEXTS + SCRIPTED_TEXTS if long else SCRIPTED_TEXTS
    return st.one_of(st.sampled_from(scripted), _free_texts(max_size))


def _names() -> st.SearchStrategy[str]:
    return st.from_regex(r"[a-z][a-z0-9_-]{0,11}", fullmatch=True, alphabet=_UTF8)


def _check_kinds(kinds: tuple[str, ...]) -> None:
    unknown = [k for k in kinds if k not in BLOCK_KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown content block kind(s) {unknown or kinds} "
                         f"(known: {BLOCK_KINDS})")


def content_blocks(*, kinds: tuple[str, ...] = BLOCK_KINDS) -> st.SearchStrategy[dict[str, Any]]:
    """One content block of the given ``kinds``, valid against the official schemas:
    text, a resource link, an embedded text resource, or an image. Shrinks to text."""
    _check_kinds(kinds)
    options: list[st.SearchStrategy[dict[str, Any]]] = []
    if "text" in kinds:
        options.append(_free_texts(20).map(lambda t: {"type": "text", "text": t}))
    if "resource_link" in kinds:
        options.append(_names().map(lambda n: {"type": "resource_link", "name": n,
                                               "uri": f"file:///project/{n}.txt"}))
    if "resource" in kinds:
        options.append(st.tuples(_names(), _free_texts(20)).map(
            lambda nt: {"type": "resource", "resource": {
                "uri": f"file:///project/{nt[0]}.txt", "mimeType": "text/plain",
                "text": nt[1]}}))
    if "image" in kinds:
        options.append(st.just({"type": "image", "mimeType": "image/png", "data": _PNG}))
    return st.one_of(options)


def prompt_blocks(*, text: str, kinds: tuple[str, ...] = BASELINE_KINDS,
                  max_extra: int = 2) -> st.SearchStrategy[list[dict[str, Any]]]:
    """The blocks of one prompt: a text block with ``text``, then up to ``max_extra``
    :func:`content_blocks` of the allowed ``kinds``."""
    _check_kinds(kinds)
    if "text" not in kinds:
        raise ValueError("kinds must include 'text' (every prompt starts with its text)")
    if max_extra < 0:
        raise ValueError(f"max_extra={max_extra} must not be negative")
    first = {"type": "text", "text": text}
    return st.lists(content_blocks(kinds=kinds), max_size=max_extra).map(
        lambda more: [first, *more])


def prompt_specs(*, kinds: tuple[str, ...] = BASELINE_KINDS,
                 cancel: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """One ``prompt`` step: its text and blocks, an optional legacy ID in the params or
    in ``_meta``, and with ``cancel=True`` a cancel after that many updates of the turn
    (0: right after the request), asking for a long reply first.
    Shrinks to ``{"text": "Reply with two separate messages."}``."""
    return _prompt_specs(tuple(kinds), cancel)


@functools.cache
def _prompt_specs(kinds: tuple[str, ...], cancel: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Built once per (kinds, cancel), with every inner strategy built here too: building
    a strategy (a regex's above all) costs far more than drawing from it, and a run
    draws a prompt at every step. The draws are those of :func:`prompt_blocks`."""
    prompt_blocks(text="x", kinds=kinds)  # validate the options now
    texts = {long: prompt_texts(long=long) for long in (False, True)}
    extra = st.lists(content_blocks(kinds=kinds), max_size=2)
    ids = message_ids()

    @st.composite
    def build(draw: Any) -> dict[str, Any]:
        cancel_after = draw(st.integers(0, MAX_CANCEL_AFTER)) if cancel else None
        text = draw(texts[cancel_after is not None])
        spec: dict[str, Any] = {"text": text}
        blocks = [{"type": "text", "text": text}, *draw(extra)]
        if len(blocks) > 1:
            spec["blocks"] = blocks
        where = draw(st.sampled_from((None, None, "params", "meta")))
        if where is not None:
            key = "legacy_message_id" if where == "params" else "meta_message_id"
            spec[key] = draw(ids)  # what an outdated client made up
        if cancel_after is not None:
            spec["cancel_after"] = cancel_after
        return spec

    return build()
