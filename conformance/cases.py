"""Cases are data: YAML files under ``cases/``, validated by a JSON Schema.

A malformed file is an input error with file and line (exit 2), never a
traceback. Unknown keys are errors (``additionalProperties: false``).

Validation is a pure function of the file's text and the case schema, and it is most of
what a run's start-up costs (jsonschema's import and walk: about a quarter of a second),
so a file found valid is remembered by the digest of both (and of this package's version)
under the user's cache folder (:func:`memo_dir`): the same bytes are not walked again. A
file that is not valid is never remembered, so its error is reported every time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml


class CaseError(Exception):
    """A case file that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class Case:
    id: str
    description: str
    requirements: tuple[str, ...]
    protocols: tuple[int, ...]
    role: str
    profiles: tuple[str, ...] | None
    drive: tuple[Any, ...]
    checks: tuple[str, ...]
    stream: tuple[Any, ...]
    area: str
    source: str  # "file:line"
    model: str | None = None  # model script under cases/model/ for --model-server
    # (rule, reason): rules the case does not grade, with the reason its file gives
    exclude: tuple[tuple[str, str], ...] = ()
    # "file:line" of each ID its requirements, checks and exclude name (for the error
    # naming an unknown one where it is written)
    where: tuple[tuple[str, str], ...] = ()

    def line_of(self, rule: str) -> str:
        """"file:line" where the case names ``rule`` (its own line if not known)."""
        return next((at for r, at in self.where if r == rule), self.source)

    def applies_to(self, protocol: int, profile: str) -> bool:
        return protocol in self.protocols and (self.profiles is None or profile in self.profiles)


def default_cases_dir() -> Path:
    """The bundled cases: the installed copy, or the source tree's ``cases/``."""
    try:
        bundled = Path(str(resources.files("conformance") / "_cases"))
        if bundled.is_dir():
            return bundled
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent / "cases"


@functools.lru_cache(maxsize=1)
def _schema_text() -> str:
    return (resources.files("conformance") / "data" / "case.schema.json").read_text("utf-8")


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    """The case schema's validator, built once per process (every case file uses it)."""
    import jsonschema

    return jsonschema.Draft202012Validator(dict(json.loads(_schema_text())))


def memo_dir() -> Path | None:
    """Where valid case files are remembered: ``$ACP_CONFORMANCE_CACHE_DIR`` (empty: nowhere),
    else ``acp-conformance/`` in ``$XDG_CACHE_HOME`` or ``~/.cache``; None without a home."""
    chosen = os.environ.get("ACP_CONFORMANCE_CACHE_DIR")
    if chosen is not None:
        return Path(chosen) / "valid-cases" if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or (
        os.path.join(os.path.expanduser("~"), ".cache") if "HOME" in os.environ else "")
    return Path(base) / "acp-conformance" / "valid-cases" if base else None


@functools.lru_cache(maxsize=1)
def _digest_of_schema() -> hashlib._Hash:
    """The digest's start, the same for every file of a process: the version and schema."""
    from conformance import __version__

    return hashlib.sha256(f"{__version__}\0{_schema_text()}\0".encode())


def _digest(text: str) -> str:
    h = _digest_of_schema().copy()
    h.update(text.encode())
    return h.hexdigest()


def _known_valid(text: str) -> tuple[bool, Path | None]:
    """Whether a file of this text was found valid before, and where to remember it."""
    where = memo_dir()
    if where is None:
        return False, None
    entry = where / _digest(text)
    return entry.is_file(), entry


def _remember_valid(entry: Path | None) -> None:
    """Best effort: a folder that cannot be written only means validating next time."""
    if entry is None:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.touch()
    except OSError:
        pass


@functools.lru_cache(maxsize=2)
def step_validator(kind: str = "agentStep") -> Any:
    """The validator of one step of the case schema, ``$defs/agentStep`` (the case files'
    drive steps and the agent fuzzer's recorded steps are one vocabulary) or
    ``$defs/streamStep`` (a client turn's updates and the client fuzzer's streams)."""
    import jsonschema

    text = (resources.files("conformance") / "data" / "case.schema.json").read_text("utf-8")
    schema = dict(json.loads(text))
    return jsonschema.Draft202012Validator(
        {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{kind}"})


MAX_NODES = 50_000  # values in one YAML file, aliases expanded (an alias bomb stops here)
# libyaml's composer when PyYAML was built with it (the same nodes and marks, about
# ten times faster); the pure-Python one otherwise.
_COMPOSER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def compose_with_lines(text: str, name: str) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """Parse YAML keeping the line of every node, keyed by its JSON path."""
    try:
        node = yaml.compose(text, Loader=_COMPOSER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CaseError(f"{name}:{line}: invalid YAML: {problem}") from None
    except RecursionError:
        raise CaseError(f"{name}:1: invalid YAML: nested too deeply") from None
    lines: dict[tuple[Any, ...], int] = {}
    count = 0
    scalars = yaml.SafeLoader("")  # one constructor for every scalar of the file

    def walk(n: Any, path: tuple[Any, ...]) -> Any:
        nonlocal count
        count += 1
        if count > MAX_NODES:
            raise CaseError(f"{name}:{n.start_mark.line + 1}: more than {MAX_NODES} values "
                            "(aliases expanded); this is not a case file")
        lines[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for k, v in n.value:
                key = walk(k, path + ("\0key",))
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise CaseError(f"{name}:{k.start_mark.line + 1}: a mapping key must be a "
                                    "plain value")
                if key in out:
                    raise CaseError(f"{name}:{k.start_mark.line + 1}: duplicate key {key!r}")
                lines[path + (key,)] = k.start_mark.line + 1
                out[key] = walk(v, path + (key,))
                lines[path + (key,)] = k.start_mark.line + 1
            return out
        if isinstance(n, yaml.SequenceNode):
            return [walk(v, path + (i,)) for i, v in enumerate(n.value)]
        return scalars.construct_object(n, deep=True)

    if node is None:
        raise CaseError(f"{name}:1: empty file")
    try:
        return walk(node, ()), lines
    except RecursionError:
        raise CaseError(f"{name}:1: invalid YAML: nested too deeply") from None
    finally:
        scalars.dispose()


def _line_of(lines: dict[tuple[Any, ...], int], path: Iterable[Any]) -> int:
    p = tuple(path)
    while p and p not in lines:
        p = p[:-1]
    return lines.get(p, 1)


def read_input(path: Path, what: str, error: type[Exception] = CaseError) -> str:
    """The text of one of the suite's input files, or a one-line ``error`` naming it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise error(f"{path}:1: {what} is not UTF-8") from None


def load_file(path: Path) -> list[Case]:
    name = str(path)
    text = read_input(path, "case file")
    data, lines = compose_with_lines(text, name)
    known, entry = _known_valid(text)
    errors = [] if known else sorted(_validator().iter_errors(data),
                                     key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        err = min(errors, key=lambda e: _line_of(lines, e.absolute_path))
        where = "/".join(map(str, err.absolute_path)) or "(top)"
        message = err.message
        line = _line_of(lines, err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = err.schema.get("properties", {}) if isinstance(err.schema, dict) else {}
            extra = [k for k in err.instance if k not in known]
            message = f"unknown key {extra[0]!r}" if extra else err.message
            if extra:
                line = _line_of(lines, tuple(err.absolute_path) + (extra[0],))
        elif err.validator == "oneOf" and isinstance(err.instance, (str, dict)):
            message = f"not a known step: {json.dumps(err.instance)[:80]}"
        raise CaseError(f"{name}:{line}: {where}: {message}")
    if not known:
        _remember_valid(entry)
    out = []
    for i, c in enumerate(data["cases"]):
        _check_switches(c, name, lines, i)
        applies = c["applies"]
        out.append(Case(
            id=c["id"], description=c["description"], requirements=tuple(c["requirements"]),
            protocols=tuple(applies["protocols"]), role=applies["role"],
            profiles=tuple(applies["profiles"]) if "profiles" in applies else None,
            drive=tuple(c["drive"]), checks=tuple(c["checks"]), stream=tuple(c.get("stream", [])),
            area=data["area"], source=f"{name}:{_line_of(lines, ('cases', i))}",
            model=c.get("model"),
            exclude=tuple((str(k), str(v)) for k, v in (c.get("exclude") or {}).items()),
            where=tuple((str(rule), f"{name}:{_line_of(lines, ('cases', i, key, j))}")
                        for key in ("requirements", "checks")
                        for j, rule in enumerate(c.get(key) or []))
            + tuple((str(rule), f"{name}:{_line_of(lines, ('cases', i, 'exclude', rule))}")
                    for rule in c.get("exclude") or {})))
    return out


def _check_switches(case: dict[str, Any], name: str, lines: dict[tuple[Any, ...], int],
                    index: int) -> None:
    """A ``switch`` step names a session an earlier ``new_session`` step created."""
    created = 0
    for j, step in enumerate(case["drive"]):
        if step == "new_session":
            created += 1
        elif isinstance(step, dict) and "switch" in step:
            n = step["switch"]["session"]
            if n >= created:
                line = _line_of(lines, ("cases", index, "drive", j))
                raise CaseError(f"{name}:{line}: cases/{index}/drive/{j}: switch to session "
                                f"#{n}, but only {created} session(s) were created before it")


def load_dir(directory: Path | None = None, *, known_rules: bool = True) -> list[Case]:
    """Every case of ``directory`` (default: the bundled ones). With ``known_rules`` (what
    a run wants), a case naming a requirement or rule the suite does not know is a
    :class:`CaseError` naming its file and line: a typo never grades nothing and passes
    (``lint-cases`` lists every such problem instead)."""
    cases = _load_dir(directory)
    if known_rules:
        check_rules(cases)
    return cases


def check_rules(cases: list[Case]) -> None:
    """Raise :class:`CaseError` for the first case naming an unknown requirement or rule."""
    from conformance.checks import all_rules
    from conformance.requirements import case_problems

    problems = case_problems(cases, all_rules())
    if problems:
        more = (f" (and {len(problems) - 1} more problem(s): acp-conformance lint-cases "
                "--cases DIR lists them)" if len(problems) > 1 else "")
        raise CaseError(problems[0] + more)


def _load_dir(directory: Path | None = None) -> list[Case]:
    directory = Path(directory) if directory else default_cases_dir()
    if not directory.is_dir():
        raise CaseError(f"{directory}: no such cases directory")
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        for case in load_file(path):
            if case.id in seen:
                raise CaseError(f"{case.source}: duplicate case id {case.id!r} "
                                f"(first at {seen[case.id]})")
            seen[case.id] = case.source
            cases.append(case)
    return cases


def select(cases: list[Case], patterns: Iterable[str] | None,
           rules: Iterable[str] | None = None) -> list[Case]:
    """Select cases by selector (:mod:`conformance.selectors`): a case ID, requirement ID,
    sub-rule ID, or a glob of any of them. A selector that selects nothing is a
    :class:`CaseError` saying what was probably meant."""
    from conformance import selectors

    pats = list(patterns or [])
    if not pats:
        return cases
    rule_ids = list(rules) if rules is not None else selectors.all_rule_ids()
    named = {case.id: selectors.names(case, rule_ids) for case in cases}
    chosen = [case for case in cases if any(selectors.matches(p, named[case.id]) for p in pats)]
    for p in pats:
        if not any(selectors.matches(p, n) for n in named.values()):
            known = set().union(*named.values()) if named else set()
            raise CaseError(selectors.miss(p, known))
    return chosen
