"""The model's side of agent fuzzing: an LLM-backed agent behind the scripted model server.

With ``fuzz --model-server`` every generated run also draws what the model
says (:func:`conformance.strategies.model_scripts`, a model script in its
data form); the server plays it for the whole run, and the script travels with
the failure: shrunk, saved in the regression file's header (``model``), played
again by ``replay``.

Shrinking the script reuses the step shrinker (:mod:`conformance.fuzz.shrink`)
on a flat list of *records*, one per part the model says::

    {"turn": 1, "round": 0, "reply": {"id": "resp_3", "pace": 0.02},
     "part": {"text": "...", "id": "msg_2", "chunks": 3}}

Deleting records removes parts (a request or a turn left without parts falls
back to a plain reply with a fresh ID); simplifying one drops its chunking, its
pause, its response ID and its item ID (a fresh one from the server). Before
that, long, empty or look-alike IDs are tried as short plain names, keeping
which IDs are equal.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from conformance.fuzz.shapes import IdLetters
from conformance.fuzz.shrink import Shrunk, shrink_steps
from conformance.modelserver.script import SCRIPT_FORMAT, parse_script

Script = dict[str, Any]  # a model script in its data form (see conformance.modelserver.script)
Record = dict[str, Any]
FALLBACK: list[dict[str, Any]] = [{"say": [{"text": "Done."}]}]  # fresh IDs, no tool
PART_KINDS = ("reasoning", "text", "tool")


def use(server: Any, script: Script | None) -> None:
    """Make ``server`` play ``script`` from now on (None: its default script); forget
    what it logged before."""
    server.wait_idle(2.0)
    server.take_log()
    server.use(parse_script(script, "fuzz") if script is not None else None, "fuzz")


def requests_log(server: Any) -> list[dict[str, Any]]:
    """What the model was asked and said since :func:`use` (for the transcript header)."""
    server.wait_idle(2.0)
    return list(server.take_log())


def play_with_model(target: Any, server: Any, protocol: int, steps: Sequence[Any],
                    model: Script | None, **kwargs: Any) -> Any:
    """:func:`conformance.fuzz.player.play`, with ``server`` (a running model server, or
    None) playing ``model``; what the model was asked and said lands in the transcript
    header (``model_requests``)."""
    from conformance.fuzz.player import play

    if server is None:
        return play(target, protocol, steps, **kwargs)
    use(server, model)
    played = play(target, protocol, steps, **kwargs)
    played.transcript.header["model_requests"] = requests_log(server)
    return played


# -- records ------------------------------------------------------------------

def flatten(script: Script) -> list[Record]:
    out = []
    for t, replies in enumerate(script.get("turns", []), 1):
        for r, reply in enumerate(replies):
            attrs = {k: v for k, v in reply.items() if k != "say"}
            for part in reply["say"]:
                out.append({"turn": t, "round": r, "reply": attrs, "part": part})
    return out


def unflatten(records: Sequence[Record], template: Script) -> Script:
    turns: list[list[dict[str, Any]]] = []
    at: tuple[int, int] | None = None
    for rec in records:
        t = int(rec["turn"])
        while len(turns) < t:
            turns.append([])
        if at != (t, rec["round"]):
            turns[t - 1].append({"say": [], **rec["reply"]})
            at = (t, rec["round"])
        turns[t - 1][-1]["say"].append(rec["part"])
    return {**template, "format": SCRIPT_FORMAT,
            "turns": [replies or FALLBACK for replies in turns]}


def simplifications(rec: Record) -> list[Record]:
    """Simpler variants of one record, the biggest simplification first."""
    out = []
    part, reply = rec["part"], rec["reply"]
    for key in ("id", "chunks"):
        if key in part:
            out.append({**rec, "part": {k: v for k, v in part.items() if k != key}})
    for key in ("id", "pace"):
        if key in reply:
            out.append({**rec, "reply": {k: v for k, v in reply.items() if k != key}})
    return out


def shrink_script(script: Script, result: Any, fails: Callable[[Script], Any], *,
                  max_attempts: int, deadline: float | None = None
                  ) -> tuple[Script, Shrunk[Any]]:
    """The smallest script found that still ``fails`` (None when a candidate passes)."""
    template = {k: v for k, v in script.items() if k != "turns"}
    attempts = 0
    plain = renamed(script)
    if plain != script:
        attempts += 1
        outcome = fails(plain)
        if outcome is not None:
            script, result = plain, outcome
    shrunk = shrink_steps(flatten(script), result,
                          lambda recs: fails(unflatten(recs, template)), keep=0,
                          max_attempts=max(0, max_attempts - attempts),
                          variants=simplifications, deadline=deadline)
    shrunk.attempts += attempts
    final = unflatten(shrunk.steps, template)
    if renamed(final) != final and shrunk.attempts < max_attempts:  # id1, id2 in order
        shrunk.attempts += 1
        outcome = fails(renamed(final))
        if outcome is not None:
            final, shrunk.result = renamed(final), outcome
    return final, shrunk


def renamed(script: Script) -> Script:
    """Every item and response ID as a short plain name by first appearance (``id1``,
    ``id2``, ...), equal IDs staying equal: empty, long and look-alike forms go."""
    names: dict[str, str] = {}

    def name(mid: str) -> str:
        return names.setdefault(mid, f"id{len(names) + 1}")

    turns = [[{**{k: (name(v) if k == "id" else v) for k, v in reply.items() if k != "say"},
               "say": [{k: (name(v) if k == "id" else v) for k, v in part.items()}
                       for part in reply["say"]]}
              for reply in replies] for replies in script.get("turns", [])]
    return {**script, "turns": turns}


# -- reading a script ---------------------------------------------------------------

def shape(script: Script) -> list[Any]:
    """A script without its texts and literal IDs: parts per request, which IDs are
    equal (letters), which are empty or long (what a fingerprint is made of)."""
    letters = IdLetters()
    out = []
    for replies in script.get("turns", []):
        out.append([[_word(p, letters) for p in reply.get("say", [])] for reply in replies])
    return out


def _word(part: dict[str, Any], letters: IdLetters) -> str:
    kind = next((k for k in PART_KINDS if k in part), "?")
    if "id" not in part:
        return kind
    mid = part["id"]
    form = "empty" if mid == "" else "long" if len(mid) > 256 else letters(mid)
    return f"{kind}[{form}]"


def show_id(mid: str) -> str:
    if len(mid) > 40:
        return json.dumps(mid[:24], ensure_ascii=True)[:-1] + f'..." ({len(mid)} chars)'
    return json.dumps(mid, ensure_ascii=True)


def describe(script: Script) -> list[str]:
    """One readable line per request the script answers."""
    lines = []
    for t, replies in enumerate(script.get("turns", []), 1):
        for r, reply in enumerate(replies, 1):
            said = []
            for part in reply.get("say", []):
                kind = next((k for k in PART_KINDS if k in part), "?")
                word = "tool call" if kind == "tool" else kind
                if "id" in part:
                    word += " " + show_id(part["id"])
                if "chunks" in part:
                    word += f" in {part['chunks']} chunk(s)"
                said.append(word)
            head = f"turn {t}, request {r}"
            extra = []
            if "id" in reply:
                extra.append(f"response {show_id(reply['id'])}")
            if reply.get("pace"):
                extra.append(f"{reply['pace'] * 1000:g} ms between deltas")
            if extra:
                head += f" ({', '.join(extra)})"
            lines.append(f"{head}: {'; '.join(said)}")
    lines.append("a request past a turn's list: its last reply again, without tool calls; "
                 "turns past the list: a plain text with fresh IDs")
    return lines


__all__ = ["Script", "describe", "flatten", "play_with_model", "renamed",
           "requests_log",
           "shape", "shrink_script", "simplifications", "unflatten", "use"]
