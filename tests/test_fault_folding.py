"""One fault, one finding, for an agent's fault that other rules see again
(conformance/faultfold.py): a v2 agent that drops a prompt's idempotencyKey breaks
MID-V2-15, and its retry's second insert and turn break MID-V2-05's pairing of echoes
and responses; that is one finding with its consequences listed, in every report and on
every road, while a fault of MID-V2-05 of its own keeps its own finding."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from helpers import assert_one_verdict, every_road

REPO = Path(__file__).resolve().parents[1]
AGENTS = REPO / "fixtures" / "agents"
CASE = "prompt-retry-while-pending"  # the retry queued behind the running original
PROFILE = "acp-schema-1.21"  # the profile whose prompts carry an idempotencyKey
SELECTION = ["--case", CASE, "--protocol", "2"]

pytest_plugins = ["pytester"]


#: v2_key_ignored, made to start the retry's turn only once the client's next prompt has
#: arrived (as an LLM agent slow to start a turn does): the retry's echo then always
#: follows that prompt, so its turn always upsets MID-V2-05's pairing of responses and
#: echoes. Without the pause, whether it does depends on the machine's timing.
SLOW_RETRY = """
import sys, time
sys.path[:0] = [{repo!r}, {agents!r}]
from v2_key_ignored import KeyIgnoredAgent
from conformance.reference.agent import main

class SlowRetry(KeyIgnoredAgent):
    turns = 0

    def emit_user_echo(self, turn):
        self.turns += 1
        end = time.monotonic() + 30
        while self.turns == 2 and not self._backlog and not self.eof and time.monotonic() < end:
            self.pump(timeout=0.1)
        super().emit_user_echo(turn)

sys.exit(main(agent_class=SlowRetry))
"""


def _slow_retry(tmp_path: Path) -> str:
    path = tmp_path / "v2_key_ignored_slow_retry.py"
    path.write_text(SLOW_RETRY.format(repo=str(REPO), agents=str(AGENTS)), encoding="utf-8")
    return str(path)


def _agent(name: str) -> tuple[list[str], list[str]]:
    command = f"{sys.executable} {name if name.endswith('.py') else AGENTS / (name + '.py')}"
    return (["--agent", command, "--profile", PROFILE],
            ["--acp-agent", command, "--acp-profile", PROFILE])


def _row(report: dict, rule: str) -> dict:
    return next(r for r in report["results"] if r["requirement"] == rule)


def test_a_dropped_key_is_one_finding_with_its_consequences_on_every_road(
        tmp_path: Path, pytester: pytest.Pytester) -> None:
    cli, plug = _agent(_slow_retry(tmp_path))
    roads = every_road(tmp_path, pytester, cli, plug, SELECTION)
    # The CLI and `check` on its transcript: the same rows. The plugin plays the case
    # again: the same verdict and the same folding (the retry's other MID-V2-15 rows may
    # differ with timing between two plays, which is not this fold's doing).
    assert_one_verdict({k: roads[k] for k in ("cli", "check")}, "fail")
    report, output = roads["cli"][1], roads["cli"][2]
    for road in ("check", "pytest"):
        other = roads[road][1]
        assert other["summary"]["verdict"] == "fail", road
        assert {r["requirement"] for r in other["results"] if r.get("consequences")} == \
            {r["requirement"] for r in report["results"] if r.get("consequences")}, road
        assert {(r["requirement"], r["outcome"]) for r in other["results"]
                if r["requirement"].startswith("MID-V2-05")} == \
            {(r["requirement"], r["outcome"]) for r in report["results"]
             if r["requirement"].startswith("MID-V2-05")}, road
    faults = [r for r in report["results"] if r["outcome"] in ("fail", "warn")]
    assert {r["requirement"].split("/")[0] for r in faults} == {"MID-V2-15"}, faults
    cause = next(r for r in faults if r.get("consequences"))
    listed = " ".join(cause["consequences"])
    assert "MID-V2-05/response-id: " in listed, cause
    for rule in ("MID-V2-05/response-id", "MID-V2-05/echo-content"):
        row = _row(report, rule)
        assert row["outcome"] == "not_applicable", row
        assert f"a consequence of a dropped idempotencyKey ({cause['requirement']})" \
            in row["message"] and "its control, the transcript without the retry" \
            in row["message"], row
    assert "as a consequence: MID-V2-05/" in output and "MID-V2-05/response-id: " in output


def test_the_consequences_are_listed_in_every_report(tmp_path: Path) -> None:
    cli, _ = _agent(_slow_retry(tmp_path))
    out = {k: tmp_path / f"report.{k}" for k in ("json", "xml", "html", "md")}
    proc = run_cli(*cli, *SELECTION, "--json", str(out["json"]), "--junit", str(out["xml"]),
                   "--html", str(out["html"]), "--markdown", str(out["md"]), "--no-color",
                   "--transcripts", str(tmp_path / "t"), timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for kind in ("xml", "html", "md"):
        text = out[kind].read_text(encoding="utf-8")
        assert "as a consequence: MID-V2-05/" in text, kind
    assert "consequence" in proc.stdout


def test_a_fault_of_mid_v2_05_alone_keeps_its_own_finding(tmp_path: Path) -> None:
    """The same case against an agent that honours the key but answers prompts without
    the ID its profile requires: MID-V2-05/response-id fails on its own."""
    cli, _ = _agent("v2_response_without_message_id")
    proc = run_cli(*cli, *SELECTION, "--json", str(tmp_path / "r.json"), "--no-color",
                   timeout=300)
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert _row(report, "MID-V2-05/response-id")["outcome"] == "fail", proc.stdout
    assert not any(r.get("consequences") for r in report["results"])


def test_the_control_keeps_a_consequence_the_agent_breaks_anyway(tmp_path: Path) -> None:
    """Both ways, offline: the dropped-key transcript folds MID-V2-05/response-id only
    while its control (the transcript without the retry) meets the rule. Rewrite every
    prompt response to ``{}`` (no ID: a fault of MID-V2-05 of its own under the profile)
    and the control fails it too: the row stands as a fail of its own, not a
    consequence."""
    cli, _ = _agent(_slow_retry(tmp_path))
    proc = run_cli(*cli, *SELECTION, "--transcripts", str(tmp_path / "t"), "--no-color",
                   "--no-color", timeout=300)
    path = tmp_path / "t" / f"{CASE}@v2.jsonl"
    assert path.exists(), proc.stdout + proc.stderr
    prompts: set[int] = set()
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        e = json.loads(line)
        msg = e.get("msg")
        if isinstance(msg, dict) and msg.get("method") == "session/prompt":
            prompts.add(msg["id"])
        elif (e.get("src") == "agent" and isinstance(msg, dict) and "result" in msg
              and msg.get("id") in prompts):
            msg["result"] = {}
            e["raw"] = json.dumps(msg, separators=(",", ":"))
        lines.append(json.dumps(e))
    broken = tmp_path / "broken" / path.name
    broken.parent.mkdir()
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = {}
    for name, folder in (("kept", tmp_path / "t"), ("broken", broken.parent)):
        check = run_cli("check", str(folder), "--json", str(tmp_path / f"{name}.json"),
                        "--no-color")
        report = json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8"))
        rows[name] = report, check.stdout
    kept, broken_report = rows["kept"][0], rows["broken"][0]
    assert _row(kept, "MID-V2-05/response-id")["outcome"] == "not_applicable"
    row = _row(broken_report, "MID-V2-05/response-id")
    assert row["outcome"] == "fail", rows["broken"][1]
    assert not any("MID-V2-05/response-id" in c for r in broken_report["results"]
                   for c in r.get("consequences", ())), rows["broken"][1]
