"""Optional validation of every frame against the official ACP JSON Schemas.

The official schemas are data the user gives (``--schema-dir``, a folder laid
out like the upstream ``schema/`` tree: ``v1/schema.json``, ``v2/schema.json``,
and for the newest published rules ``upstream-sdk-2.4.0/v2/schema.json``).
They are never copied into this project. Findings use the suite's own family
``SCHEMA/official``: a frame the official schema rejects is a fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from conformance.profiles import Profile
from conformance.results import Finding, Outcome, Reason
from conformance.transcript import Entry

RULE = "SCHEMA/official"
MAX_FINDINGS = 10


class SchemaDirError(Exception):
    """The schema folder lacks the file a protocol version needs."""


def schema_path(schema_dir: Path, protocol: int, profile: Profile) -> Path:
    sub = "v1" if protocol < 2 else profile.schema_subdir
    path = Path(schema_dir) / sub / "schema.json"
    if not path.is_file():
        raise SchemaDirError(f"--schema-dir {schema_dir}: no {sub}/schema.json for protocol "
                             f"v{protocol} (profile {profile.name})")
    return path


@lru_cache(maxsize=8)
def validators(path: str) -> dict[Any, Any]:
    """Validators keyed by what they check.

    ``"agent"`` / ``"client"``: the whole-message envelope each side may send.
    ``(side, method, kind)``: the params (kind ``"call"``) or result (``"result"``)
    of one method, found through the schema's ``x-method`` / ``x-side`` marks,
    where ``side`` is the receiver of the call.
    """
    import jsonschema

    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    defs = doc["$defs"]
    sides = {item.get("title"): item for item in doc.get("anyOf", [])}
    cls = jsonschema.validators.validator_for(doc)

    def make(sub: dict[str, Any]) -> Any:
        return cls({**sub, "$defs": defs})

    out: dict[Any, Any] = {"agent": make(sides["Agent"]), "client": make(sides["Client"])}
    for name, d in defs.items():
        if isinstance(d, dict) and "x-method" in d and "x-side" in d:
            kind = "result" if name.endswith("Response") else "call"
            out[(d["x-side"], d["x-method"], kind)] = make({"$ref": f"#/$defs/{name}"})
    return out


def problems(msg: Any, src: str, path: Path, answered: str | None = None) -> list[str]:
    """Why the official schema rejects one message (empty when it is valid).

    ``answered`` is the method of the request a response answers, when known.
    """
    import jsonschema

    v = validators(str(path))
    receiver = "client" if src == "agent" else "agent"
    errors = list(v[src].iter_errors(msg))
    if not errors and isinstance(msg, dict):
        # The envelope admits extension messages with any params, so check the
        # params or result of a known method against that method's own shape.
        if isinstance(msg.get("method"), str):
            precise = v.get((receiver, msg["method"], "call"))
            if precise is not None:
                errors = [e for e in precise.iter_errors(msg.get("params"))]
                _prefix(errors, "params")
        elif answered is not None and "result" in msg:
            precise = v.get((src, answered, "result"))
            if precise is not None:
                errors = [e for e in precise.iter_errors(msg.get("result"))]
                _prefix(errors, "result")
    if not errors:
        return []
    best = jsonschema.exceptions.best_match(errors)
    where = "/".join(map(str, best.absolute_path)) or "(message)"
    return [f"{where}: {best.message[:300]}"]


def _prefix(errors: list[Any], key: str) -> None:
    for e in errors:
        e.path.appendleft(key)


def validate_transcript(entries: Iterable[Entry], schema_dir: Path, protocol: int,
                        profile: Profile, role: str = "agent") -> list[Finding]:
    """A SCHEMA/official row for the target's frames: pass, or up to 10 fails."""
    from conformance.requirements import load_grades

    path = schema_path(schema_dir, protocol, profile)
    grade = load_grades()[RULE].of(profile.name, protocol)
    findings: list[Finding] = []
    checked = extra = 0
    pending: dict[Any, str] = {}  # (conn, request id) -> method, for the peer's requests
    for e in entries:
        if e.stream not in ("stdin", "stdout") or e.msg is None:
            continue
        msgs = e.msg if isinstance(e.msg, list) else [e.msg]
        if e.src != role:
            for m in msgs:
                if isinstance(m, dict) and isinstance(m.get("method"), str) and "id" in m:
                    pending[(e.conn, repr(m["id"]))] = m["method"]
            continue
        for msg in msgs:
            checked += 1
            answered = None
            if isinstance(msg, dict) and "method" not in msg and "id" in msg:
                answered = pending.pop((e.conn, repr(msg["id"])), None)
            for p in problems(msg, e.src, path, answered):
                if len(findings) < MAX_FINDINGS:
                    findings.append(Finding(RULE, grade,
                                            f"the official v{protocol} schema rejects this "
                                            f"frame: {p}", expected=f"valid per {path.parent.name}"
                                            f"/{path.name}", entries=(e.seq,)))
                else:
                    extra += 1
    if extra:
        findings.append(Finding(RULE, grade, f"{extra} more frame(s) rejected"))
    if not findings:
        outcome = Outcome.PASS if checked else Outcome.NOT_APPLICABLE
        findings.append(Finding(RULE, outcome, f"{checked} frame(s) valid per the official "
                                f"v{protocol} schema" if checked else "not testable: no frame",
                                reason=None if checked else Reason.NOT_TESTABLE))
    return findings
