"""Catalogue K.5 and K.6 client cases end to end, through the real command line: two
messages with distinct IDs and the same text, and a chunk's ``_meta`` inside a replay.
The reference client passes them through a pty with its profile and in process; the
broken fixtures fail exactly the rule, on whichever road they are driven."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_report as cli

from conformance.client.runner import reference_client

CLIENTS = Path(__file__).resolve().parents[1] / "fixtures" / "clients"
SAME_TEXT = ["--case", "client-identical-texts", "--case", "client-identical-texts-idless"]


def per_case(report: dict[str, Any], rule: str) -> dict[str, set[str]]:
    """case@vN -> outcomes of ``rule`` in it."""
    out: dict[str, set[str]] = {}
    for r in report["results"]:
        if r["requirement"] == rule:
            out.setdefault(r["case"], set()).add(r["outcome"])
    return out


def pty_client(path: Path) -> list[str]:
    words = [sys.executable, str(path), "--agent-cmd", "{agent}"]
    return ["--client", " ".join(shlex.quote(w) for w in words),
            "--client-profile", str(CLIENTS / "reference.yaml")]


@pytest.mark.parametrize("road", ["pty", "adapter"])
def test_reference_shows_two_messages_with_the_same_text(road: str, tmp_path: Path) -> None:
    if road == "pty":
        command, _ = reference_client()
        args = ["--client", command, "--client-profile", str(CLIENTS / "reference.yaml")]
    else:
        args = ["--client-adapter", "conformance.client.reference:make_client"]
    code, report, out = cli(*args, *SAME_TEXT, "--protocol", "both", "--timeout", "20",
                            tmp_path=tmp_path)
    assert code == 0, out
    assert per_case(report, "MID-C-03/content") == {
        "client-identical-texts@v1": {"pass"}, "client-identical-texts@v2": {"pass"},
        "client-identical-texts-idless@v1": {"pass"}}


@pytest.mark.parametrize("road", ["pty", "adapter"])
def test_a_client_that_dedups_by_content_loses_a_message(road: str, tmp_path: Path) -> None:
    path = CLIENTS / "dedups_by_content.py"
    args = pty_client(path) if road == "pty" else ["--client-adapter", f"{path}:make_client"]
    code, report, out = cli(*args, *SAME_TEXT, "--protocol", "both", "--timeout", "20",
                            tmp_path=tmp_path)
    assert code == 1, out
    assert per_case(report, "MID-C-03/content") == {
        "client-identical-texts@v1": {"fail"}, "client-identical-texts@v2": {"fail"},
        # without IDs the two copies are ambiguous: showing one is no fault
        "client-identical-texts-idless@v1": {"pass"}}
    assert "the agent message 'twin-a2' is missing" in out
    failed = {r["requirement"] for r in report["results"] if r["outcome"] == "fail"}
    assert failed == {"MID-C-03/content"}, out


def reload_observations(transcript: Path) -> set[int]:
    """Entry numbers of the observations made after a reload (the replayed screen)."""
    out = set()
    for line in transcript.read_text(encoding="utf-8").splitlines()[1:]:
        d = json.loads(line)
        if d.get("event") == "observed" and (d.get("data") or {}).get("reload"):
            out.add(d["seq"])
    return out


@pytest.mark.parametrize("fixture,verdict", [
    ("conformance.client.reference:make_client", "pass"),
    (f"{CLIENTS / 'chunk_meta_patches.py'}:make_client", "fail"),
])
def test_a_chunk_meta_inside_a_replay_patches_nothing(fixture: str, verdict: str,
                                                      tmp_path: Path) -> None:
    code, report, out = cli("--client-adapter", fixture, "--case", "client-chunk-meta-replay",
                            "--protocol", "2", "--timeout", "20", "--transcripts",
                            str(tmp_path / "t"), tmp_path=tmp_path)
    assert code == (0 if verdict == "pass" else 1), out
    assert per_case(report, "MID-V2-04") == {"client-chunk-meta-replay@v2": {verdict}}
    assert per_case(report, "MID-C-07") == {"client-chunk-meta-replay@v2": {"pass"}}
    if verdict == "pass":
        return
    (observed,) = reload_observations(tmp_path / "t" / "client-chunk-meta-replay@v2.jsonl")
    in_replay = [r for r in report["results"] if r["requirement"] == "MID-V2-04"
                 and r["outcome"] == "fail" and observed in r["evidence"]["entries"]]
    # Both messages the replay rebuilt: one started by a chunk with _meta, one whose
    # upsert's _meta a chunk's {"b": 2} and then null overwrote.
    assert sorted(r["message"] for r in in_replay) == [
        "a chunk's _meta patched the agent message 'rmt-1'",
        "a chunk's _meta patched the agent message 'rmt-2'"]
    failed = {r["requirement"] for r in report["results"] if r["outcome"] == "fail"}
    assert failed == {"MID-V2-04"}, out
