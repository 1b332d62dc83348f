"""Masking: the values of secrets never reach a file or a console line the suite writes.

A :class:`Masker` is built once per run from the options and the environment
(:func:`build`) and handed down explicitly to what records text: the transcript
(every line and harness event as it is recorded, its header as it is written),
the model server's request log, the fuzzer's printouts and regression files, and
the run's result before any report is written. Every occurrence of a value is
replaced by ``***``, the same way everywhere in a run, so a message ID that held
a secret (``m-***``) still equals itself and ``check`` on the masked transcripts
grades what the live run graded.

Which values (see docs/masking.md):

- ``--agent-env`` / ``--client-env`` entries and ``--agent-config`` template
  entries whose name looks secret (:func:`secret_name`);
- variables of the suite's own environment whose name looks secret (the target
  inherits them);
- every ``--mask VALUE`` and the value of every variable named by ``--mask-env``.

A value shorter than :data:`MIN_LENGTH` characters is never masked: ``***`` in
place of every ``1`` or ``yes`` would make evidence unreadable and protect
nothing. Standard library only: the transport and the transcript import it.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
MIN_LENGTH = 6
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASS", "AUTH", "CREDENTIAL", "COOKIE",
                "SESSION")
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# name = value, name: value, "name": "value", NAME=value: the entries of a config template
_CONFIG_ENTRY = re.compile(
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)["']?\s*[:=]\s*(?P<q>["']?)(?P<value>[^"'\s,;}\]#]+)""")


_WORD_FORMS = frozenset(("PASSWD", "PASSPHRASE", "AUTHORIZATION", "SESSIONID", "APIKEY"))


def secret_name(name: str) -> bool:
    """A name looks secret when one of its word parts (split at ``_ - .`` and camelCase),
    case-insensitively, is one of :data:`SECRET_WORDS` or its plural, ends with one
    (``APIKEY``, ``GHTOKEN``), or is a usual longer form (``PASSWD``, ``PASSPHRASE``,
    ``AUTHORIZATION``, ``SESSIONID``): ``MY_API_KEY``, ``githubToken``, ``DB_PASSWORD``,
    ``SESSION_COOKIE``; not ``KEYBOARD_LAYOUT`` or ``GIT_AUTHOR_NAME``."""
    for part in _WORD_SPLIT.split(name):
        upper = part.upper()
        if upper in _WORD_FORMS or any(upper.endswith(w) or upper == w + "S"
                                       for w in SECRET_WORDS):
            return True
    return False


def _variants(value: str) -> set[str]:
    """The forms a value takes in what is recorded: as is, JSON-escaped (with and without
    ``\\u`` escapes, ``/`` escaped or not), HTML-escaped."""
    forms = {value, html.escape(value, quote=True), html.escape(value, quote=False)}
    for ascii_only in (False, True):
        escaped = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        forms.update((escaped, escaped.replace("/", "\\/")))
    return {f for f in forms if len(f) >= MIN_LENGTH}


class Masker:
    """Replaces the values it was built with by ``***`` in text, bytes and JSON data.

    Immutable once built; safe to share between threads. An empty masker (no value,
    or ``--no-mask``) leaves everything as it is.
    """

    __slots__ = ("_byte_forms", "_bytes", "_forms", "_text", "count", "enabled")

    def __init__(self, values: Iterable[str] = (), *, enabled: bool = True) -> None:
        kept = sorted({v for v in values if len(v) >= MIN_LENGTH}) if enabled else []
        self.enabled = enabled
        self.count = len(kept)
        forms = sorted({f for v in kept for f in _variants(v)}, key=lambda f: (-len(f), f))
        self._forms = tuple(forms)
        self._text = re.compile("|".join(map(re.escape, forms))) if forms else None
        self._byte_forms = tuple(f.encode("utf-8", "surrogatepass") for f in forms)
        self._bytes = re.compile(b"|".join(map(re.escape, self._byte_forms))) if forms else None

    def __bool__(self) -> bool:
        return self._text is not None

    # A plain substring search per form first: most lines hold no secret, and ``in`` is
    # far faster than the alternation on a long line.
    def text(self, s: str) -> str:
        if self._text is None or not any(f in s for f in self._forms):
            return s
        return self._text.sub(MASK, s)

    def bytes(self, b: bytes) -> bytes:
        if self._bytes is None or not any(f in b for f in self._byte_forms):
            return b
        return self._bytes.sub(MASK.encode(), b)

    def data(self, obj: Any) -> Any:
        """A copy of JSON-like data (dicts, lists, tuples, strings) and of dataclasses
        (a run's result, its cases and findings) with every string masked, dict keys
        too; anything else (numbers, enums) as it is."""
        if self._text is None:
            return obj
        if type(obj) is str:
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.data(k): self.data(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.data(v) for v in obj)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.replace(obj, **{
                f.name: self.data(getattr(obj, f.name))
                for f in dataclasses.fields(obj) if f.init})
        return obj

    def header(self) -> dict[str, Any]:
        """What a transcript header says about masking: applied or not, and how many
        values (never which)."""
        return {"applied": self.enabled, "values": self.count}


NO_MASK = Masker(enabled=False)


def config_values(text: str) -> list[str]:
    """The values of a config template's entries whose name looks secret."""
    return [m["value"] for m in _CONFIG_ENTRY.finditer(text) if secret_name(m["name"])]


def build(*, environ: Mapping[str, str], target_env: Mapping[str, str] | None = None,
          configs: Iterable[str] = (), values: Iterable[str] = (),
          names: Iterable[str] = (), enabled: bool = True) -> Masker:
    """The run's masker: secret-named entries of ``target_env`` (``--agent-env``,
    ``--client-env``) and of ``environ`` (the suite's own environment, which targets
    inherit), secret-named entries of the config templates' texts, ``values`` (``--mask``)
    and the values of the variables ``names`` (``--mask-env``, looked up in
    ``target_env`` and ``environ``)."""
    if not enabled:
        return NO_MASK
    target_env = target_env or {}
    found = [v for env in (target_env, environ) for k, v in env.items() if secret_name(k)]
    for text in configs:
        found.extend(config_values(text))
    found.extend(values)
    for name in names:
        found.extend(env[name] for env in (target_env, environ) if name in env)
    return Masker(found)


__all__ = ["MASK", "MIN_LENGTH", "NO_MASK", "SECRET_WORDS", "Masker", "build", "config_values",
           "secret_name"]
