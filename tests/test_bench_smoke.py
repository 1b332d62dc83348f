"""Each benchmark runs on a tiny input and prints its ratio lines.

No timing is asserted (absolute and relative times on a shared machine are
noise): these tests only prove that every benchmark command still runs to its
end, measures both sides and prints its ``ratio ...`` lines, so bench/RESULTS.md
can be reproduced. The transcript generator's output is graded for real.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, cli_env, run_cli

RATIO = re.compile(r"^ratio [^:]+: \d+\.\d\dx", re.MULTILINE)


def bench(*args: str, timeout: float = 300,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, env={**cli_env(), **(env or {})}, timeout=timeout,
                          check=False)


def ratios(out: str) -> list[str]:
    return RATIO.findall(out)


def test_offline_check_on_a_tiny_transcript() -> None:
    done = bench("bench.offline_check", "--sizes", "2000", "--repeats", "1",
                 "--chunks-per-message", "20")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(ratios(done.stdout)) == 8  # cpu and wall, for both shapes with and without IDs
    for shape in ("long", "real"):
        for ids in ("", " no-ids"):
            assert f"memory check 2k {shape}{ids}: peak" in done.stdout
        assert f"violation 2k {shape}: exit 1, MID-A-02/cross-turn-reuse reported" in done.stdout


def test_offline_check_makes_its_workdir_or_says_why_not(tmp_path: Path) -> None:
    nested = tmp_path / "not" / "yet"
    done = bench("bench.offline_check", "--sizes", "500", "--repeats", "1", "--shapes", "real",
                 "--ids", "yes", "--workdir", str(nested))
    assert "Traceback" not in done.stderr, done.stderr
    assert len(ratios(done.stdout)) == 2, done.stdout + done.stderr
    assert nested.is_dir()
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    done = bench("bench.offline_check", "--sizes", "500", "--workdir", str(blocker / "under"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith(f"--workdir {blocker / 'under'}: "
                                                          "Not a directory"), done.stderr
    assert "Traceback" not in done.stderr


def test_real_shaped_transcripts_pass_and_the_planted_violation_fails(tmp_path: Path) -> None:
    """The real LLM shape: short token-sized runs, tool calls and thoughts, a replay."""
    from bench.gen_transcript import RUN_MAX, generate

    good, bad, bare = tmp_path / "good.jsonl", tmp_path / "bad.jsonl", tmp_path / "bare.jsonl"
    stats = generate(good, updates=3000, shape="real")
    generate(bad, updates=3000, shape="real", violation="cross-turn-reuse")
    generate(bare, updates=3000, shape="real", no_ids=True)
    runs: list[int] = []
    last = None
    for line in good.read_text(encoding="utf-8").splitlines()[1:]:
        msg = json.loads(line).get("msg") or {}
        if msg.get("method") == "session/load":
            break  # the live turns; the replay sends each message as one chunk
        u = msg.get("params", {}).get("update", {})
        mid = u.get("messageId") if u.get("sessionUpdate", "").endswith("_chunk") else None
        if mid is not None and mid == last:
            runs[-1] += 1
        elif mid is not None:
            runs.append(1)
        last = mid
    runs.sort()
    assert 6 <= runs[len(runs) // 2] <= 20 and max(runs) <= RUN_MAX, runs
    assert stats.updates >= 3000 and stats.messages >= len(runs) > 100, stats
    passed = run_cli("check", str(good), "--show", "all")
    assert passed.returncode == 0, passed.stdout
    assert "MID-A-08/stability" in passed.stdout and "tool" not in passed.stdout.lower()
    failed = run_cli("check", str(bad))
    assert failed.returncode == 1
    assert re.search(r"^MID-A-02/cross-turn-reuse\s+FAIL \d+ fail", failed.stdout, re.MULTILINE)
    no_ids = run_cli("check", str(bare), "--show", "all")
    assert no_ids.returncode == 0 and "MID-A-05/no-ids" in no_ids.stdout, no_ids.stdout


def test_generated_transcripts_pass_and_the_planted_violation_fails(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    for path, violation in ((good, "none"), (bad, "cross-turn-reuse")):
        done = bench("bench.gen_transcript", "--updates", "1500", "--turns", "3",
                     "--chunks-per-message", "20", "--violation", violation, "-o", str(path))
        assert done.returncode == 0, done.stderr
    passed = run_cli("check", str(good), "--show", "all")
    assert passed.returncode == 0, passed.stdout
    assert "MID-A-08/stability" in passed.stdout  # the replay was compared with the live turns
    failed = run_cli("check", str(bad))
    assert failed.returncode == 1
    assert re.search(r"^MID-A-02/cross-turn-reuse\s+FAIL \d+ fail", failed.stdout, re.MULTILINE)


def test_startup() -> None:
    done = bench("bench.startup", "--repeats", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(ratios(done.stdout)) == 3
    assert "heavy modules imported by --help: none" in done.stdout


def test_silent_client_on_one_case() -> None:
    done = bench("bench.silent_client", "--repeats", "1", "--case", "client-empty-id")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(ratios(done.stdout)) == 2
    assert "1 case(s) played" in done.stdout


@pytest.mark.slow
def test_live_overhead_on_one_case() -> None:
    done = bench("bench.live_overhead", "--repeats", "1", "--case", "prompt-lifecycle")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(ratios(done.stdout)) == 2
    assert "where the suite's time goes" in done.stdout


def test_fuzz_throughput_on_a_few_streams(tmp_path: Path) -> None:
    done = bench("bench.fuzz_throughput", "--streams", "3", "--pty-streams", "1", "--effort",
                 "ci", "--agents", "numeric_id", "--clients", "sorted_by_id", "--memory", "20",
                 env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr
    # the agents' state folder is the run's own: nothing of it is left behind
    assert not list(tmp_path.glob("acp-bench-state-*")), list(tmp_path.iterdir())
    assert re.search(r"^peak memory at 20 examples: fuzz loop [\d.]+ MB, Hypothesis generating "
                     r"alone [\d.]+ MB$", done.stdout, re.MULTILINE)
    assert len(ratios(done.stdout)) == 5  # loop/generation, pty twice, agents, clients
    assert re.search(r"^rate streams/s, reference client in-process \(adapter\): \d+ ",
                     done.stdout, re.MULTILINE)
    assert re.search(r"numeric_id .* MID-S-01/type \(\d+ steps\); yes", done.stdout)
    assert re.search(r"sorted_by_id .* MID-C-02/order", done.stdout)


def test_acplint_comparison_skips_cleanly_without_acplint() -> None:
    done = bench("bench.acplint_compare", "--no-install")
    assert done.returncode == 0, done.stderr
    assert "skip: acplint not installed" in done.stdout


def test_acplint_comparison_floor_without_acplint() -> None:
    """The floor: the raw driver's replay of the same exchanges, spread over the workers."""
    done = bench("bench.acplint_compare", "--floor-only", "--repeats", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    floors = re.findall(r"^  floor at -j (auto \(\d+\)|4) +([\d.]+) s  \[start-up [\d.]+ s \+ "
                        r"max\(sum of \d+ raw cases [\d.]+ s / \d+, longest [\d.]+ s\); the raw "
                        r"cases hold \d+ agent starts and \d+ grace windows \([\d.]+ s\)\]$",
                        done.stdout, re.MULTILINE)
    assert [f[0].split()[0] for f in floors] == ["auto", "4"]
    assert all(float(f[1]) > 0 for f in floors)
    for label in ("-j 1", "-j auto", "-j 4"):
        assert re.search(rf"^  acp-conformance {label} +wall +[\d.]+ s  cpu +[\d.]+ s  exit 0$",
                         done.stdout, re.MULTILINE), label


def test_peak_reports_the_commands_own_memory() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.peak", "-c",
                           "import sys; b = bytearray(64 * 1024 * 1024); sys.exit(3)"],
                          capture_output=True, text=True, cwd=REPO_ROOT, env=cli_env(),
                          timeout=60, check=False)
    assert done.returncode == 3  # the command's own exit status
    found = re.search(r"^PEAK_RSS_KB (\d+)$", done.stderr, re.MULTILINE)
    assert found and int(found.group(1)) > 64 * 1024


def test_fuzz_model_side_on_a_few_runs() -> None:
    done = bench("bench.fuzz_model_side", "--effort", "ci")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^generated runs/s, llm_responses_agent \(model side drawn, strict\): [\d.]+ ",
                     done.stdout, re.MULTILINE)
    assert "POSITIVE CONTROL FAILED" not in done.stdout
    assert re.search(r"llm_passthrough_ids .* MID-", done.stdout)
    assert "baseline, llm_passthrough_ids with the model's fixed default script" in done.stdout
    assert len(ratios(done.stdout)) == 1


def test_jobs_against_serial_on_a_few_cases(tmp_path: Path) -> None:
    """The real agent's part reads the interop matrix's target and cache: with an empty
    cache it says how to install the target, in one line."""
    done = bench("bench.jobs", "--quick", "--real", "codex-acp", timeout=600,
                 env={"ACP_INTEROP_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(ratios(done.stdout)) == 2  # the slow-starting agent and the reference agent
    assert done.stdout.count("same verdict at -j 1 and -j ") == 2
    assert "same verdict at -j 1 and -j 4: NO" not in done.stdout
    assert ("skip: codex-acp is not installed (tox -e interop -- --install-only -k codex-acp)"
            in done.stdout)


@pytest.mark.parametrize("fixture", ["crash_mid_stream", "client:exits_early"])
def test_hostile_runs_time_one_fixture(fixture: str) -> None:
    done = bench("bench.hostile_runs", "--timeout", "2", "--only", fixture, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(rf"^{fixture}: \d+\.\d s wall, exit 1 \(bound 19 s\) ok$",
                     done.stdout, re.MULTILINE), done.stdout


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("hypofuzz") is None,
                    reason="HypoFuzz is not installed: it is optional, and its licence allows "
                           "non-commercial use only (the campaign extra has it)")
def test_campaign_against_plain_fuzz_quick() -> None:
    """A HypoFuzz -n 2 campaign and plain fuzz on one fixture, executions at 1 and 2
    workers: every command bounded (20 s to a finding, 5 s of counting)."""
    done = bench("bench.campaign", "--quick", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "time to the first confirmed finding" in done.stdout
    assert re.search(r"^  -n 1: \d+ executions", done.stdout, re.MULTILINE), done.stdout
    assert re.search(r"^  -n 2: \d+ executions", done.stdout, re.MULTILINE), done.stdout


@pytest.mark.slow
def test_fuzz_scale_measures_the_floor_and_the_workers() -> None:
    """One generated run against its raw-driver floor, --workers 2 against 1, and persistent
    mode against a fresh process per run."""
    done = bench("bench.fuzz_scale", "--runs", "4", "--repeats", "1", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(ratios(done.stdout)) == 3, done.stdout
    assert "ratio persistent/fresh-process seconds per run" in done.stdout
    assert re.search(r"^  raw driver  \d+ runs in", done.stdout, re.MULTILINE), done.stdout
    assert re.search(r"^  --workers 2  \d+ runs in", done.stdout, re.MULTILINE), done.stdout
    # the CPU split: every pass names our processes and the agents', each with its count
    one = r"harness [\d.]+ s \(1 proc, sys [\d.]+\), agent [\d.]+ s \(\d+ proc"
    two = r"harness [\d.]+ s \(1 proc, sys [\d.]+\), worker [\d.]+ s \(2 proc, sys [\d.]+\), agent"
    assert re.search(rf"^      cpu split of [\d.]+ s: {one}", done.stdout, re.MULTILINE), done.stdout
    assert re.search(rf"^      cpu split of [\d.]+ s: {two}", done.stdout, re.MULTILINE), done.stdout


@pytest.mark.slow
def test_fuzz_scale_takes_another_agent() -> None:
    """--agent: the workers part only, on the agent given (here a fixture agent, v1)."""
    agent = f"{sys.executable} {REPO_ROOT / 'fixtures' / 'agents' / 'numeric_id.py'}"
    done = bench("bench.fuzz_scale", "--only", "workers", "--runs", "2", "--repeats", "1",
                 "--agent", agent, "--protocol", "1", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"against {agent}," in done.stdout
    assert "raw driver" not in done.stdout  # the floor needs the reference agent's runs
    assert len(ratios(done.stdout)) == 1, done.stdout
    assert re.search(r"agent [\d.]+ s \(\d+ proc", done.stdout), done.stdout


@pytest.mark.slow
def test_campaign_control_logs_every_mode_and_replays_both_sets() -> None:
    """The HypoFuzz control: each mode's runs logged by the probe plugin; with HypoFuzz
    installed, its inputs and the plain engine's replayed by the plain player."""
    done = bench("bench.campaign_control", "--seconds", "4", "--replay", "1", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    modes = ["engine", "pytest"]
    if importlib.util.find_spec("hypofuzz") is not None:
        modes += ["hypofuzz", "hypofuzz-notrace", "hypofuzz-before"]
        assert re.search(r"^  replayed hypofuzz  inputs: 1 runs", done.stdout, re.MULTILINE)
        assert len(ratios(done.stdout)) == 5, done.stdout
    for mode in modes:
        assert re.search(rf"^  {mode} +\d+ runs, +[\d.]+/s; a run: wall [\d.]+ s, harness cpu",
                         done.stdout, re.MULTILINE), (mode, done.stdout)
