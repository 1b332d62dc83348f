"""The regression library: every fuzz failure as a replayable transcript file.

A regression file is an ordinary transcript (:mod:`conformance.transcript`), so
``acp-conformance check FILE`` grades it offline. Its header carries more keys::

    "fingerprint": "mid-a-09-after-cancel-3c5e0f12ab",
    "finding": {"requirement", "outcome", "message", "evidence": {"entries", ...}},
    "also": ["MID-...", ...],          # other rules the same run broke
    "target": "my-agent --acp",        # what it was found on (and replays against)
    "seed": 1234, "effort": "ci", "strict": false,
    "found_by": "campaign",            # pytest --acp-fuzz (HypoFuzz too): seed null
    "fuzz": "agent",                   # which side was fuzzed
    "steps": [...]                     # agent: the client's steps (fuzz/steps.py)
    "model": {...}                     # agent behind --model-server: what the model said,
                                       # a model script (modelserver/script.py)
    "stream": {...}                    # client: the generated stream (fuzz/client_fuzz.py)
    "shrunk": false                    # only while unshrunk: stored as soon as it was found
                                       # (fuzz/keeper.py), replaced when shrinking ends

The file name is the fingerprint: a hash of the rule and of the counterexample's
*shape* (step kinds, block kinds, update kinds, ID forms and which IDs are equal,
never literal texts or IDs), so the same bug found twice lands in the same file.
Paths of the machine that found it (the session working directory, the current
directory) are written as ``/project`` and ``.``, so files can be committed.

``replay`` plays a file's steps (or stream) against a target and grades the new
transcript: STILL FAILING if the same rule breaks again, FIXED if not. A file
with a model script is played with a scripted model server answering as it did.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.checks import Options
from conformance.fuzz.shapes import failure_shape, fingerprint, stream_shape
from conformance.results import Finding
from conformance.transcript import Entry, TranscriptError, jsonl_files, load, write_atomic

PORTABLE_CWD = "/project"
FIXED, STILL_FAILING, NOT_REPLAYED = "FIXED", "STILL FAILING", "NOT REPLAYED"


class RegressionError(TranscriptError):
    """A regression file that cannot be used (one line with file and reason: exit 2)."""


# -- fingerprints (the shapes they hash: fuzz/shapes.py) -----------------------

def agent_shape(steps: Sequence[Any], model: Any = None) -> Any:
    """An agent counterexample's shape: its steps' shapes, and its model script's."""
    from conformance.agent.steps import shape

    out: Any = [shape(s) for s in steps]
    if model is not None:
        from conformance.fuzz.model_side import shape as model_shape

        out = {"steps": out, "model": model_shape(model)}
    return out


def counterexample_shape(role: str, steps: Sequence[Any], model: Any, stream: Any) -> Any:
    """An agent counterexample's steps (and model script), or a client one's stream."""
    return agent_shape(steps, model) if role == "agent" else stream_shape(stream)


def failure_fingerprint(f: Any) -> str:
    """The name a fuzz failure (:class:`conformance.fuzz.grading.Failure`) is saved under."""
    return fingerprint(f.requirement, failure_shape(
        f.role, f.protocol, counterexample_shape(f.role, f.steps, f.model, f.stream),
        f.finding, f.transcript.entries))


def regression_header(f: Any, result: Any, options: Options, strict: bool) -> dict[str, Any]:
    """A failure's file header: its transcript's, with the finding, the counterexample and
    how it was found (see the module docstring)."""
    header = dict(f.transcript.header)
    header.update({
        "protocol": f.protocol, "profile": options.profile.name, "strict": strict,
        "finding": f.finding.to_json(), "also": sorted({x.requirement for x in f.findings}
                                                       - {f.requirement}),
        "target": result.target, "seed": result.seed, "effort": result.effort.name,
        "fuzz": f.role,
    })
    if result.replay_with:
        header["replay_with"] = result.replay_with
    header.pop("case", None)
    if f.role == "agent":
        header["steps"] = f.steps
        if getattr(f, "history_steps", 0):  # persistent fuzzing: needs earlier sessions
            header["earlier_sessions"] = f.earlier_sessions
            header["history_steps"] = f.history_steps
        if f.model is not None:
            header["model"] = f.model
    else:
        header["stream"] = f.stream
    return header


def session_cwd(transcript: Any) -> str | None:
    """The working directory the suite gave the agent (session/new params)."""
    for e in transcript.entries:
        msg = e.msg
        if (e.src == "client" and isinstance(msg, dict) and msg.get("method") == "session/new"
                and isinstance(msg.get("params"), dict)):
            cwd = msg["params"].get("cwd")
            if isinstance(cwd, str):
                return cwd
    return None


# -- writing ------------------------------------------------------------------

@dataclass
class Saved:
    path: Path
    fingerprint: str
    existed: bool  # an earlier run found the same bug: the file was kept as it was


def save(directory: Path, *, fingerprint_: str, header: dict[str, Any],
         entries: Sequence[Entry], cwd: str | None = None) -> Saved:
    """Write a regression file unless one with the same fingerprint exists.

    The file appears complete or not at all, and only once: it is written under a
    temporary name and linked to its own, which fails if another process (a worker of
    the same campaign, on a shared folder too) got there first."""
    path = Path(directory) / f"{fingerprint_}.jsonl"
    if path.exists():
        return Saved(path, fingerprint_, True)
    scrub = _Scrubber(cwd)
    full = {**header, "fingerprint": fingerprint_, "case": f"fuzz:{fingerprint_}"}
    lines = [json.dumps(scrub(full), ensure_ascii=False)]
    for e in entries:
        lines.append(json.dumps(scrub(e.to_json()), ensure_ascii=False))
    staging = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    write_atomic(staging, "\n".join(lines) + "\n")
    try:
        os.link(staging, path)
    except FileExistsError:
        return Saved(path, fingerprint_, True)
    except OSError:  # a file system without hard links: the rename still never tears
        os.replace(staging, path)
        return Saved(path, fingerprint_, False)
    finally:
        staging.unlink(missing_ok=True)
    return Saved(path, fingerprint_, False)


class _Scrubber:
    """Machine paths out of a JSON value: the session cwd and the current directory."""

    def __init__(self, cwd: str | None) -> None:
        pairs = []
        self.exact: dict[str, str] = {}
        if cwd:
            self.exact[cwd] = PORTABLE_CWD
            pairs.append((cwd, PORTABLE_CWD))
            real = os.path.realpath(cwd)
            if real != cwd:
                pairs.append((real, PORTABLE_CWD))
        here = os.getcwd()
        if len(here) > 1:
            pairs.append((here + os.sep, "." + os.sep))
            self.exact[here] = PORTABLE_CWD
            pairs.append((json.dumps(here), json.dumps(PORTABLE_CWD)))  # "cwd":"<here>" in raw
        # JSON-escaped forms too, for the raw lines.
        self.pairs = pairs + [(json.dumps(a)[1:-1], json.dumps(b)[1:-1]) for a, b in pairs
                              if json.dumps(a)[1:-1] != a]

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str) and value in self.exact:
            return self.exact[value]
        if isinstance(value, str):
            for a, b in self.pairs:
                if a in value:
                    value = value.replace(a, b)
            return value
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        return value


# -- reading ------------------------------------------------------------------

@dataclass
class Regression:
    path: Path
    header: dict[str, Any]
    entries: list[Entry]
    role: str
    protocol: int
    requirement: str
    steps: list[Any] = field(default_factory=list)
    stream: Any = None
    model: dict[str, Any] | None = None  # the model script the agent's model played

    @property
    def fingerprint(self) -> str:
        return str(self.header.get("fingerprint", self.path.stem))

    @property
    def target(self) -> str | None:
        target = self.header.get("target")
        return target if isinstance(target, str) and target else None


REPLAY_WITH = ("client", "client_adapter", "client_profile")  # a client file's replay_with


def read(path: Path) -> Regression:
    header, entries = load(Path(path))
    where = f"{path}:1"
    finding = header.get("finding")
    if not isinstance(finding, dict) or not isinstance(finding.get("requirement"), str):
        raise RegressionError(f"{where}: not a regression file (the header has no 'finding')")
    role = header.get("fuzz", header.get("role", "agent"))
    if role not in ("agent", "client"):
        raise RegressionError(f"{where}: unknown fuzzed side {role!r}")
    protocol = header.get("protocol")
    if protocol not in (1, 2):
        raise RegressionError(f"{where}: header 'protocol' must be 1 or 2")
    reg = Regression(Path(path), header, entries, str(role), int(protocol),
                     finding["requirement"])
    if role == "agent":
        from conformance.agent.steps import StepError, validate

        try:
            reg.steps = validate(header.get("steps"))
        except StepError as exc:
            raise RegressionError(f"{where}: header 'steps': {exc}") from None
        if header.get("model") is not None:
            from conformance.modelserver.script import ScriptError, parse_script

            try:
                parse_script(header["model"], f"{where}: header 'model'")
            except ScriptError as exc:
                raise RegressionError(str(exc)) from None
            reg.model = header["model"]
    else:
        if not isinstance(header.get("stream"), dict):
            raise RegressionError(f"{where}: header 'stream' must be an object")
        problem = stream_problem(header["stream"])
        if problem:
            raise RegressionError(f"{where}: header 'stream': {problem}")
        recorded = header.get("replay_with")  # the client the stream was found on
        if recorded is not None and (not isinstance(recorded, dict) or any(
                recorded.get(key) is not None and not isinstance(recorded[key], str)
                for key in REPLAY_WITH)):
            raise RegressionError(f"{where}: header 'replay_with' must be an object whose "
                                  f"{', '.join(REPLAY_WITH)} are strings (is the header edited?)")
        reg.stream = header["stream"]
    return reg


def stream_problem(stream: dict[str, Any]) -> str | None:
    """What keeps a recorded client stream (and the earlier turns it needs, ``history``)
    from being played as the case's turns (fuzz.client_case.stream_case), or None."""
    from conformance.cases import step_validator

    history = stream.get("history", [])
    if not isinstance(history, list):
        return "'history' must be a list of turns"
    valid = step_validator("streamStep").is_valid
    for part in [*history, stream]:
        if not isinstance(part, dict):
            return "each turn of 'history' must be an object"
        steps, prompt = part.get("steps"), part.get("prompt", "-")
        if not isinstance(steps, list):
            return "a turn's 'steps' must be a list"
        if not isinstance(prompt, str) or not prompt:
            return "a turn's 'prompt' must be a non-empty string"
        if not isinstance(part.get("echo", False), bool):
            return "a turn's 'echo' must be true or false"
        for step in steps:
            if not valid(step):
                return f"not a stream step: {json.dumps(step)[:80]}"
    return None


def files(paths: Iterable[Path]) -> list[Path]:
    """Regression files named by the user: files, and the *.jsonl in folders."""
    return jsonl_files(paths, lambda p: RegressionError(f"{p}: no such regression file or "
                                                        "folder"))


# -- replaying -----------------------------------------------------------------

@dataclass
class Verdict:
    regression: Regression
    status: str  # FIXED | STILL FAILING | NOT REPLAYED
    findings: list[Finding] = field(default_factory=list)  # the rule's failing findings now
    others: list[Finding] = field(default_factory=list)  # other rules failing in the replay
    note: str = ""
    transcript: Any = None


def replay_agent(reg: Regression, target: Any, *, options: Options, strict: bool,
                 attempts: int = 1, cwd: str, schema_dir: Path | None = None,
                 model: Any = None) -> Verdict:
    """Play the file's steps against ``target`` (a :class:`player.AgentTarget`), with
    ``model`` (a running model server) playing the file's model script."""
    from conformance.fuzz.grading import graded, violations
    from conformance.fuzz.model_side import play_with_model
    from conformance.grading import Scope

    if reg.model is not None and model is None:
        return Verdict(reg, NOT_REPLAYED, note="the file has a model script: replay it with "
                                               "a scripted model server")
    last: Verdict | None = None
    for _ in range(max(1, attempts)):
        played = play_with_model(target, model, reg.protocol, reg.steps, reg.model, cwd=cwd,
                                 scope=Scope.of("agent", options, strict),
                                 header={"case": f"replay:{reg.fingerprint}"},
                                 profile=options.profile)
        if not played.playable:
            return Verdict(reg, NOT_REPLAYED, note=played.note, transcript=played.transcript)
        bad = violations(graded(played.transcript, schema_dir), strict)
        same = [f for f in bad if f.requirement == reg.requirement]
        others = [f for f in bad if f.requirement != reg.requirement]
        last = Verdict(reg, STILL_FAILING if same else FIXED, same, others, played.note,
                       played.transcript)
        if same:
            return last
    assert last is not None
    return last


__all__ = ["FIXED", "NOT_REPLAYED", "STILL_FAILING", "Regression",
           "RegressionError", "Saved", "Verdict", "agent_shape", "counterexample_shape",
           "failure_fingerprint", "files", "read",
           "regression_header", "replay_agent", "save", "session_cwd"]
