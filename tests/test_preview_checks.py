"""Catalogue Appendix K on small hand-written transcripts: MID-A-10 (restated messages)
and MID-V2-13 (the replay marker), both ways, with the profile gating and the marker
closing the replay window. The live fixtures in fixtures/agents/ prove the same rules
against running agents (test_agent_suite.py); these cover what a live drive cannot
reach reliably (a resume while a prompt streams on the same connection)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import load_json, run_cli
from wire import PREVIEW, Line, req, res, resume, start, text, transcript, upd

from conformance.checks import Options, grade
from conformance.profiles import get as get_profile
from conformance.results import Outcome, Reason

REFERENCE = f"{sys.executable} -m conformance.reference.agent"


def v2_turn(rid: int, body: list[Line]) -> list[Line]:
    return [req(rid, "session/prompt", sessionId="s", prompt=[text("Hello")]),
            res(rid, {"messageId": f"u{rid}"}),
            upd("user_message", f"u{rid}", content=[text("Hello")]), *body,
            upd("state_update", state="idle", stopReason="end_turn")]


def v1_turn(rid: int, body: list[Line]) -> list[Line]:
    return [req(rid, "session/prompt", sessionId="s", prompt=[text("Hello")]),
            upd("user_message_chunk", "u", content=text("Hello")), *body,
            res(rid, {"stopReason": "end_turn"})]


def outcomes(lines: list[Line], protocol: int, select: list[str],
             options: Options | None = None) -> dict[str, set[str]]:
    found = grade(transcript(protocol, lines).entries, protocol=protocol,
                  options=options or Options(), select=select)
    out: dict[str, set[str]] = {}
    for f in found:
        out.setdefault(f.outcome.value, set()).add(f.requirement)
    return out


PARTS = ["Here is the ", "first reply", " to your prompt."]
WHOLE = "".join(PARTS)


def chunks(mid: str | None, parts: list[str] = PARTS) -> list[Line]:
    return [upd("agent_message_chunk", mid, content=text(p)) for p in parts]


@pytest.mark.parametrize("protocol,body,rule", [
    (1, [*chunks("a"), upd("agent_message_chunk", "b", content=text(WHOLE))], "new-id"),
    (2, [*chunks("a"), upd("agent_message", "b", content=[text(WHOLE)])], "new-id"),
    (1, [*chunks(None), upd("agent_message_chunk", "b", content=text(WHOLE))], "id-flip"),
    (1, [*chunks("a"), upd("agent_message_chunk", None, content=text(WHOLE))], "id-flip"),
    (1, [*chunks("a"), upd("agent_message_chunk", "a", content=text(WHOLE))], "same-id-chunk"),
    (2, [*chunks("a"), upd("agent_message_chunk", "a", content=text(WHOLE))], "same-id-chunk"),
    # one new ID per chunk (MID-A-03/id-per-chunk) and a new one for the copy
    (2, [*[upd("agent_message_chunk", f"c{n}", content=text(p)) for n, p in enumerate(PARTS)],
         upd("agent_message", "c9", content=[text(WHOLE)])], "new-id"),
    # other updates in between are allowed
    (2, [*chunks("a"), upd("plan_update", planId="p", entries=[]),
         upd("agent_message", "b", content=[text(" " + WHOLE + "\n")])], "new-id"),
])
def test_a_restatement_is_warned(protocol: int, body: list[Line], rule: str) -> None:
    turn = v2_turn(2, body) if protocol == 2 else v1_turn(2, body)
    found = outcomes(start(protocol) + turn, protocol, ["MID-A-10"])
    assert found.get("warn") == {f"MID-A-10/{rule}"}, found


@pytest.mark.parametrize("protocol,body", [
    # the positive control: a v2 upsert with the run's ID replaces the content
    (2, [*chunks("a"), upd("agent_message", "a", content=[text(WHOLE)])]),
    # one chunk is not a run; a short text is never flagged
    (1, [upd("agent_message_chunk", "a", content=text(WHOLE)),
         upd("agent_message_chunk", "b", content=text(WHOLE))]),
    (1, [*chunks("a", ["Done", "."]), upd("agent_message_chunk", "b", content=text("Done."))]),
    # two real messages with the same text, each streamed
    (1, [*chunks("a"), *chunks("b")]),
    # an upsert under one ID of an ID-per-chunk run: MID-A-03/id-per-chunk's fault, not this
    (2, [*[upd("agent_message_chunk", f"c{n}", content=text(p)) for n, p in enumerate(PARTS)],
         upd("agent_message", "c0", content=[text(WHOLE)])]),
    # a different text under a new ID
    (2, [*chunks("a"), upd("agent_message", "b", content=[text("Something else entirely.")])]),
    # chunks whose ID is a number, then the whole message under a string ID: the number is
    # no ID to compare (MID-S-01/type's fault, one finding); with a string ID it is new-id
    (2, [*[upd("agent_message_chunk", 43936602022156, content=text(p)) for p in PARTS],
         upd("agent_message", "b", content=[text(WHOLE)])]),
])
def test_no_restatement_passes(protocol: int, body: list[Line]) -> None:
    turn = v2_turn(2, body) if protocol == 2 else v1_turn(2, body)
    found = outcomes(start(protocol) + turn, protocol, ["MID-A-10"])
    assert not {"warn", "fail"} & set(found), found
    if protocol == 2 and body[-1][1]["params"]["update"]["sessionUpdate"] == "agent_message":
        assert found.get("pass") == {"MID-A-10/new-id", "MID-A-10/id-flip",
                                     "MID-A-10/same-id-chunk"}, found  # really judged


ASK = "Read a file in the working directory, then summarise it."
LINK = {"type": "resource_link", "name": "notes", "uri": "file:///project/notes.txt"}


def load_replay(body: list[Line]) -> list[Line]:
    """A v1 session with one turn, then a session/load whose replay is ``body``."""
    return [*start(1), *v1_turn(2, chunks("a")),
            req(5, "session/load", sessionId="s", cwd="/", mcpServers=[]), *body, res(5)]


def test_a_replayed_turn_is_not_a_restatement_of_the_turn_before() -> None:
    """A replay holds many turns under one turn index: a prompt of text and a link (two user
    chunks), its reply, then a next prompt of the same text under its own ID is the next
    turn's user message, not the first one restated (K.6: one turn, live or replayed).
    The reference agent replays the fuzzer's prompts this way."""
    replay = [upd("user_message_chunk", "u1", content=text(ASK)),
              upd("user_message_chunk", "u1", content=LINK), *chunks("a1"),
              upd("user_message_chunk", "u2", content=text(ASK)), *chunks("a2", ["Done ", "again."])]
    found = outcomes(load_replay(replay), 1, ["MID-A-10"])
    assert not {"warn", "fail"} & set(found), found
    assert "MID-A-10/new-id" in found.get("pass", set()), found  # really judged
    # the control: restated before any reply, inside one replayed turn, it is still warned
    restated = [upd("user_message_chunk", "u1", content=text(ASK[:20])),
                upd("user_message_chunk", "u1", content=text(ASK[20:])),
                upd("user_message_chunk", "u2", content=text(ASK)), *chunks("a1")]
    assert outcomes(load_replay(restated), 1, ["MID-A-10"]).get("warn") == {
        "MID-A-10/new-id"}


REPLAYED = [upd("user_message", "u2", content=[text("Hello")]),
            upd("agent_message", "a", content=[text(WHOLE)])]
MARKER = upd("replay_complete")


@pytest.mark.parametrize("window,rule,outcome", [
    ([*REPLAYED, MARKER, res(5)], None, None),
    ([MARKER, res(5)], None, None),  # nothing to replay: the marker still comes
    ([*REPLAYED, res(5)], "missing", "fail"),
    ([*REPLAYED, MARKER, MARKER, res(5)], "duplicate", "fail"),
    ([*REPLAYED, res(5), MARKER], "after-response missing", "fail"),
    ([*REPLAYED, res(5, error=True)], "truncated", "info"),
    ([*REPLAYED, upd("agent_message", "k", sid="child", content=[text("sub")]), MARKER,
      res(5)], "child", "fail"),
    ([*REPLAYED, upd("agent_message", "k", sid="child", content=[text("sub")]), MARKER,
      upd("replay_complete", sid="child"), res(5)], None, None),
])
def test_the_replay_marker(window: list[Line], rule: str | None, outcome: str | None) -> None:
    lines = start(2) + v2_turn(2, chunks("a")) + [resume(5), *window]
    found = outcomes(lines, 2, ["MID-V2-13"], PREVIEW)
    bad = {o: rs for o, rs in found.items() if o in ("fail", "warn", "info")}
    assert bad == ({} if rule is None else {outcome: {f"MID-V2-13/{r}" for r in rule.split()}}), found
    if rule is None:
        assert "MID-V2-13/missing" in found["pass"]


@pytest.mark.parametrize("how", [{"omit": True}, {"replay": None}])
def test_a_marker_without_replay_from_is_unrequested(how: dict[str, Any]) -> None:
    lines = start(2) + v2_turn(2, chunks("a")) + [resume(5, **how), MARKER, res(5)]
    found = outcomes(lines, 2, ["MID-V2-13"], PREVIEW)
    assert found.get("fail") == {"MID-V2-13/unrequested"}, found
    without = start(2) + v2_turn(2, chunks("a")) + [resume(5, **how), res(5)]
    assert "fail" not in outcomes(without, 2, ["MID-V2-13"], PREVIEW)


def test_the_older_profiles_do_not_apply_the_marker() -> None:
    lines = start(2) + v2_turn(2, chunks("a")) + [resume(5), *REPLAYED, res(5), MARKER]
    for name in ("acp-sdk-2.4.0", "acp-repo-2026-08-22"):
        found = grade(transcript(2, lines).entries, protocol=2,
                      options=Options(profile=get_profile(name)), select=["MID-V2-13"])
        assert {f.outcome for f in found} == {Outcome.NOT_APPLICABLE}
        assert {f.reason for f in found} == {Reason.ALLOWED_BY_PROFILE}
        # replay_complete is an unknown update kind there: kept, never a failure
        every = grade(transcript(2, lines).entries, protocol=2,
                      options=Options(profile=get_profile(name)))
        assert not [f for f in every if f.outcome in (Outcome.FAIL, Outcome.WARN)], every


def test_the_marker_closes_the_replay_window() -> None:
    """Under acp-schema-1.21 an update after the marker is live, also before the response:
    it is not a replayed message after the response (MID-V2-06/after-response) nor one
    without a primer (MID-V2-12). Without the profile the response closes the window."""
    after = upd("agent_message", "live", content=[text("A live note.")])
    late = upd("agent_message", "late", content=[text("Later.")])
    lines = start(2) + v2_turn(2, chunks("a")) + [resume(5), *REPLAYED, MARKER, after,
                                                   res(5), late]
    preview = outcomes(lines, 2, ["MID-V2-06"], PREVIEW)
    assert "fail" not in preview, preview
    older = outcomes(lines, 2, ["MID-V2-06"], Options(profile=get_profile("acp-sdk-2.4.0")))
    assert older.get("fail") == {"MID-V2-06/after-response"}, older


def test_a_live_chunk_inside_the_replay_window() -> None:
    """A resume while a prompt streams on the same connection: a chunk of the live
    message after the first replayed update and before the marker warns; before the
    first replayed update it is recorded (info); after an upsert of its ID it passes."""
    streaming = start(2) + [req(2, "session/prompt", sessionId="s", prompt=[text("Hi")]),
                            res(2, {"messageId": "u2"}),
                            upd("user_message", "u2", content=[text("Hi")]),
                            upd("agent_message_chunk", "live", content=text("Part 1; "))]
    live = upd("agent_message_chunk", "live", content=text("part 2; "))
    inside = streaming + [resume(5), *REPLAYED, live, MARKER, res(5)]
    assert outcomes(inside, 2, ["MID-V2-13"], PREVIEW).get("warn") == {
        "MID-V2-13/live-inside"}
    before = streaming + [resume(5), live, *REPLAYED, MARKER, res(5)]
    found = outcomes(before, 2, ["MID-V2-13"], PREVIEW)
    assert found.get("info") == {"MID-V2-13/live-before-replay"} and "warn" not in found
    primed = streaming + [resume(5), *REPLAYED,
                          upd("agent_message", "live", content=[text("Part 1; ")]), live,
                          MARKER, res(5)]
    assert not {"warn", "fail"} & set(outcomes(primed, 2, ["MID-V2-13"], PREVIEW))
    # the live chunk is MID-V2-13's alone: the replay rules do not take it for history
    every = outcomes(inside, 2, ["MID-V2-13", "MID-V2-06", "MID-V2-11", "MID-V2-12"], PREVIEW)
    assert every.get("warn") == {"MID-V2-13/live-inside"} and "fail" not in every, every
    # a replay that rebuilds the streaming message from its first chunk is history: no
    # live chunk, but chunks without a primer upsert (MID-V2-12)
    rebuilt = streaming + [resume(5), *REPLAYED[:1],
                           upd("agent_message_chunk", "live", content=text("Part 1; ")),
                           MARKER, res(5)]
    found = outcomes(rebuilt, 2, ["MID-V2-13", "MID-V2-12"], PREVIEW)
    assert found.get("fail") == {"MID-V2-12"} and "warn" not in found, found
    # without a marker the response ends the window: the turn streams on after it, live
    unmarked = streaming + [resume(5), *REPLAYED, res(5), live]
    older = Options(profile=get_profile("acp-sdk-2.4.0"))
    for options in (PREVIEW, older):
        found = outcomes(unmarked, 2, ["MID-V2-06"], options)
        assert "fail" not in found, found
    # an idle before the prompt's acceptance (a state report) leaves the stream in view
    reported = streaming[:5] + [upd("state_update", state="idle")] + streaming[5:]
    assert outcomes(reported + inside[len(streaming):], 2, ["MID-V2-13"], PREVIEW).get(
        "warn") == {"MID-V2-13/live-inside"}


KEYED = Options(profile=get_profile("acp-schema-1.21"))


def keyed(rid: int, key: str, words: str = "Hello") -> Line:
    return req(rid, "session/prompt", sessionId="s", prompt=[text(words)], idempotencyKey=key)


def echo(mid: str, words: str = "Hello") -> Line:
    return upd("user_message", mid, content=[text(words)])


IDLE = upd("state_update", state="idle", stopReason="end_turn")
FIRST = [keyed(2, "k1"), res(2, {"messageId": "u1"}), echo("u1"), IDLE]


@pytest.mark.parametrize("after,found", [
    ([keyed(3, "k1"), res(3, {"messageId": "u1"})], {}),
    ([keyed(3, "k1"), res(3, {"messageId": "u9"})], {"fail": {"MID-V2-15/same-id"}}),
    ([keyed(3, "k1"), res(3, error=True)], {"fail": {"MID-V2-15/same-id"}}),
    ([keyed(3, "k1"), res(3, {"messageId": "u1"}), echo("u7")],
     {"fail": {"MID-V2-15/one-insert"}}),
    ([keyed(3, "k1"), res(3, {"messageId": "u1"}), echo("u1")],
     {"info": {"MID-V2-15/repeated-echo"}}),
    ([keyed(3, "k1", "Other"), res(3, {"messageId": "u1"})], {"info": {"MID-V2-15/conflict"}}),
    ([keyed(3, "k2"), res(3, {"messageId": "u1"}), echo("u1"), IDLE],
     {"fail": {"MID-V2-15/distinct-keys"}}),
    ([keyed(3, "k2"), res(3, {"messageId": "u2"}), echo("u2"), IDLE], {}),
    ([keyed(3, "k1"), res(3, {"messageId": "u1"}), resume(4), echo("u1"), echo("u5"),
      upd("replay_complete"), res(4)], {"fail": {"MID-V2-15/one-replay"}}),
    ([keyed(3, "k1"), res(3, {"messageId": "u1"}), resume(4), echo("u1"),
      upd("replay_complete"), res(4)], {}),
])
def test_prompt_retries(after: list[Line], found: dict[str, set[str]]) -> None:
    got = outcomes(start(2) + FIRST + after, 2, ["MID-V2-15"], KEYED)
    assert {o: r for o, r in got.items() if o in ("fail", "warn", "info")} == found, got


def test_a_valid_key_rejected_and_a_retry_while_pending() -> None:
    rejected = start(2) + [keyed(2, "k1"), ("agent", {"jsonrpc": "2.0", "id": 2, "error": {
        "code": -32602, "message": "unknown field idempotencyKey"}})]
    assert outcomes(rejected, 2, ["MID-V2-15"], KEYED).get("fail") == {
        "MID-V2-15/rejected-key"}
    pending = start(2) + [keyed(2, "k1"), keyed(3, "k1"), res(3, error=True),
                          res(2, {"messageId": "u1"}), echo("u1"), IDLE]
    assert outcomes(pending, 2, ["MID-V2-15"], KEYED).get("info") == {
        "MID-V2-15/pending-error"}
    for name in ("acp-sdk-2.4.0", "acp-repo-2026-08-22"):
        found = grade(transcript(2, rejected).entries, protocol=2,
                      options=Options(profile=get_profile(name)), select=["MID-V2-15"])
        assert {f.reason for f in found} == {Reason.ALLOWED_BY_PROFILE}


def refusal(rid: int) -> Line:
    return ("agent", {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602,
                                                             "message": "Invalid params"}})


def test_a_bare_invalid_params_is_the_key_only_when_the_prompt_goes_through_without_it() -> None:
    """A -32602 that does not name the key proves nothing alone (the prompt may be refused
    for its content): the same prompt without the key, accepted, shows it was the key."""
    bare = start(2) + [keyed(2, "k1"), refusal(2)]
    assert not {"fail", "warn"} & set(outcomes(bare, 2, ["MID-V2-15"], KEYED))
    unkeyed = req(3, "session/prompt", sessionId="s", prompt=[text("Hello")])
    taken = bare + [unkeyed, res(3, {"messageId": "u3"}), echo("u3"), IDLE]
    assert outcomes(taken, 2, ["MID-V2-15"], KEYED).get("fail") == {"MID-V2-15/rejected-key"}
    refused_too = bare + [unkeyed, refusal(3)]
    assert not {"fail", "warn"} & set(outcomes(refused_too, 2, ["MID-V2-15"], KEYED))


@pytest.mark.parametrize("key", ["", "k" * 256])
@pytest.mark.parametrize("accepted", [False, True])
def test_an_empty_or_over_long_key_is_recorded(key: str, accepted: bool) -> None:
    answer = [res(2, {"messageId": "u2"}), echo("u2"), IDLE] if accepted else [refusal(2)]
    found = outcomes(start(2) + [keyed(2, key), *answer], 2, ["MID-V2-15"], KEYED)
    assert found.get("info") == {"MID-V2-15/invalid-key"}, found
    assert not {"fail", "warn"} & set(found), found


@pytest.mark.parametrize("profile,keyed", [("acp-sdk-2.4.0", False), ("acp-schema-1.21", True)])
def test_the_driver_sends_a_key_only_under_the_new_profile(tmp_path: Path, profile: str,
                                                           keyed: bool) -> None:
    """The real command line against the reference agent: under acp-schema-1.21 every v2
    prompt carries a fresh idempotencyKey and the replay ends with replay_complete; under
    the default profile no prompt carries one and the marker rules are not applicable."""
    report = tmp_path / "report.json"
    proc = run_cli("--agent", REFERENCE, "--protocol", "2", "--profile", profile,
                   "--case", "identical-prompts", "--case", "replayed-user-ids",
                   "--json", str(report), "--transcripts", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    keys = []
    for path in (tmp_path / "t").glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            msg = json.loads(line).get("msg")
            if isinstance(msg, dict) and msg.get("method") == "session/prompt":
                keys.append(msg["params"].get("idempotencyKey"))
    assert keys and (all(isinstance(k, str) for k in keys) if keyed else
                     all(k is None for k in keys))
    assert len(set(keys)) == (len(keys) if keyed else 1)
    rows = [r for r in load_json(report)["results"] if r["requirement"].startswith("MID-V2-13")]
    if keyed:
        assert any(r["outcome"] == "pass" for r in rows)
    else:
        assert {r.get("reason") for r in rows} == {"allowed_by_profile"}


@pytest.mark.parametrize("capabilities,found", [
    ({"session": {"rewind": {}}}, {"info": {"MID-V2-16/advertised"}}),
    ({"session": {"fork": {"messageId": True}}}, {"info": {"MID-V2-16/advertised"}}),
    ({"session": {"fork": {}}}, {}),
    ({"session": {}}, {}),
])
def test_id_addressed_methods_are_recorded(capabilities: dict[str, Any],
                                           found: dict[str, set[str]]) -> None:
    lines = [req(0, "initialize", protocolVersion=2),
             res(0, {"protocolVersion": 2, "capabilities": capabilities})]
    for options in (Options(), PREVIEW):
        got = outcomes(lines, 2, ["MID-V2-16"], options)
        assert {o: r for o, r in got.items() if o != "not_applicable"} == found, got


@pytest.mark.parametrize("marker", [False, True])
def test_the_agent_double_ends_a_v2_replay_with_the_marker_under_the_profile(
        marker: bool) -> None:
    from conformance.client.double_engine import DoubleEngine
    from conformance.client.script import TurnScript

    replay = tuple({"sessionUpdate": "agent_message", "messageId": f"r{i}",
                    "content": [text(f"replayed {i}")]} for i in range(2))
    reload = TurnScript("reload", "", False, (), replay=replay, reload=True)
    engine = DoubleEngine(protocol=2, next_turn=lambda: reload, load_session=True)
    engine.replay_marker = marker
    engine.feed({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                 "params": {"protocolVersion": 2}})
    engine.take()
    engine.feed({"jsonrpc": "2.0", "id": 4, "method": "session/resume",
                 "params": {"sessionId": "sess-1", "cwd": "/", "replayFrom": {"type": "start"}}})
    lines = [item for kind, item in engine.take() if kind == "line"]
    kinds = [m["params"]["update"]["sessionUpdate"] if m.get("method") else "response"
             for m in lines]
    assert kinds == ["agent_message", "agent_message",
                     *(["replay_complete"] if marker else []), "response"]


@pytest.mark.parametrize("profile,marker", [("acp-sdk-2.4.0", False), ("acp-schema-1.21", True)])
def test_the_client_suite_replays_with_the_marker_under_the_new_profile(
        tmp_path: Path, profile: str, marker: bool) -> None:
    """The reference client (in-process adapter) passes the reload cases under both
    profiles; only under acp-schema-1.21 do the double's replays end with the marker."""
    report = tmp_path / "report.json"
    proc = run_cli("--client-adapter", "conformance.client.reference:make_client",
                   "--profile", profile, "--protocol", "2", "--case", "client-reload*",
                   "--json", str(report), "--transcripts", str(tmp_path / "t"),
                   "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    texts = [p.read_text(encoding="utf-8") for p in (tmp_path / "t").glob("*.jsonl")]
    assert texts and any("replay_complete" in t for t in texts) == marker


@pytest.mark.parametrize("agent,verdict", [("fixtures/agents/v2_key_new_id.py", 1), (None, 0)])
def test_the_fuzzer_retries_a_prompt_whose_response_was_lost(tmp_path: Path, agent: str | None,
                                                             verdict: int) -> None:
    """Under acp-schema-1.21 the agent fuzzer's "response lost" step retries the last
    prompt with its idempotencyKey: it finds an agent that answers a retry with a new ID,
    and nothing on the reference agent (seed-fixed)."""
    command = (f"{sys.executable} {agent}" if agent else REFERENCE)
    report = tmp_path / "report.json"
    proc = run_cli("fuzz", "--agent", command, "--protocol", "2", "--profile", "acp-schema-1.21",
                   "--max-examples", "40", "--seed", "7", "--no-save", "--timeout", "5",
                   "--out", str(tmp_path / "out"), "--json", str(report), timeout=400)
    assert proc.returncode == verdict, proc.stdout[-2000:] + proc.stderr
    failed = {r["requirement"] for r in load_json(report)["results"] if r["outcome"] == "fail"}
    assert failed == ({"MID-V2-15/same-id"} if verdict else set())


def test_an_agent_without_id_addressed_methods_is_not_short_of_a_must() -> None:
    """MID-V2-16 is a MUST about optional methods: an agent that advertises none is
    not_applicable for lack of the capability (its choice), which the headline's coverage
    leaves out, not "not testable" (a gap in the measurement)."""
    lines = [req(0, "initialize", protocolVersion=2),
             res(0, {"protocolVersion": 2, "capabilities": {"session": {}}})]
    for options in (Options(), PREVIEW):
        rows = grade(transcript(2, lines).entries, protocol=2, options=options,
                     select=["MID-V2-16"])
        assert {f.requirement for f in rows} == {
            "MID-V2-16/advertised", "MID-V2-16/unknown-id", "MID-V2-16/error-code"}
        assert {(f.outcome, f.reason) for f in rows} == {
            (Outcome.NOT_APPLICABLE, Reason.NO_CAPABILITY)}


def _rewound(answer: Line, mid: str = "never") -> list[Line]:
    """A v2 agent advertising session.rewind, one turn (user u2, agent a1), then a
    session/rewind naming ``mid`` and the agent's ``answer`` to it (request 9)."""
    return [req(0, "initialize", protocolVersion=2),
            res(0, {"protocolVersion": 2, "capabilities": {"session": {"rewind": {}}}}),
            req(1, "session/new"), res(1, {"sessionId": "s"}),
            *v2_turn(2, [upd("agent_message_chunk", "a1", content=text("Hi"))]),
            req(9, "session/rewind", sessionId="s", toMessageId=mid), answer]


def _error(rid: int, code: int, data: Any = None) -> Line:
    error: dict[str, Any] = {"code": code, "message": "no"}
    if data is not None:
        error["data"] = data
    return ("agent", {"jsonrpc": "2.0", "id": rid, "error": error})


UNKNOWN = {"reason": "unknown_message_id"}


@pytest.mark.parametrize("lines,found", [
    (_rewound(res(9, {"lastMessageId": "a1"})), {"fail": {"MID-V2-16/unknown-id"}}),
    (_rewound(_error(9, -32602)), {"warn": {"MID-V2-16/error-code"},
                                   "pass": {"MID-V2-16/unknown-id"}}),  # refused: no harm done
    (_rewound(_error(9, -32002)), {"warn": {"MID-V2-16/error-code"},  # no reason
                                   "pass": {"MID-V2-16/unknown-id"}}),
    (_rewound(_error(9, -32002, UNKNOWN)), {"pass": {"MID-V2-16/unknown-id",
                                                      "MID-V2-16/error-code"}}),
    # near misses: the agent's own IDs with their case flipped are IDs it never sent
    (_rewound(res(9, {"lastMessageId": "a1"}), "A1"), {"fail": {"MID-V2-16/unknown-id"}}),
    # IDs it did send (a chunk's, the prompt response's): a rewind that may succeed
    (_rewound(res(9, {"lastMessageId": "a1"}), "a1"), {}),
    (_rewound(res(9, {"lastMessageId": "u2"}), "u2"), {}),
], ids=["success", "other-code", "no-reason", "unknown-message-id", "near-miss",
        "sent-chunk-id", "sent-response-id"])
def test_an_id_addressed_method_given_an_id_the_agent_never_sent(
        lines: list[Line], found: dict[str, set[str]]) -> None:
    got = outcomes(lines, 2, ["MID-V2-16/unknown-id", "MID-V2-16/error-code"])
    assert {o: r for o, r in got.items() if o in ("fail", "warn", "pass")} == found, got


@pytest.mark.parametrize("agent,rows", [
    ("_rewind", {("MID-V2-16/unknown-id", "pass"), ("MID-V2-16/error-code", "pass")}),
    (None, {("MID-V2-16/unknown-id", "not_applicable"),
            ("MID-V2-16/error-code", "not_applicable")}),
])
def test_rewind_is_driven_with_ids_the_agent_never_sent(tmp_path: Path, agent: str | None,
                                                        rows: set[tuple[str, str]]) -> None:
    """The positive control (an agent with the drafted rewind methods that refuses an ID it
    never sent as the draft says) passes both sub-rules, after the suite called
    session/rewind and session/edit_prompt with a never-seen ID, a near miss and an ID of
    another session; the reference agent advertises no rewind: nothing is called."""
    command = f"{sys.executable} fixtures/agents/{agent}.py" if agent else REFERENCE
    report = tmp_path / "report.json"
    proc = run_cli("--agent", command, "--protocol", "2", "--case", "id-addressed-methods",
                   "--json", str(report), "--transcripts", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {(r["requirement"], r["outcome"]) for r in load_json(report)["results"]
           if r["requirement"] in ("MID-V2-16/unknown-id", "MID-V2-16/error-code")}
    assert got == rows
    (path,) = (tmp_path / "t").glob("*.jsonl")
    calls = [m["params"] for m in (json.loads(x).get("msg") for x in
                                   path.read_text(encoding="utf-8").splitlines()[1:])
             if isinstance(m, dict) and m.get("method") in ("session/rewind",
                                                             "session/edit_prompt")]
    if agent is None:
        assert calls == []
        return
    named = [c.get("toMessageId", c.get("messageId")) for c in calls]
    assert len(named) == 6 and len(set(named)) == 3, named  # 3 IDs x 2 methods
    assert "msg-never-sent-by-the-agent" in named
    assert len({c["sessionId"] for c in calls}) == 1
