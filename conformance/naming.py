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
import re
import sys

_BROKEN = re.compile(r'^\s*(?:"""|\'\'\')?\s*(?:Breaks (?!nothing)|Broken\b)', re.IGNORECASE)


def advertised_name(cls: type, reference: type, reference_name: str, role: str) -> str:
    """``reference_name`` for ``reference`` itself, else the variant's own name."""
    main = sys.modules.get("__main__")
    path = str(getattr(main, "__file__", "") or "")
    stem, suffix = os.path.splitext(os.path.basename(path))
    if suffix == ".py" and "fixtures" in re.split(r"[\\/]", path)[:-1]:
        kind = "broken" if _BROKEN.match(str(getattr(main, "__doc__", "") or "")) else "fixture"
        return f"acp-conformance-{kind}-{role}-{stem.replace('_', '-')}"
    if cls is reference:
        return reference_name
    own = cls.__dict__.get("NAME")
    if isinstance(own, str) and own:
        return own
    words = re.sub(r"(Agent|Client)$", "", cls.__name__)
    slug = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", words).lower() or "variant"
    return f"acp-conformance-fixture-{role}-{slug}"
