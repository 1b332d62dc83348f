"""The interop matrix's own data and logic (fast: no installs, no real targets).

The matrix itself runs with ``tox -e interop`` (pytest items, ``interop/test_matrix.py``);
these tests keep its files honest:
every target is pinned, has a baseline for every run, and its command line is
complete; the comparison with a baseline reports exactly the differences.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("interop_matrix", ROOT / "interop" / "matrix.py")
assert _spec is not None and _spec.loader is not None
interop = importlib.util.module_from_spec(_spec)
sys.modules["interop_matrix"] = interop
_spec.loader.exec_module(interop)

TARGETS = interop.load_targets([])
PINNED = re.compile(r"(@\d+\.\d+\.\d+$)|(==\d+\.\d+\.\d+((a|b|rc)\d+)?$)")  # a pre-release too
OUTCOMES = set(interop.OUTCOME_ORDER)


def test_the_matrix_holds_the_required_targets() -> None:
    assert {t.name for t in TARGETS} >= {"codex-acp", "opencode", "gemini-cli", "fast-agent",
                                          "python-sdk-echo", "acpx", "python-sdk-client",
                                          "python-sdk-v2-agent", "python-sdk-v2-client",
                                          "ts-sdk-v2-agent", "ts-sdk-v2-client", "conductor"}
    # the proxy role's target: a chain that routes the suite's client through it to an agent
    assert {t.name for t in TARGETS if t.role == "proxy"} >= {"conductor"}


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_installs_are_pinned(target: interop.Target) -> None:
    for step in target.install:
        specs = step.get("npm") or step.get("pip") or step.get("sdist")
        for spec in specs if isinstance(specs, list) else [specs]:
            assert PINNED.search(str(spec)), f"{target.name}: {spec} is not pinned"


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_every_run_has_a_baseline_of_known_outcomes(target: interop.Target) -> None:
    for run in target.runs:
        expected = target.expect.get(run.name)
        assert expected, f"{target.name}/{run.name}: no baseline"
        for proto, rules in expected.items():
            assert proto in ("v1", "v2")
            for rule, outcome in rules.items():
                allowed = outcome if isinstance(outcome, list) else [outcome]
                assert set(allowed) <= OUTCOMES, f"{target.name} {proto} {rule}: {outcome}"


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_command_line_is_complete(target: interop.Target, tmp_path: Path) -> None:
    inst = interop.Installer(tmp_path / "cache", verbose=False)
    for run in target.runs:
        out = tmp_path / run.name
        out.mkdir()
        argv = interop.conformance_command(target, run, inst, out)
        for proto in interop.protocols_of(run):  # one matrix item per version
            narrowed = interop.conformance_command(target, run, inst, out, proto)
            assert narrowed[narrowed.index("--protocol") + 1] == proto[1:]
        text = " ".join(argv)
        leftover = set(re.findall(r"\{(\w+)\}", text)) - {"model_url", "agent", "prompt"}
        assert not leftover, f"unfilled placeholders {leftover}"
        agent = interop.behind(run) or target  # a proxy run: the agent behind the proxy
        assert ("--model-server" in argv) == agent.model_server
        assert argv[argv.index("--jobs") + 1] == "1"  # the cases of a run share its {home}
        if run.model_script:
            assert Path(argv[argv.index("--model-script") + 1]).is_file()
        for template in out.glob("config-*.in"):
            assert "{model_url}" in template.read_text(encoding="utf-8")
        if target.role == "client":
            profile = Path(argv[argv.index("--client-profile") + 1])
            assert profile.is_file()
            # a one-shot client's load command line names its install: filled in a copy
            left = set(re.findall(r"\{(\w+)\}", profile.read_text(encoding="utf-8")))
            assert left <= {"agent", "session", "prompt"}, f"unfilled in the profile: {left}"
        if target.role == "proxy":
            assert "{agent}" in argv[argv.index("--proxy") + 1]
            assert ("--agent" in argv) == (run.agent is not None)


def test_verdicts_are_the_worst_outcome_per_protocol_and_rule() -> None:
    report = {"results": [
        {"case": "a@v1", "requirement": "MID-A-02", "outcome": "pass"},
        {"case": "b@v1", "requirement": "MID-A-02", "outcome": "fail"},
        {"case": "b@v2", "requirement": "MID-A-02", "outcome": "not_applicable"},
        {"case": "b@v2", "requirement": "MID-A-03", "outcome": "warn"},
    ]}
    assert interop.verdicts_of(report) == {"v1": {"MID-A-02": "fail"},
                                           "v2": {"MID-A-02": "not_applicable",
                                                  "MID-A-03": "warn"}}


def test_compare_reports_each_difference(tmp_path: Path) -> None:
    target = TARGETS[0]
    run = interop.Run("r")
    target = interop.Target(**{**target.__dict__, "expect": {"r": {"v1": {
        "MID-A-02": "pass", "MID-A-03": ["pass", "warn"], "MID-A-05": "info"}}}})
    res = interop.RunResult(target, run, "v1", 1.0, {"v1": {
        "MID-A-02": "fail", "MID-A-03": "warn", "MID-S-01": "pass"}})
    assert interop.compare(res) == [
        "v1 MID-A-02: expected pass, got fail",
        "v1 MID-A-05: expected info, got absent",
        "v1 MID-S-01: expected absent, got pass",
    ]
    assert interop.compare(interop.RunResult(target, run, "v2", 1.0, {})) == [
        "no baseline recorded for v2 (run with --update)"]
    res.error = "exit 3: boom"
    assert interop.compare(res) == ["run failed: exit 3: boom"]


def test_update_rewrites_one_protocol_of_one_run_and_keeps_the_rest(tmp_path: Path) -> None:
    """--update from one matrix item touches only its (run, protocol) baseline; a list of
    allowed outcomes survives when the new verdict is one of them; the file stays loadable."""
    source = next(t for t in TARGETS if t.name == "codex-acp").path
    path = tmp_path / source.name
    path.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    target = interop.load_target(path)
    before = target.expect
    verdicts = dict(before["suite"]["v2"])
    verdicts["MID-A-02/interleave"] = "fail"
    verdicts["TARGET/shutdown"] = "warn"  # the baseline allows [pass, warn]
    interop.update_baseline(interop.RunResult(target, interop.Run("suite"), "v2", 1.0,
                                              {"v2": verdicts}), tmp_path / "locks")
    after = interop.load_target(path).expect
    assert after["suite"]["v2"]["MID-A-02/interleave"] == "fail"
    assert after["suite"]["v2"]["TARGET/shutdown"] == ["pass", "warn"]
    assert after["suite"]["v1"] == before["suite"]["v1"]
    assert after["provider-repeats-ids"] == before["provider-repeats-ids"]
    text = path.read_text(encoding="utf-8")
    assert text.count(interop.BASELINE_NOTE[0]) == 1 and "interop/run.py" not in text
    head = source.read_text(encoding="utf-8").split("\n# Verdicts per run", 1)[0]
    assert text.startswith(head)


def test_a_bad_target_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.yaml"
    bad.write_text("name: x\nrole: agent\ninstal: []\n", encoding="utf-8")
    with pytest.raises(interop.InteropError, match=r"x\.yaml: unknown key\(s\): instal"):
        interop.load_target(bad)


def test_the_cache_is_never_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACP_INTEROP_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/cache")
    assert interop.cache_root(None) == Path("/somewhere/cache/acp-conformance-interop")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert ROOT not in interop.cache_root(None).parents


def test_a_message_shown_with_its_end_trimmed_has_not_lost_content() -> None:
    """Found on acpx, which trims thoughts: the observer recognised 'Thinking it over. '
    only with its trailing space, and reported the thought as lost (a fault of ours)."""
    from conformance.checks.reducer import text_index, tokenize

    known = text_index(["Thinking it over. ", "Alpha. "])
    assert tokenize("Thinking it over.", known) == [(0, "Thinking it over. ")]
    assert tokenize("Alpha. Thinking it over.", known) == [(0, "Alpha. "),
                                                           (7, "Thinking it over. ")]
    assert tokenize("Thinking it", known) == []  # a cut text is still not recognised
