"""The name a reference target or one of its variants gives in ``initialize``.

Every broken fixture is the reference agent or client with one method overridden, so
without this each would call itself the reference, and a report or a merged matrix of
a broken run would read "acp-conformance-reference-agent: FAIL". The reference class
keeps the reference's name unless a fixture file runs it; a variant names itself,
from (first found):

* the fixture file it runs from (the reference class too) (``fixtures/agents/per_turn_counter.py`` ->
  ``acp-conformance-broken-agent-per-turn-counter``; "broken" when the file's first
  line says it breaks a rule, "fixture" for the positive controls);
* its class's own ``NAME`` (the bundled broken agent and client of ``demo --broken``);
* its class name (``V1OnlyAgent`` -> ``acp-conformance-fixture-agent-v1-only``).

Standard library only, and cheap: it runs in every target process the suite starts (the
modules it needs are those a target has already loaded: ``pathlib`` would add about a
tenth of a fixture agent's start-up, paid by every case).
"""

from __future__ import annotations

import os
import sys

# No ``re`` either: it and the ``enum`` module it loads were a sixth of a fixture
# agent's start-up, and these few patterns read as plainly without it.
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_LOWER_OR_DIGIT = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def says_broken(doc: str) -> bool:
    """Whether a fixture's docstring starts by saying it breaks a rule ("Breaks MID-..."
    or "Broken ...", any case; "Breaks nothing" is a positive control)."""
    text = doc.lstrip()
    for quote in ('"""', "'''"):
        if text.startswith(quote):
            text = text[3:].lstrip()
            break
    head = text[:16].lower()
    if head.startswith("breaks "):
        return not head[7:].startswith("nothing")
    return head.startswith("broken") and text[6:7] not in _WORD


def advertised_name(cls: type, reference: type, reference_name: str, role: str) -> str:
    """``reference_name`` for ``reference`` itself, else the variant's own name."""
    main = sys.modules.get("__main__")
    path = str(getattr(main, "__file__", "") or "")
    stem, suffix = os.path.splitext(os.path.basename(path))
    if suffix == ".py" and "fixtures" in path.replace("\\", "/").split("/")[:-1]:
        kind = "broken" if says_broken(str(getattr(main, "__doc__", "") or "")) else "fixture"
        return f"acp-conformance-{kind}-{role}-{stem.replace('_', '-')}"
    if cls is reference:
        return reference_name
    own = cls.__dict__.get("NAME")
    if isinstance(own, str) and own:
        return own
    words = cls.__name__
    for ending in ("Agent", "Client"):
        if words.endswith(ending):
            words = words[:-len(ending)]
            break
    # a dash where a lower-case letter or digit meets a capital: V1OnlyAgent -> v1-only
    slug = "".join("-" + c if i and "A" <= c <= "Z" and words[i - 1] in _LOWER_OR_DIGIT
                   else c for i, c in enumerate(words)).lower() or "variant"
    return f"acp-conformance-fixture-{role}-{slug}"
