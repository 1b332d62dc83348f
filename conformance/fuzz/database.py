"""The shared example database: what one fuzz run found, replayed first by the next.

A Hypothesis example database (a folder, shared storage, or Hypothesis' Redis
database) is where a campaign's workers share their examples. Hypothesis keeps
its own entries there (the choices of failing and, under HypoFuzz, covering
examples, keyed by test); the suite adds one key per role with its shrunk
counterexamples as JSON (the agent's steps and model script, or the client's
stream), because those replay on any build of the target while Hypothesis'
choices replay only under the same strategies. ``fuzz --hypothesis-db DIR`` and
``pytest --acp-fuzz --acp-hypothesis-db DIR`` write them; ``fuzz`` replays them
before it generates anything, so a second campaign on the same database starts
from what the first one found.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KEYS = {"agent": b"acp-conformance/counterexamples/agent",
        "client": b"acp-conformance/counterexamples/client"}


def open_directory(directory: Path) -> Any:
    """A directory example database (ValueError: not a directory)."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--hypothesis-db {directory}: not a directory")
    return DirectoryBasedExampleDatabase(str(directory))


def save(db: Any, failure: Any) -> None:
    """Keep a shrunk counterexample (:class:`conformance.fuzz.grading.Failure`)."""
    if db is None:
        return
    value: dict[str, Any] = {"protocol": failure.protocol, "requirement": failure.requirement}
    if failure.role == "agent":
        value["steps"] = failure.steps
        if failure.model is not None:
            value["model"] = failure.model
    else:
        value["stream"] = {k: v for k, v in failure.stream.items() if k != "controls"}
    db.save(KEYS[failure.role], json.dumps(value, sort_keys=True).encode("utf-8"))


def counterexamples(db: Any, role: str) -> list[dict[str, Any]]:
    """The stored counterexamples of ``role``, oldest rule first; unreadable ones skipped
    (another version of the suite may have written them)."""
    if db is None:
        return []
    out = []
    for raw in db.fetch(KEYS[role]):
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(value, dict) and isinstance(value.get("protocol"), int) and (
                isinstance(value.get("steps"), list) or isinstance(value.get("stream"), dict)):
            out.append(value)
    return sorted(out, key=lambda v: json.dumps(v, sort_keys=True))


__all__ = ["KEYS", "counterexamples", "open_directory", "save"]
