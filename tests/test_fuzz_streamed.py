"""The fuzzer's look after each step (``conformance.fuzz.grading.Streamed``) against
grading the whole run so far, as the fuzzer did before it: on many generated runs of the
reference agent and of broken fixtures (fails of every kind, some only a checker's
``finish`` reports), at every step of every run.

``Streamed`` keeps the checkers between steps and feeds them only the new entries; the
fuzzer grades the whole run only when it says yes. So it must never say no where the
whole grading finds a violation (a finding lost), and it says yes exactly where the
checkers' grading of the run so far has a fail (or a warn under ``strict``) before the
folds (so the whole grading is not run at every step again).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import fixture_target, reference_target

from conformance.checks import grade
from conformance.fuzz import grading
from conformance.fuzz.agent_fuzz import run_agent_fuzz
from conformance.fuzz.agent_machine import AgentFuzzConfig
from conformance.fuzz.settings import get_effort
from conformance.grading import Scope, grade_recorded
from conformance.results import Outcome

# fixtures whose faults show while a turn streams, in a replay, only at the end of the
# transcript (a checker's finish: IDs on some kinds only, none at all), and after a cancel
TARGETS = ["reference", "per_turn_counter", "mixed_presence", "no_ids", "v2_replay_without_id",
           "numeric_id", "update_after_cancel", "v2_no_echo", "swapped_replay_ids",
           "late_replay"]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "default"])
@pytest.mark.parametrize("name", TARGETS)
def test_streamed_look_equals_grading_the_whole_run(tmp_path: Path, name: str, strict: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    looks: list[tuple[int, bool, bool, bool]] = []  # (entries, streamed, raw, violation)
    may_violate = grading.Streamed.may_violate

    def compared(self: grading.Streamed, strict_: bool) -> bool:
        got = may_violate(self, strict_)
        t = self.transcript
        scope = Scope.from_header(t.header)
        bad = {Outcome.FAIL, Outcome.WARN} if strict_ or scope.strict else {Outcome.FAIL}
        entries = list(t.entries[:self.fed])
        raw = any(f.outcome in bad for f in grade(
            entries, protocol=int(t.header["protocol"]), options=scope.options(),
            role=scope.role))
        whole = bool(grading.violations(grade_recorded(t.header, entries),
                                        strict_))
        looks.append((len(entries), got, raw, whole))
        return got

    monkeypatch.setattr(grading.Streamed, "may_violate", compared)
    target = (reference_target(tmp_path / "state") if name == "reference"
              else fixture_target(name, tmp_path / "state"))
    config = AgentFuzzConfig(target, strict=strict, max_failures=None, shrink_attempts=1,
                             generate_only=True)
    run_agent_fuzz(config, get_effort("ci", max_examples=12), seed=5)
    assert len(looks) >= 12, looks
    # under strict every broken fixture is found (so the comparison covers looks that say
    # yes; without strict a SHOULD breach is no violation), the reference agent never is
    if strict or name == "reference":
        assert any(whole for *_, whole in looks) is (name != "reference"), looks
    lost = [look for look in looks if look[3] and not look[1]]
    assert not lost, f"a violation the streamed look missed: {lost}"
    assert all(got == raw for _, got, raw, _ in looks), [
        look for look in looks if look[1] != look[2]]
