"""A conformant ACP client, written as a model to read: the client suite's reference target.

:class:`ReferenceClient` is the client without I/O. It negotiates v1 or v2,
creates a session, sends prompts without any message ID of its own (MID-C-01),
answers every agent request (permission: the first allow option; anything
else: -32601), and keeps the conversation the way the catalogue says
(Appendix G):

* chunks are grouped by ``(kind, messageId)``; IDs are opaque strings, compared
  exactly (no trimming, case folding, normalisation or parsing, MID-C-02), and
  ``""`` is a real ID (MID-C-06);
* v1 chunks without a usable ID (missing, ``null`` or of the wrong type,
  MID-C-04/MID-C-05) fall back to the old rule: they continue the previous
  update if it was an ID-less chunk of the same kind, else start a new message;
* v2 chunks without a string ID are rejected (MID-V2-07); v2 whole-message
  updates replace content (``null`` and ``[]`` clear it, an omitted key or a
  malformed value changes nothing) and patch ``_meta`` (MID-V2-02/-03/-08);
  a chunk's own ``_meta`` never touches the message (MID-V2-04);
* messages are shown in order of first appearance.

Every step is a small method, so a deliberately broken client
(``fixtures/clients/*.py``) overrides exactly one behaviour.

As a program (``python -m conformance.client.reference --agent-cmd CMD``) it
is an interactive terminal client: it shows ``> `` when it waits for input,
sends each line as a prompt, and prints the conversation as ``role: text``
lines, all of it after each turn (``--render cumulative``, after clearing the
screen) or only what the turn added or changed (``--render incremental``).
With ``--prompt TEXT`` it is a one-shot client: one turn, print, exit
(``--resume SESSION`` loads that session first). ``/load SESSION`` reloads a
session (v1 ``session/load``, v2 ``session/resume`` from the start: the replay becomes
the conversation), ``/quit`` ends it. As a library it is an in-process client for
``--client-adapter conformance.client.reference:make_client``.

This package is that public path: ``client`` holds the client and its reducer,
``adapter`` the in-process adapter, ``terminal`` the program; the names broken
client fixtures build on are imported here.
"""

from conformance.client.reference.adapter import ReferenceAdapter, make_client
from conformance.client.reference.client import PROFILE_YAML, Message, ReferenceClient, Rejected
from conformance.client.reference.terminal import Terminal, main

__all__ = ["PROFILE_YAML", "Message", "ReferenceAdapter", "ReferenceClient", "Rejected", "Terminal",
           "main", "make_client"]
