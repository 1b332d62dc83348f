"""Fuzzing LLM-backed agents through their model (``fuzz --model-server``).

The strategy that draws what the model says, the script shrinker's pieces, and
the real command line against the Responses fixture agents behind the scripted
model server: the pass-through agent and the shared-thought-ID agent are found
without being told the rule, the correct one stays clean, and a saved
counterexample (steps and model script) replays STILL FAILING on its fixture
and FIXED on the correct agent. Runs use the ``ci`` effort with fixed seeds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_report, outcomes, run_cli
from helpers import expected_fingerprint
from hypothesis import HealthCheck, find, given, settings
from hypothesis.errors import InvalidArgument

from conformance.fuzz import model_side, regressions
from conformance.modelserver.script import parse_script
from conformance.modelserver.server import ModelServer
from conformance.strategies import ITEM_ID_FORMS, LONG_ID_LENGTH, model_scripts

AGENTS = Path("fixtures") / "agents"


def agent(name: str) -> str:
    return f"{sys.executable} {AGENTS / name}.py"


def ids(script: dict[str, Any]) -> list[str]:
    return [p["id"] for r in script["turns"] for reply in r for p in reply["say"] if "id" in p]


# -- the strategy -------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{"turns": 0}, {"max_rounds": "2"}, {"max_texts": -1},
                                    {"tools": [""]}, {"reasoning": 1}, {"pauses": None}])
def test_model_scripts_validates_options_eagerly(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        model_scripts(**kwargs)


@settings(max_examples=60, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(model_scripts(tools=("list_directory", "ls")))
def test_drawn_scripts_are_valid_model_scripts(script: dict[str, Any]) -> None:
    parsed = parse_script(json.loads(json.dumps(script)), "drawn")
    for replies in parsed.turns:
        *earlier, last = replies
        assert all(any(p.kind == "tool" for p in r.parts) for r in earlier)
        assert not any(p.kind == "tool" for p in last.parts)  # every turn ends
        assert all(set(p.choose) == {"list_directory", "ls"} for r in replies
                   for p in r.parts if p.kind == "tool")


def test_every_item_id_form_is_reachable() -> None:
    def form(check: Any) -> dict[str, Any]:
        return find(model_scripts(), check, settings=settings(max_examples=2000,
                                                              database=None))

    def parts(s: dict[str, Any]) -> list[list[dict[str, Any]]]:
        return [[p for reply in r for p in reply["say"]] for r in s["turns"]]

    form(lambda s: "" in ids(s))
    form(lambda s: any(len(i) > LONG_ID_LENGTH for i in ids(s)))
    form(lambda s: any(i.upper() in ids(s) and i.upper() != i for i in ids(s)))
    form(lambda s: any(a.get("id") and a.get("id") in {b.get("id") for b in later}
                       for n, turn in enumerate(parts(s)) for a in turn
                       for later in parts(s)[n + 1:]))  # across turns
    form(lambda s: any(r["say"][0].get("id") and "reasoning" in r["say"][0]
                       and any("text" in p and p.get("id") == r["say"][0]["id"]
                               for p in r["say"][1:])
                       for t in s["turns"] for r in t))  # shared with the reasoning
    form(lambda s: any(r.get("pace") for t in s["turns"] for r in t))
    assert ITEM_ID_FORMS[0] == "fresh"


def test_model_scripts_shrink_towards_one_plain_text() -> None:
    smallest = find(model_scripts(), lambda s: True, settings=settings(database=None))
    assert smallest["turns"] == [[{"say": [{"text": "Turn 1, reply 1, part 1.", "id": "msg_1"}],
                                   "id": "resp_2"}]]


# -- the script shrinker's pieces ------------------------------------------------------

SCRIPT = {"format": 1, "replies": [{"say": [{"text": "Done."}]}], "turns": [
    [{"say": [{"reasoning": "r", "id": "x" * 3000}, {"text": "a", "id": "x" * 3000},
              {"tool": "auto"}], "id": "", "pace": 0.02},
     {"say": [{"text": "b", "id": "M1", "chunks": 2}]}],
    [{"say": [{"text": "c", "id": "m1"}]}]]}


def test_flatten_and_unflatten_round_trip_and_fill_emptied_turns() -> None:
    records = model_side.flatten(SCRIPT)
    assert len(records) == 5
    template = {k: v for k, v in SCRIPT.items() if k != "turns"}
    assert model_side.unflatten(records, template) == SCRIPT
    without_first_turn = model_side.unflatten(records[4:], template)
    assert without_first_turn["turns"][0] == model_side.FALLBACK  # turn 2 stays turn 2
    assert without_first_turn["turns"][1] == SCRIPT["turns"][1]
    parse_script(without_first_turn, "shrunk")


def test_renaming_keeps_which_ids_are_equal() -> None:
    plain = model_side.renamed(SCRIPT)
    assert ids(plain) == ["id2", "id2", "id3", "id4"]  # the response ID "" came first
    assert plain["turns"][0][0]["id"] == "id1"
    assert model_side.shape(plain) != model_side.shape(SCRIPT)  # long and empty are forms
    assert model_side.shape(model_side.renamed(plain)) == model_side.shape(plain)


def test_simplifications_drop_one_detail_each() -> None:
    rec = model_side.flatten(SCRIPT)[3]
    variants = model_side.simplifications(rec)
    assert [v["part"] for v in variants] == [{"text": "b", "chunks": 2}, {"text": "b", "id": "M1"}]


def test_the_server_answers_with_the_scripts_ids(tmp_path: Path) -> None:
    """Item and response IDs of a script reach the wire as written (Responses API)."""
    import urllib.request

    with ModelServer() as server:
        model_side.use(server, SCRIPT)
        body = json.dumps({"model": "m", "stream": False,
                           "input": [{"role": "user", "content": "hi"}]}).encode()
        req = urllib.request.Request(server.url + "/v1/responses", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            answer = json.load(resp)
        log = model_side.requests_log(server)
    assert answer["id"] == ""
    assert [o["id"] for o in answer["output"]][:2] == ["x" * 3000, "x" * 3000]
    assert log[0]["said"][1]["id"] == "x" * 3000


# -- the real command line ----------------------------------------------------------------

def fuzz(tmp_path: Path, name: str, *extra: str, seed: str = "1") -> tuple[int, dict[str, Any],
                                                                            str]:
    # the ci effort's runs, bounded by their count and the shrink attempts, not the clock:
    # on a busy machine its 60 s time budget (and the shrink budget, half of it) would cut
    # the search and the shrinking short, and a fixed seed would find and shrink less
    return cli_report("fuzz", "--agent", agent(name), "--model-server", "--effort", "ci",
                      "--time-budget", "900", "--shrink-budget", "900",
                      "--seed", seed, "--regressions", str(tmp_path / "lib"), "--agent-env",
                      f"ACP_REFERENCE_STATE_DIR={tmp_path / 'state'}", *extra,
                      tmp_path=tmp_path, timeout=400)


def test_passthrough_ids_are_found_shrunk_saved_and_replayed(tmp_path: Path) -> None:
    code, report, out = fuzz(tmp_path, "llm_passthrough_ids", seed="4")
    assert code == 1, out
    failed = outcomes(report).get("fail", set())
    assert any(r.startswith("MID-A-02/") for r in failed), failed
    assert any(r.startswith(("MID-A-07/", "MID-V2-06/")) for r in failed), failed
    assert "what the model said (shrunk model script):" in out
    files = sorted((tmp_path / "lib").glob("*.jsonl"))
    reuse = next(p for p in files if p.name.startswith("mid-a-02-cross-turn-reuse-"))
    reg = regressions.read(reuse)
    assert reg.model is not None and len(reg.steps) <= 5
    said = ids(reg.model)
    assert len(said) == 2 and said[0] == said[1], reg.model  # the smallest reuse: one ID twice
    assert expected_fingerprint(reg) == reg.fingerprint

    env = ("--agent-env", f"ACP_REFERENCE_STATE_DIR={tmp_path / 'replay'}")
    for path in files:
        still = run_cli("replay", str(path), *env, timeout=120)  # the recorded target
        assert still.returncode == 1 and still.stdout.startswith("STILL FAILING"), still.stdout
        fixed = run_cli("replay", str(path), "--agent", agent("llm_responses_agent"), *env,
                        timeout=120)
        assert fixed.returncode == 0 and fixed.stdout.startswith("FIXED"), fixed.stdout
    check = run_cli("check", str(reuse), "--no-color")
    assert check.returncode == 1 and "MID-A-02/cross-turn-reuse" in check.stdout


def test_a_thought_sharing_its_texts_id_is_found_in_v1_only(tmp_path: Path) -> None:
    code, report, out = fuzz(tmp_path, "llm_shared_thought_id", "--strict", "--protocol", "1")
    assert code == 1, out
    assert "MID-A-02/cross-kind-reuse" in outcomes(report).get("fail", set()), out
    code, report, out = fuzz(tmp_path, "llm_shared_thought_id", "--strict", "--protocol", "2",
                             "--no-save")
    assert code == 0, out


def test_the_correct_llm_agent_stays_clean(tmp_path: Path) -> None:
    code, report, out = fuzz(tmp_path, "llm_responses_agent", "--strict", "--no-save")
    assert code == 0, out
    assert not outcomes(report).get("fail") and not outcomes(report).get("warn"), out
    assert "0 generated run(s)" not in out


def test_model_options_need_an_agent_and_a_bad_model_script_is_one_line(
        tmp_path: Path) -> None:
    proc = run_cli("fuzz", "--client", "x", "--model-server")
    assert proc.returncode == 2 and "--model-server does not apply to the client role" \
        in proc.stderr, proc.stderr  # the option table's words, as the suite run says them
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"format": "acp-conformance-transcript", "version": 1,
                               "role": "agent", "protocol": 1, "steps": ["start"],
                               "finding": {"requirement": "MID-A-02"}, "model": {"format": 1}})
                   + "\n")
    proc = run_cli("replay", str(bad), "--agent", "true")
    assert proc.returncode == 2 and "header 'model'" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
