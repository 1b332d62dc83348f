"""Every broken client under fixtures/clients/ is caught with the right requirement, in v1
and v2, by the real CLI (a subprocess), driven as its manifest says: through a pty with
a profile, as a one-shot client, in-process through the adapter API, or on the wire only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import cli_report
from helpers import (
    CLIENT_MANIFEST,
    assert_breaks,
    client_args,
    first_case,
    first_rule,
    plugin_agrees_with_check,
    plugin_args,
)
from offline import assert_check_agrees

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
CLIENTS = REPO / "fixtures" / "clients"
MANIFEST = CLIENT_MANIFEST


def outcomes(report: dict[str, Any], protocol: int) -> dict[str, set[str]]:
    """requirement/sub-rule -> outcomes seen in this protocol's cases (and base IDs too)."""
    out: dict[str, set[str]] = {}
    for r in report["results"]:
        if r["case"].endswith(f"@v{protocol}"):
            for key in (r["requirement"], r["requirement"].split("/", 1)[0]):
                out.setdefault(key, set()).add(r["outcome"])
    return out


def test_manifest_lists_every_fixture() -> None:
    listed = {e["file"] for e in MANIFEST} | {
        e["file"] for e in yaml.safe_load((CLIENTS / "manifest.yaml").read_text(
            encoding="utf-8")).get("persistent", [])}  # held in for persistent fuzzing
    on_disk = {p.name for p in CLIENTS.glob("*.py")}
    assert listed == on_disk
    assert sum(e["run"] in ("pty", "one-shot") for e in MANIFEST) >= 2


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"][:-3] for e in MANIFEST])
def test_broken_client_is_caught(entry: dict[str, Any], tmp_path: Path,
                                 request: pytest.FixtureRequest) -> None:
    """The fixture on its manifest cases, in each version it lists: the faults listed and
    no other fail; `check` on the run's transcripts agrees (offline.py). The pytest plugin
    then plays one case of the first fault (the first of its manifest cases that grades
    it; a fixture that breaks nothing: its first case) and gives the verdict, headline and
    rows that `check` gives that case's transcript of this run: one verdict on every road
    (an adapter through --acp-client-adapter), each fixture run live once by the command
    line."""
    protocols = sorted(int(v[1:]) for v in entry["expect"])
    args = client_args(entry) + ["--protocol", "both" if len(protocols) == 2 else
                                 str(protocols[0]), "--timeout", "20"]
    for case in entry["cases"]:
        args += ["--case", case]
    code, report, output = cli_report(*args, "--transcripts", str(tmp_path / "t"),
                                      tmp_path=tmp_path)
    assert report, output
    # one verdict: offline, the same findings and exit status (offline.py)
    assert_check_agrees(tmp_path / "report.json", tmp_path / "t", code, args)
    any_fail = False
    for version, expect in entry["expect"].items():
        seen = outcomes(report, int(version[1:]))
        for req in expect.get("fail", []):
            assert "fail" in seen.get(req, set()), (version, req, seen, output)
        for req in expect.get("warn", []):
            assert "warn" in seen.get(req, set()), (version, req, seen, output)
            assert "fail" not in seen.get(req, set()), (version, req, seen)
        for req in expect.get("info", []):  # recorded, never a fault
            assert "info" in seen.get(req, set()), (version, req, seen, output)
        any_fail = any_fail or bool(expect.get("fail"))
        # Nothing outside the expectation fails: the fixture breaks exactly one rule.
        allowed = set(expect.get("fail", [])) | {r.split("/", 1)[0]
                                                 for r in expect.get("fail", [])}
        extra = {r for r, o in seen.items() if "fail" in o and r not in allowed
                 and r.split("/", 1)[0] not in allowed}
        assert not extra, (version, extra, output)
    assert code == (1 if any_fail else 0), output
    if entry["run"] == "wire":  # observation-based rows are "not testable", never pass
        rows = [r for r in report["results"] if r["requirement"].startswith("MID-C-03")]
        assert rows and all(r["outcome"] == "not_applicable" for r in rows)
        assert all("not testable: no profile" in r["message"] for r in rows)
    protocol, rule = first_rule(entry["expect"], protocols)
    case = first_case(rule, protocol, entry["cases"], entry.get("acp_profile"))
    assert_breaks(plugin_agrees_with_check(
        tmp_path, request.getfixturevalue("pytester"),
        plugin_args(client_args(entry)) + ["--acp-timeout", "20"], case, protocol, report,
        tmp_path / "t"), rule)


def test_warn_level_breach_fails_under_strict(tmp_path: Path) -> None:
    entry = next(e for e in MANIFEST if e["file"] == "type_change_only.py")
    code, report, output = cli_report(*client_args(entry), "--protocol", "1", "--case",
                                      "client-grouping", "--strict", tmp_path=tmp_path)
    assert code == 1, output
    assert "fail" in outcomes(report, 1)["MID-C-03/merged"]


@pytest.mark.parametrize("road", ["pty", "adapter"])
def test_a_prompt_joined_with_its_echo_is_a_warning_on_both_client_roads(
        road: str, tmp_path: Path) -> None:
    """A client that adds the v1 live echo to its own copy of the prompt (one user message
    that shows the prompt twice, as marimo's use-acp does) is graded as C-7 says for any
    layout: MID-C-03/prompt-twice warn, not a MID-C-03/content fail; through a pty with a
    profile and in-process through the adapter API alike."""
    entry = dict(next(e for e in MANIFEST if e["file"] == "joins_prompt_and_echo.py"), run=road)
    code, report, output = cli_report(*client_args(entry), "--protocol", "1", "--case",
                                      "client-live-echo", "--timeout", "20", tmp_path=tmp_path)
    seen = outcomes(report, 1)
    assert seen.get("MID-C-03/prompt-twice") == {"warn"}, (seen, output)
    assert "fail" not in seen.get("MID-C-03", set()), (seen, output)
    row = next(r for r in report["results"] if r["requirement"] == "MID-C-03/prompt-twice")
    assert "joined in one message" in row["message"], row
    assert code == 0, output
