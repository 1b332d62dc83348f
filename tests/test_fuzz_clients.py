"""Client fuzzing: generated streams played by the agent double against clients.

In-process clients (the adapter API) make each generated turn cheap, so these
tests fuzz the reference client and a broken one for real, shrink through
Hypothesis, save the counterexample and replay it. One test drives a client
process through a pty with its profile, the way a person would.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, run_cli

from conformance.checks import Options
from conformance.client.runner import reference_client
from conformance.fuzz import client_fuzz, regressions
from conformance.fuzz.client_fuzz import ClientChoice, ClientTarget, replay_client, run_client_fuzz
from conformance.fuzz.settings import get_effort

REFERENCE_ADAPTER = "conformance.client.reference:make_client"
CI = get_effort("ci")


def adapter(name: str) -> str:
    return f"{REPO_ROOT / 'fixtures' / 'clients' / name}.py:make_client"


def args(*, client: str | None = None, client_adapter: str | None = None) -> ClientChoice:
    return ClientChoice(client, client_adapter, timeout=5.0)


def test_reference_client_survives_the_ci_profile() -> None:
    target = ClientTarget("reference client", adapter=REFERENCE_ADAPTER)
    result = run_client_fuzz(target, CI, seed=11, strict=True)
    assert result.failures == [], [(f.requirement, f.stream) for f in result.failures]
    assert result.examples >= CI.max_examples
    rows = {r for cov in result.coverage.values() for r, f in cov.items()
            if f.outcome.value == "pass"}
    assert {"MID-C-02/merged", "MID-C-03/content", "MID-C-08/probe"} <= rows


def test_a_budget_spent_before_the_first_stream_still_plays_one() -> None:
    """As the agent fuzzer (tests/test_fuzz_agents.py): a time budget the start-up used up
    still plays one stream; no fuzz run ends with nothing generated."""
    target = ClientTarget("reference client", adapter=REFERENCE_ADAPTER)
    result = run_client_fuzz(target, get_effort("ci", time_budget=1e-6), seed=11, strict=True)
    assert result.failures == []
    assert result.examples == 1


def test_broken_client_is_found_shrunk_saved_and_replayed(tmp_path: Path) -> None:
    target = ClientTarget("sorted_by_id", adapter=adapter("sorted_by_id"))
    result = run_client_fuzz(target, CI, seed=3, strict=True, max_failures=1)
    assert [f.requirement for f in result.failures] == ["MID-C-02/order"]
    failure = result.failures[0]
    # Shrunk: one or two one-chunk messages (with the echo) are enough to show the order.
    assert len(failure.stream["steps"]) <= 2
    assert all(len(step) == 2 for step in failure.stream["steps"])  # a text and an id
    fp = regressions.failure_fingerprint(failure)
    saved = regressions.save(tmp_path, fingerprint_=fp,
                             header=regressions.regression_header(failure, result, Options(), True),
                             entries=failure.transcript.entries)
    reg = regressions.read(saved.path)
    assert reg.role == "client" and reg.stream == failure.stream
    still = replay_client(reg, args(client_adapter=adapter("sorted_by_id")), options=Options(),
                          strict=True)
    assert still.status == regressions.STILL_FAILING
    fixed = replay_client(reg, args(client_adapter=REFERENCE_ADAPTER), options=Options(),
                          strict=True)
    assert fixed.status == regressions.FIXED


def test_a_seed_repeats_a_client_run() -> None:
    target = ClientTarget("sorted_by_id", adapter=adapter("sorted_by_id"))
    runs = [run_client_fuzz(target, CI, seed=4, strict=True, max_failures=1) for _ in range(2)]
    assert runs[0].failures
    assert [f.stream for f in runs[0].failures] == [f.stream for f in runs[1].failures]


def test_wire_only_client_process_through_the_cli(tmp_path: Path) -> None:
    """No profile: the client is a real process, graded on the wire and by the probe."""
    script = REPO_ROOT / "fixtures" / "clients" / "invents_message_id.py"
    broken = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --agent-cmd {{agent}}"
    proc = run_cli("fuzz", "--client", broken, "--effort", "ci", "--seed", "2",
                   "--max-failures", "1", "--regressions", str(tmp_path), timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL MID-C-01 (v" in proc.stdout and "seed 2" in proc.stdout
    (saved,) = tmp_path.glob("*.jsonl")
    reg = regressions.read(saved)
    still = replay_client(reg, args(), options=Options(), strict=False)  # the recorded client
    assert still.status == regressions.STILL_FAILING
    command, _ = reference_client()
    fixed = replay_client(reg, args(client=command), options=Options(), strict=False)
    assert fixed.status == regressions.FIXED


CAUSES = {"MID-C-02", "MID-C-04", "MID-C-05", "MID-C-06", "MID-S-02", "MID-S-03"}


def test_a_fuzzed_cause_stands_only_when_its_control_rules_the_others_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """type_change_only groups by update type and reads no ID at all. Guessed from the
    pattern alone, its faults look like ID bugs (null unlike omitted, a malformed ID,
    a parsed ID); played again with their controls they are one fault, MID-C-03."""
    target = ClientTarget("type_change_only", adapter=adapter("type_change_only"))
    confirmed = run_client_fuzz(target, CI, seed=2, strict=True)
    rules = {f.requirement.split("/")[0] for f in confirmed.failures}
    assert "MID-C-03" in rules and not rules & CAUSES, rules
    for f in confirmed.failures:
        if f.requirement.startswith("MID-C-03/merged"):
            assert f.stream["controls"] is True
            # its control was shown the same way: two messages merged, or a chunk
            # attached to a message, with ordinary IDs too
            assert ("and so were the same two in the control stream" in f.finding.message
                    or "and so was its control" in f.finding.message), f.finding.message
    # The control of this test: the same run without the confirmation names causes.
    monkeypatch.setattr(client_fuzz, "confirm_cause", lambda failure, *args: failure)
    guessed = run_client_fuzz(target, CI, seed=2, strict=True)
    assert {f.requirement.split("/")[0] for f in guessed.failures} & CAUSES


def test_a_fuzzed_cause_its_control_confirms_is_kept_and_replays(tmp_path: Path) -> None:
    target = ClientTarget("case_insensitive", adapter=adapter("case_insensitive"))
    result = run_client_fuzz(target, CI, seed=1, strict=True, max_failures=1)
    [failure] = result.failures
    assert failure.requirement == "MID-C-02/merged" and failure.stream["controls"] is True
    assert "its control (the same arrangement with ordinary IDs) was shown as expected" in \
        failure.finding.message
    saved = regressions.save(tmp_path, fingerprint_=regressions.failure_fingerprint(failure),
                             header=regressions.regression_header(failure, result, Options(), True),
                             entries=failure.transcript.entries)
    reg = regressions.read(saved.path)
    still = replay_client(reg, args(client_adapter=adapter("case_insensitive")),
                          options=Options(), strict=True)
    fixed = replay_client(reg, args(client_adapter=REFERENCE_ADAPTER), options=Options(),
                          strict=True)
    assert (still.status, fixed.status) == (regressions.STILL_FAILING, regressions.FIXED)


@pytest.mark.parametrize("name,rule", [("exit_on_null_id", "MID-C-04"),
                                       ("exit_on_second_message", "MID-C-08/crash")])
def test_a_fuzzed_crash_is_put_down_to_its_stream_by_its_control(name: str, rule: str) -> None:
    """A client that dies on a stream is shown the stream's control: when it survives
    that, the crash is the fault of the rule the stream tests (with the exit and the
    unanswered probe as its consequences); when the control kills it too, it is
    MID-C-08/crash."""
    target = ClientTarget(name, adapter=adapter(name))
    stream = {**client_fuzz.stream_of(1, [{"agent": "Alpha. ", "id": "a1"},
                                          {"agent": "Beta. ", "id": None},
                                          {"agent": "Gamma. ", "id": "a2"}])}
    crash = client_fuzz.play_stream(target, 1, stream, options=Options())
    first = [f for f in crash.findings if f.outcome.value == "fail"]
    assert {f.requirement for f in first} >= {"MID-C-08/crash"}, first
    failure = client_fuzz.Failure(next(f for f in first if f.requirement == "MID-C-08/crash"),
                                  1, [], crash.transcript, first, role="client", stream=stream)
    confirmed = client_fuzz.confirm_cause(failure, target, Options(), True, None)
    assert confirmed.stream["controls"] is True
    assert confirmed.requirement == rule, [(f.requirement, f.message) for f in confirmed.findings]
    if rule != "MID-C-08/crash":
        assert "its control (the same turn with ordinary IDs) was shown" in \
            confirmed.finding.message
        assert any(c.startswith("MID-C-08/exit") for c in confirmed.finding.consequences)


def test_a_stream_the_client_refused_is_graded_as_check_and_the_live_run_grade_it(
        tmp_path: Path) -> None:
    """A v1-only client answered 2 carries on in v1: the case is "v2 unsupported by the
    client", not graded on v2 rules. The fuzzer grades its generated turn from the header
    the played case carries, so it gives the grade `check` gives the saved transcript
    and the live run gives a suite case against the same client: the negotiation's info
    row and nothing else (before, it graded every client rule, and its ID-less v2 stream
    broke MID-V2-07 under --strict)."""
    from helpers import cli_json

    from conformance.fuzz.grading import violations

    v1_only = adapter("v1_only")
    stream = client_fuzz.stream_of(2, [{"agent": "Alpha. ", "id": None},
                                       {"agent": "Beta. ", "id": None}])
    fuzzed = client_fuzz.play_stream(ClientTarget("v1_only", adapter=v1_only), 2, stream,
                                     options=Options(), strict=True)
    assert violations(fuzzed.findings, True) == []
    graded = {(f.requirement, f.outcome.value) for f in fuzzed.findings}
    assert graded == {("TARGET/negotiation", "info")}, graded
    assert fuzzed.note == "v2 unsupported by the client (it asked for 1)"

    saved = tmp_path / "fuzz.jsonl"
    fuzzed.transcript.save(saved)
    code, checked, out = cli_json(tmp_path, "check", "check", str(saved), "--strict")
    assert code == 0, out
    [case] = checked["cases"]
    assert case["reason"] == "version_unsupported" and case["note"] == fuzzed.note, case
    assert {(r["requirement"], r["outcome"]) for r in checked["results"]} == graded

    code, live, out = cli_json(tmp_path, "live", "--client-adapter", v1_only, "--protocol",
                               "2", "--case", "client-grouping", "--strict")
    assert live, out
    [case] = live["cases"]
    assert case["reason"] == "version_unsupported" and case["note"] == fuzzed.note, case
    assert {(r["requirement"], r["outcome"]) for r in live["results"]
            if r["outcome"] != "not_applicable"} == graded


def test_a_fuzz_run_against_a_client_that_refuses_the_version_breaks_no_rule() -> None:
    """Every generated v2 turn a v1-only client refuses is graded as not taken: the fuzz
    run reports no broken rule, and its coverage holds the negotiation's row alone."""
    target = ClientTarget("v1_only", adapter=adapter("v1_only"))
    result = run_client_fuzz(target, CI, seed=5, protocols=(2,), strict=True)
    assert result.failures == [], [(f.requirement, f.stream) for f in result.failures]
    assert {r: f.outcome.value for r, f in result.coverage[2].items()} == {
        "TARGET/negotiation": "info"}
