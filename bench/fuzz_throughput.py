"""Fuzzer throughput and time to first failure, against baselines measured in the same run.

Four parts:

* **Streams per second through the in-process reference client.** The same
  deterministic generated streams (``strategies.example_streams``) are played by
  the agent double to the reference client through the adapter API, each as one
  fuzz example (``client_fuzz.play_stream``: start, one turn, observe, stop,
  grade). Target: at least 200 streams/s. A second pass splits the time between
  playing (the double, the client, recording) and grading.
* **The fuzz loop.** ``run_client_fuzz`` against the reference client (the
  chosen effort; nothing to find) against its baseline: Hypothesis drawing the
  same examples (same strategy, seed and settings) with a body that does nothing.
  The ratio is what playing and grading add to Hypothesis's own generation.
* **Over real pipes.** The same streams through the reference client *process*
  (the double is a process the client spawns; the client is driven through a pty
  with its profile), against the floor of two Python processes starting and
  importing the client and the double.
* **Generated runs per second against the reference agent** (the ci effort), and
  **time to first failure** for every broken agent (fixtures/agents/manifest.yaml)
  and broken client (fixtures/clients, through its adapter), with ``strict``, a
  fixed seed and the chosen effort (each run stops at its first broken rule),
  never told which rule: the seconds until the first violation, the same in
  baseline runs, the total with shrinking, the rule found and the size of the
  shrunk counterexample.

    python3 -m bench.fuzz_throughput              # everything (several minutes)
    python3 -m bench.fuzz_throughput --quick      # a smoke run
    python3 -m bench.fuzz_throughput --agents numeric_id,late_replay --clients trimmed

It prints lines and ratios only; it writes nothing (``--json PATH`` to keep them).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.common import REPO_ROOT, ratio_line, run
from conformance.checks import Options, grade
from conformance.cli.demo import reference_agent_command
from conformance.client.profile import load as load_profile
from conformance.client.runner import ClientRun, play_client_case, reference_client
from conformance.fuzz.agent_fuzz import run_agent_fuzz
from conformance.fuzz.agent_machine import AgentFuzzConfig
from conformance.fuzz.client_case import stream_case
from conformance.fuzz.client_fuzz import (
    ClientTarget,
    draw_turn,
    play_stream,
    run_client_fuzz,
    stream_of,
)
from conformance.fuzz.player import AgentTarget
from conformance.fuzz.settings import Effort, get_effort, hypothesis_settings
from conformance.profiles import DEFAULT_PROFILE
from conformance.profiles import get as get_profile
from conformance.strategies import example_streams

REFERENCE_ADAPTER = "conformance.client.reference:make_client"
TARGET_STREAMS_PER_S = 200
SKIP_AGENTS = {"llm_agent"}  # needs --model-server; not a message-ID fault of its own


def streams(count: int, seed: int) -> list[tuple[int, list[Any]]]:
    out = []
    for i in range(count):
        protocol = 1 + i % 2
        (steps,) = example_streams(protocol=protocol, seed=seed + i, count=1)
        out.append((protocol, steps))
    return out


def per_second(target: ClientTarget, items: list[tuple[int, list[Any]]]) -> tuple[float, float]:
    """(streams per second, mean seconds per stream) playing ``items`` to ``target``."""
    start = time.perf_counter()
    for protocol, steps in items:
        run = play_stream(target, protocol, stream_of(protocol, steps), options=Options())
        assert not run.transcript.header.get("ended", {}).get("aborted"), run.note
    elapsed = time.perf_counter() - start
    return len(items) / elapsed, elapsed / len(items)


def split(target: ClientTarget, items: list[tuple[int, list[Any]]]) -> tuple[float, float]:
    """Mean seconds per stream (playing, grading): play_stream's two halves, timed apart."""
    options = Options()
    played = []
    start = time.perf_counter()
    for protocol, steps in items:
        run = ClientRun(protocols=(protocol,), options=options, adapter=target.adapter,
                        timeout=target.timeout)
        played.append((protocol, play_client_case(run, stream_case(protocol, stream_of(protocol, steps)), protocol,
                                                  target.label).transcript))
    playing = time.perf_counter() - start
    start = time.perf_counter()
    for protocol, transcript in played:
        grade(transcript.entries, protocol=protocol, options=options, role="client")
    grading = time.perf_counter() - start
    return playing / len(items), grading / len(items)


def generation_only(effort: Effort, seed: int) -> tuple[int, float]:
    """Hypothesis drawing the fuzz loop's examples (same strategy, seed, settings), no play."""
    from hypothesis import given
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    count = [0]

    @hypothesis_seed(seed)
    @hypothesis_settings(effort, shrink=True)
    @given(st.data())
    def generate(data: Any) -> None:
        draw_turn(data, (1, 2), Options().profile.interleave_allowed)
        count[0] += 1

    start = time.perf_counter()
    generate()
    return count[0], time.perf_counter() - start


def memory_growth(counts: list[int], seed: int) -> dict[str, dict[int, float]]:
    """Peak memory (MB) of the client fuzz loop and of Hypothesis generating the same
    examples alone, each in a process of its own, at each example count."""
    loop = ("from conformance.fuzz.client_fuzz import ClientTarget, run_client_fuzz\n"
            "from conformance.fuzz.settings import get_effort\n"
            f"r = run_client_fuzz(ClientTarget('ref', adapter={REFERENCE_ADAPTER!r}), "
            f"get_effort('deep', max_examples={{n}}), {seed})\n"
            "assert r.examples >= {n} and not r.failures, (r.examples, r.failures)\n")
    alone = ("from bench.fuzz_throughput import generation_only\n"
             "from conformance.fuzz.settings import get_effort\n"
             f"assert generation_only(get_effort('deep', max_examples={{n}}), {seed})[0] == {{n}}\n")
    out: dict[str, dict[int, float]] = {"loop": {}, "generation": {}}
    for n in counts:
        for name, code in (("loop", loop), ("generation", alone)):
            sample = run([sys.executable, "-c", code.format(n=n)], peak=True)
            assert sample.returncode == 0, sample.stdout
            out[name][n] = sample.max_rss_mb
        print(f"peak memory at {n} examples: fuzz loop {out['loop'][n]:.1f} MB, Hypothesis "
              f"generating alone {out['generation'][n]:.1f} MB")
    return out


def process_floor(repeats: int = 3) -> float:
    """Seconds for the two processes of a pty stream to start: the reference client and
    the agent double, each a Python process importing its module (best of ``repeats``)."""
    code = ["import conformance.client.reference", "import conformance.client.double"]
    best_of = [min(run([sys.executable, "-c", c]).wall for _ in range(repeats)) for c in code]
    return sum(best_of)


@functools.cache
def _agent_fixtures() -> tuple[dict[str, Any], ...]:
    """The broken agents' manifest entries (read once)."""
    path = REPO_ROOT / "fixtures" / "agents" / "manifest.yaml"
    return tuple(yaml.safe_load(path.read_text())["fixtures"])


def _fixture(name: str) -> dict[str, Any]:
    return next(f for f in _agent_fixtures() if f["name"] == name)


def expected_rules(name: str) -> set[str]:
    """What the agent manifest says a fixture trips (expected or on the way)."""
    fx = _fixture(name)
    out: set[str] = set()
    for version in fx["expect"].values():
        for group in (version["profiles"].values() if "profiles" in version else [version]):
            for key in ("fail", "warn"):
                out.update(group.get(key, ()))
    for rules in (fx.get("may_also") or {}).values():
        out.update(rules)
    return out


def fuzz_setup(name: str) -> tuple[tuple[int, ...], str | None]:
    """The protocol versions a fixture breaks a rule in, and the rule profile it breaks
    it under (None: the default). A fixture that breaks nothing (a positive control)
    gets every version it speaks and the default profile: nothing should be found."""
    fx = _fixture(name)
    versions, profile = [], None
    for version, expect in fx["expect"].items():
        groups = expect.get("profiles", {DEFAULT_PROFILE: expect})
        breaking = [p for p, g in groups.items() if g.get("fail") or g.get("warn")]
        if breaking:
            versions.append(int(version.lstrip("v")))
            if DEFAULT_PROFILE not in breaking:
                profile = breaking[0]
    spoken = tuple(fx.get("protocols", (1, 2)))
    return (tuple(versions) or spoken), profile


def named(found: set[str], rules: set[str]) -> bool:
    return any(f == r or f.startswith(r + "/") for f in found for r in rules)


def broken_agents(only: list[str] | None) -> list[str]:
    names = [fx["name"] for fx in _agent_fixtures()
             if (REPO_ROOT / "fixtures" / "agents" / f"{fx['name']}.py").is_file()
             and fx["name"] not in SKIP_AGENTS]
    return [n for n in names if only is None or n in only]


def broken_clients(only: list[str] | None) -> list[str]:
    manifest = yaml.safe_load((REPO_ROOT / "fixtures" / "clients" / "manifest.yaml").read_text())
    names = [Path(c["file"]).stem for c in manifest["clients"]
             if "def make_client" in (REPO_ROOT / "fixtures" / "clients" / c["file"]).read_text()]
    return [n for n in names if only is None or n in only]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="a smoke run: few streams and targets")
    p.add_argument("--streams", type=int, default=40, help="streams per client path (adapter)")
    p.add_argument("--pty-streams", type=int, default=8, help="streams through the pty path")
    p.add_argument("--seed", type=int, default=1, help="the seed of every fuzz run")
    p.add_argument("--effort", default="dev",
                   help="effort of the time-to-first-failure runs (each stops at its first "
                        "broken rule; default dev)")
    p.add_argument("--agents", help="comma-separated broken agents (default: all)")
    p.add_argument("--clients", help="comma-separated broken clients (default: all)")
    p.add_argument("--memory", metavar="N,N", help="also measure the peak memory of the fuzz "
                   "loop and of generation alone at these example counts (e.g. 300,3000)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    ns = p.parse_args(argv)
    if ns.quick:
        ns.streams, ns.pty_streams = 6, 2
        ns.agents = ns.agents or "numeric_id,update_after_cancel"
        ns.clients = ns.clients or "sorted_by_id"
    with tempfile.TemporaryDirectory(prefix="acp-bench-state-") as state:
        os.environ["ACP_REFERENCE_STATE_DIR"] = state  # the agents' sessions, removed at the end
        return measure(ns, {"ACP_REFERENCE_STATE_DIR": state})


def measure(ns: argparse.Namespace, env: dict[str, str]) -> int:
    """The figures (``main`` gives the agents a state folder it removes at the end)."""
    effort = get_effort(ns.effort)
    baseline_effort = get_effort("ci")
    figures: dict[str, Any] = {"agents": {}, "clients": {}}

    print(f"fuzz throughput (seed {ns.seed}, effort {effort.name}, {os.cpu_count()} CPUs)")
    # -- client paths ---------------------------------------------------------------
    items = streams(ns.streams, ns.seed)
    adapter = ClientTarget("reference client (adapter)", adapter=REFERENCE_ADAPTER)
    per_second(adapter, items[:2])  # imports and first-call caches are not the subject
    rate_adapter, mean_adapter = per_second(adapter, items)
    playing, grading = split(adapter, items)
    verdict = "ok" if rate_adapter >= TARGET_STREAMS_PER_S else "UNDER"
    print(f"rate streams/s, reference client in-process (adapter): {rate_adapter:.0f} "
          f"(target >= {TARGET_STREAMS_PER_S}) {verdict}  [{mean_adapter * 1000:.1f} ms per "
          f"stream, {len(items)} streams; playing {playing * 1000:.1f} ms, grading "
          f"{grading * 1000:.1f} ms]")
    loop = run_client_fuzz(adapter, effort, ns.seed)
    assert not loop.failures, [f.requirement for f in loop.failures]
    generated, gen_elapsed = generation_only(effort, ns.seed)
    print(f"fuzz loop (run_client_fuzz, effort {effort.name}): {loop.examples} examples in "
          f"{loop.elapsed:.2f} s, {loop.examples / loop.elapsed:.0f}/s; Hypothesis generating "
          f"the same {generated} examples alone: {generated / gen_elapsed:.0f}/s")
    print(ratio_line("fuzz-loop/generation-only", (loop.elapsed / max(1, loop.examples))
                     / (gen_elapsed / max(1, generated)), None,
                     "per example; the rest of the loop is Hypothesis's own"))
    command, _ = reference_client()
    profile = load_profile(REPO_ROOT / "fixtures" / "clients" / "reference.yaml")
    pty = ClientTarget("reference client (pty, pipes)", command=command, profile=profile)
    rate_pty, mean_pty = per_second(pty, items[: ns.pty_streams])
    floor = process_floor()
    print(f"streams/s, reference client process over pipes (pty): {rate_pty:.2f} "
          f"({mean_pty * 1000:.0f} ms per stream, {ns.pty_streams} streams; two processes "
          f"starting: {floor * 1000:.0f} ms)")
    print(ratio_line("pty-per-stream/process-start-floor", mean_pty / floor, None))
    print(ratio_line("pty-per-stream/adapter-per-stream", mean_pty / mean_adapter, None))
    figures["streams_per_s"] = {"adapter": rate_adapter, "pty": rate_pty,
                                "fuzz_loop": loop.examples / loop.elapsed,
                                "generation_only": generated / gen_elapsed}
    figures["ms_per_stream"] = {"adapter": mean_adapter * 1000, "playing": playing * 1000,
                                "grading": grading * 1000, "pty": mean_pty * 1000,
                                "pty_floor": floor * 1000}

    # -- agent baseline -------------------------------------------------------------------
    reference = AgentTarget(reference_agent_command(), "reference agent", env)
    base = run_agent_fuzz(AgentFuzzConfig(reference, strict=True), baseline_effort, ns.seed)
    assert not base.failures, [f.requirement for f in base.failures]
    per_run = base.elapsed / max(1, base.examples)
    print(f"generated runs/s, reference agent: {base.examples / base.elapsed:.2f} "
          f"({per_run:.2f} s per run, {base.processes} processes for {base.examples} runs)")
    figures["agent_runs_per_s"] = base.examples / base.elapsed

    # -- time to first failure: agents ------------------------------------------------------
    print("\ntime to first failure, broken agents (strict, never told the rule):")
    print(f"  {'agent':<32} {'first':>7} {'x run':>6} {'total':>7}  found (shrunk steps); "
          "manifest rule among the run's findings")
    for name in broken_agents(ns.agents.split(",") if ns.agents else None):
        target = AgentTarget([sys.executable, str(REPO_ROOT / "fixtures" / "agents" /
                                                  f"{name}.py")], name, env)
        protocols, profile_name = fuzz_setup(name)
        options = Options(profile=get_profile(profile_name)) if profile_name else Options()
        control = not expected_rules(name)
        r = run_agent_fuzz(AgentFuzzConfig(target, protocols=protocols, options=options,
                                           strict=True, max_failures=1), effort, ns.seed)
        first = r.time_to_first_failure
        found = "nothing" + (" (positive control: right)" if control else "")
        if r.failures:
            f = r.failures[0]
            hit = named({x.requirement for x in f.findings}, expected_rules(name))
            found = (f"{f.requirement} ({len(f.steps)} steps); "
                     f"{'POSITIVE CONTROL FAILED' if control else 'yes' if hit else 'NO'}")
        shown = f"{first:7.2f}" if first is not None else "      -"
        runs = f"{first / per_run:6.1f}" if first is not None else "     -"
        where = "v" + "/".join(map(str, protocols)) + (f" {profile_name}" if profile_name else "")
        print(f"  {name:<32} {shown} {runs} {r.elapsed:7.2f}  {found}  [{where}]")
        figures["agents"][name] = {"first": first, "total": r.elapsed, "found": found,
                                   "control": control}
    # -- time to first failure: clients ------------------------------------------------------
    print("\ntime to first failure, broken clients through the adapter (strict):")
    print(f"  {'client':<32} {'first':>7} {'x play':>6} {'total':>7}  found (shrunk steps)")
    for name in broken_clients(ns.clients.split(",") if ns.clients else None):
        spec = f"{REPO_ROOT / 'fixtures' / 'clients' / name}.py:make_client"
        r = run_client_fuzz(ClientTarget(name, adapter=spec), effort, ns.seed, strict=True,
                            max_failures=1)
        first = r.time_to_first_failure
        found = (f"{r.failures[0].requirement} ({len(r.failures[0].stream['steps'])} steps)"
                 if r.failures else "nothing")
        shown = f"{first:7.2f}" if first is not None else "      -"
        plays = f"{first / mean_adapter:6.1f}" if first is not None else "     -"
        print(f"  {name:<32} {shown} {plays} {r.elapsed:7.2f}  {found}")
        figures["clients"][name] = {"first": first, "total": r.elapsed, "found": found}
    broken = [n for n, f in figures["agents"].items() if not f["control"]]
    found_agents = [n for n in broken if figures["agents"][n]["first"] is not None]
    found_clients = [n for n, f in figures["clients"].items() if f["first"] is not None]
    if figures["agents"]:
        ttff = (statistics.median(figures["agents"][n]["first"] for n in found_agents)
                if found_agents else float("nan"))
        print(ratio_line("median-agent-first-failure/reference-run", ttff / per_run, None,
                         f"{len(found_agents)}/{len(broken)} broken agents found"))
    if figures["clients"]:
        ttff_c = (statistics.median(figures["clients"][n]["first"] for n in found_clients)
                  if found_clients else float("nan"))
        print(ratio_line("median-client-first-failure/reference-play", ttff_c / mean_adapter,
                         None, f"{len(found_clients)}/{len(figures['clients'])} clients found"))
    if ns.memory:
        figures["memory_mb"] = memory_growth([int(n) for n in ns.memory.split(",")], ns.seed)
    if ns.json:
        ns.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
