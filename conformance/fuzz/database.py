"""The shared example database: what one fuzz run found, replayed first by the next.

A Hypothesis example database is where runs, workers and machines share their
examples. ``fuzz --hypothesis-db`` and ``pytest --acp-fuzz --acp-hypothesis-db``
take one by URL (:func:`open_database`):

- a directory (``DIR``): Hypothesis' ``DirectoryBasedExampleDatabase``;
- ``redis://host:port/db``: Hypothesis' ``RedisExampleDatabase`` (the ``redis`` extra:
  ``pip install 'acp-conformance[redis]'``), for several machines;
- ``github:OWNER/REPO[/ARTIFACT]``: the example database a CI job uploaded as an
  artifact (Hypothesis' ``GitHubArtifactDatabase``, ``$GITHUB_TOKEN`` for private
  repositories), read-only, multiplexed with a local directory that takes the writes.

Hypothesis keeps its own entries there (the choices of failing and, under HypoFuzz,
covering examples, keyed by test); the suite adds one key per role with its
counterexamples as JSON (the agent's steps and model script, or the client's stream),
because those replay on any build of the target while Hypothesis' choices replay only
under the same strategies. Everything goes through the database API (``save``,
``fetch``, ``delete``), never through files, so a corpus written on one machine replays
first on any other pointed at the same store. ``fuzz`` replays them before it
generates anything; an unshrunk counterexample is stored the moment it is found and
replaced by its shrunk form when shrinking ends.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

KEYS = {"agent": b"acp-conformance/counterexamples/agent",
        "client": b"acp-conformance/counterexamples/client"}
GITHUB_ARTIFACT = "hypothesis-example-db"  # Hypothesis' default artifact name
REDIS_EXTRA = "pip install 'acp-conformance[redis]'"


def open_database(spec: str, *, local: Path | None = None, flag: str = "--hypothesis-db"
                  ) -> Any:
    """The example database ``spec`` names, checked reachable (ValueError: one line).

    ``local`` is the directory that takes the writes next to a read-only
    ``github:`` database (default: Hypothesis' own ``.hypothesis/examples``)."""
    where = f"{flag} {spec}"
    if spec.startswith(("redis://", "rediss://", "unix://")):
        return _redis(spec, where)
    if spec.startswith("github:"):
        return _github(spec[len("github:"):], where, local)
    if "://" in spec:
        raise ValueError(f"{where}: unknown database URL (give a directory, "
                         "redis://host:port/db or github:OWNER/REPO[/ARTIFACT])")
    return open_directory(Path(spec), flag=flag)


def open_directory(directory: Path, *, flag: str = "--hypothesis-db") -> Any:
    """A directory example database (ValueError: not a directory)."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{flag} {directory}: not a directory")
    return DirectoryBasedExampleDatabase(str(directory))


def _redis(url: str, where: str) -> Any:
    try:
        import redis  # type: ignore[import-not-found,unused-ignore]  # the redis extra
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise ValueError(f"{where}: a Redis database needs the redis extra "
                         f"({REDIS_EXTRA})") from None
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
        client.ping()
    except (redis.RedisError, ValueError, OSError) as exc:
        raise ValueError(f"{where}: cannot reach the database: "
                         f"{' '.join(str(exc).split())}") from None
    return RedisExampleDatabase(client)


def _github(rest: str, where: str, local: Path | None) -> Any:
    from hypothesis.configuration import storage_directory
    from hypothesis.database import (
        GitHubArtifactDatabase,
        MultiplexedDatabase,
        ReadOnlyDatabase,
    )

    parts = rest.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"{where}: expected github:OWNER/REPO or github:OWNER/REPO/ARTIFACT")
    owner, repo = parts[0], parts[1]
    artifact = parts[2] if len(parts) == 3 else GITHUB_ARTIFACT
    with warnings.catch_warnings():  # the folders are wanted now, not a warning about them
        warnings.simplefilter("ignore")
        cache = _path(storage_directory("github-artifacts", artifact))
        local = Path(local) if local is not None else _path(storage_directory("examples"))
    shared = GitHubArtifactDatabase(owner, repo, artifact_name=artifact, path=cache)
    with warnings.catch_warnings(record=True) as caught:  # it warns where it cannot read
        warnings.simplefilter("always")
        list(shared.fetch(KEYS["agent"]))  # downloads the artifact (or uses a fresh copy)
    if getattr(shared, "_disabled", False):
        why = next((str(w.message).strip() for w in caught), "the artifact cannot be read")
        raise ValueError(f"{where}: cannot read the artifact {artifact!r}: "
                         f"{' '.join(why.split())}")
    return MultiplexedDatabase(open_directory(local), ReadOnlyDatabase(shared))


def _path(folder: Any) -> Path:
    """A storage directory: a Path, or (newer Hypothesis) a lazy holder of one."""
    return Path(getattr(folder, "path", folder))


def describe(spec: str | None) -> str | None:
    """What a report says of the database: its URL without a password."""
    if spec is None:
        return None
    if "://" in spec and "@" in spec.split("://", 1)[1].split("/", 1)[0]:
        scheme, rest = spec.split("://", 1)
        host = rest.split("@", 1)[1]
        return f"{scheme}://***@{host}"
    return spec


def encode(failure: Any) -> bytes:
    """A counterexample (:class:`conformance.fuzz.grading.Failure`) as a database value."""
    value: dict[str, Any] = {"protocol": failure.protocol, "requirement": failure.requirement}
    if failure.role == "agent":
        value["steps"] = failure.steps
        if failure.model is not None:
            value["model"] = failure.model
    else:
        value["stream"] = {k: v for k, v in failure.stream.items() if k != "controls"}
    return json.dumps(value, sort_keys=True).encode("utf-8")


def save(db: Any, failure: Any) -> None:
    """Keep a counterexample (:class:`conformance.fuzz.grading.Failure`)."""
    if db is not None:
        db.save(KEYS[failure.role], encode(failure))


def replace(db: Any, old: Any, new: Any) -> None:
    """The shrunk counterexample ``new`` in place of ``old`` (stored when it was found)."""
    if db is None:
        return
    if old is not None and encode(old) != encode(new):
        db.delete(KEYS[old.role], encode(old))
    save(db, new)


def counterexamples(db: Any, role: str) -> list[dict[str, Any]]:
    """The stored counterexamples of ``role``, oldest rule first; unreadable ones skipped
    (another version of the suite may have written them, or a step this one does not
    know): an agent's steps and a client's stream are checked as a regression file's are."""
    if db is None:
        return []
    out = []
    for raw in db.fetch(KEYS[role]):
        try:
            value = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(value, dict) and value.get("protocol") in (1, 2) and _playable(
                value, role):
            out.append(value)
    return sorted(out, key=lambda v: json.dumps(v, sort_keys=True))


def _playable(value: dict[str, Any], role: str) -> bool:
    if role == "client":
        from conformance.fuzz.regressions import stream_problem

        stream = value.get("stream")
        return isinstance(stream, dict) and stream_problem(stream) is None
    from conformance.agent.steps import StepError, validate

    try:
        validate(value.get("steps"))
    except StepError:
        return False
    return True


__all__ = ["KEYS", "counterexamples", "describe", "encode", "open_database", "open_directory",
           "replace", "save"]
