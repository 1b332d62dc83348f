"""Our own model of the shapes we check agrees with the official ACP schemas.

Hypothesis generates message updates whose messageId and content take every
JSON type; for each, the verdict of our model (the checkers' rules on
MID-S-01, MID-V2-01 and MID-V2-02) must equal the official schema's verdict.
The schemas are read from ../shared (or $ACP_SHARED_DIR) at test time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import model
from conformance.checks import Options, grade
from conformance.profiles import PROFILES
from conformance.schema import problems, schema_path
from conformance.transcript import Transcript

ID_RULES = {"MID-S-01/type", "MID-V2-01", "MID-V2-02/missing-id", "MID-V2-02/content-shape"}

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
message_id_values = st.one_of(st.just(model.ABSENT), st.text(max_size=12), json_scalars,
                              st.lists(st.text(max_size=3), max_size=2),
                              st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
text_blocks = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=20))
upsert_contents = st.one_of(st.just(model.ABSENT), st.none(), st.lists(text_blocks, max_size=3),
                            text_blocks, st.text(max_size=5), st.integers())


@st.composite
def message_updates(draw: Any, protocol: int) -> dict[str, Any]:
    kinds = list(model.CHUNK_KINDS) + (list(model.UPSERT_KINDS) if protocol >= 2 else [])
    kind = draw(st.sampled_from(kinds))
    update: dict[str, Any] = {"sessionUpdate": kind}
    mid = draw(message_id_values)
    if mid != model.ABSENT:
        update["messageId"] = mid
    if kind in model.CHUNK_KINDS:
        update["content"] = draw(text_blocks)
    else:
        content = draw(upsert_contents)
        if content != model.ABSENT:
            update["content"] = content
    return update


def our_verdict(update: dict[str, Any], protocol: int) -> bool:
    """True when our checkers find the update well-formed."""
    t = Transcript({"protocol": protocol})
    note = {"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "s", "update": update}}
    import json

    t.add(0, "agent", "stdout", json.dumps(note).encode())
    findings = grade(t.entries, protocol=protocol, options=Options(),
                     select=sorted(ID_RULES))
    return not any(f.requirement in ID_RULES and f.outcome.value == "fail" for f in findings)


def official_verdict(update: dict[str, Any], path: Path) -> bool:
    note = {"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "s", "update": update}}
    return not problems(note, "agent", path)


@pytest.mark.parametrize("protocol,profile", [(1, "acp-sdk-2.4.0"), (2, "acp-sdk-2.4.0"),
                                              (2, "acp-repo-2026-08-22")])
def test_model_agrees_with_official_schema(shared_dir: Path, protocol: int, profile: str) -> None:
    path = schema_path(shared_dir / "acp-schema", protocol, PROFILES[profile])

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(update=message_updates(protocol))
    def agree(update: dict[str, Any]) -> None:
        assert our_verdict(update, protocol) == official_verdict(update, path), update

    agree()


def test_schema_validation_catches_a_wrong_type(shared_dir: Path) -> None:
    path = schema_path(shared_dir / "acp-schema", 1, PROFILES["acp-sdk-2.4.0"])
    bad = {"sessionUpdate": "agent_message_chunk", "messageId": 7,
           "content": {"type": "text", "text": "x"}}
    assert not official_verdict(bad, path)
    assert not our_verdict(bad, 1)


def test_cli_schema_dir_grades_frames(shared_dir: Path, tmp_path: Path) -> None:
    import sys

    from conftest import REPO_ROOT, load_json, outcomes, run_cli

    schemas = str(shared_dir / "acp-schema")
    good = run_cli("--agent", f"{sys.executable} -m conformance.reference.agent", "--case",
                   "wire-shapes", "--schema-dir", schemas, "--json", str(tmp_path / "g.json"))
    assert good.returncode == 0, good.stdout
    assert "SCHEMA/official" in outcomes(load_json(tmp_path / "g.json"))["pass"]
    bad = run_cli("--agent", f"{sys.executable} {REPO_ROOT}/fixtures/agents/numeric_id.py",
                  "--case", "wire-shapes", "--schema-dir", schemas, "--json",
                  str(tmp_path / "b.json"))
    assert bad.returncode == 1
    assert "SCHEMA/official" in outcomes(load_json(tmp_path / "b.json"))["fail"]
    missing = run_cli("--agent", "x", "--schema-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such directory" in missing.stderr
