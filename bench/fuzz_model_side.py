"""Fuzzing LLM-backed agents through their model: time to first failure, against
baselines measured in the same run.

The three Responses fixture agents (``fixtures/agents/llm_*``) run behind the
scripted model server, fuzzed with a fixed seed and the chosen
effort, each run stopping at its first broken rule and never told which rule:

* **Seconds per generated run** against the correct agent
  (``llm_responses_agent``), drawing the model's side: the unit of the ``x run``
  column, and a positive control (it must stay clean).
* **Time to first failure** for the pass-through agent (``llm_passthrough_ids``,
  v1 and v2, MUST breaches only) and the shared-thought-ID agent
  (``llm_shared_thought_id``, v1, with ``strict``: its breach is a SHOULD),
  with the rule found and the size of the shrunk counterexample (steps, model
  parts).
* **The baseline without the model's side**: the pass-through agent fuzzed the
  same way, but the model server plays its fixed default script (every
  generated run varies only what the client sends, as a fuzz run did before
  the model's side was drawn). The ratio compares the generated runs each needed:
  the baseline's count is a lower bound when it finds nothing.

    python3 -m bench.fuzz_model_side               # dev effort (a few minutes)
    python3 -m bench.fuzz_model_side --effort ci    # a smoke run

It prints lines and ratios only; it writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

from bench.common import REPO_ROOT, ratio_line
from conformance.fuzz.agent_fuzz import run_agent_fuzz
from conformance.fuzz.agent_machine import AgentFuzzConfig
from conformance.fuzz.grading import FuzzResult
from conformance.fuzz.model_side import flatten
from conformance.fuzz.player import AgentTarget
from conformance.fuzz.settings import get_effort
from conformance.modelserver.server import ModelServer

# (fixture, versions, strict): the shared ID is a SHOULD breach (a warn), found under strict;
# the pass-through agent's long and empty IDs are warns too, so it runs without strict
# and the first failure is a MUST breach (an ID reused across turns or in a replay).
BROKEN = (("llm_passthrough_ids", (1, 2), False), ("llm_shared_thought_id", (1,), True))
CORRECT = "llm_responses_agent"


def target(name: str, env: dict[str, str]) -> AgentTarget:
    return AgentTarget([sys.executable, str(REPO_ROOT / "fixtures" / "agents" / f"{name}.py")],
                       name, env)


def fuzz(name: str, protocols: tuple[int, ...], server: ModelServer, effort: Any, seed: int,
         state: str, *, strict: bool = True, draw_model: bool = True) -> FuzzResult:
    env = {**server.env(), "ACP_REFERENCE_STATE_DIR": state}
    server.use(None)  # the default script, for the baseline that does not draw its own
    config = AgentFuzzConfig(target(name, env), protocols=protocols, strict=strict,
                             max_failures=1, model=server if draw_model else None)
    return run_agent_fuzz(config, effort, seed)


def found(r: FuzzResult) -> str:
    if not r.failures:
        return "nothing"
    f = r.failures[0]
    parts = len(flatten(f.model)) if f.model is not None else 0
    return (f"{f.requirement} (v{f.protocol}; {len(f.steps)} steps, {parts} model part(s), "
            f"{f.shrink_attempts} shrinking replays)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seed", type=int, default=1, help="the seed of every fuzz run")
    p.add_argument("--effort", default="dev", help="the effort of every fuzz run (default dev)")
    p.add_argument("--max-examples", type=int, help="override the effort's run count")
    ns = p.parse_args(argv)
    effort = get_effort(ns.effort, max_examples=ns.max_examples)
    print(f"fuzzing through the model (seed {ns.seed}, effort {effort.name})")
    with tempfile.TemporaryDirectory(prefix="acp-bench-state-") as state, ModelServer() as server:
        clean = fuzz(CORRECT, (1, 2), server, effort, ns.seed, state)
        per_run = clean.elapsed / max(1, clean.examples)
        print(f"generated runs/s, {CORRECT} (model side drawn, strict): "
              f"{clean.examples / clean.elapsed:.2f} ({per_run:.2f} s per run, "
              f"{clean.examples} runs); found: {found(clean)}"
              + ("" if not clean.failures else "  POSITIVE CONTROL FAILED"))
        print(f"  {'agent':<24} {'first':>7} {'x run':>6} {'total':>7}  found")
        runs_to_find: dict[str, float] = {}
        for name, protocols, strict in BROKEN:
            r = fuzz(name, protocols, server, effort, ns.seed, state, strict=strict)
            first = r.time_to_first_failure
            shown = f"{first:7.2f} {first / per_run:6.1f}" if first is not None else \
                "      -      -"
            print(f"  {name:<24} {shown} {r.elapsed:7.2f}  {found(r)}")
            if first is not None:
                runs_to_find[name] = first / per_run
        base = fuzz("llm_passthrough_ids", (1, 2), server, effort, ns.seed, state,
                    strict=False, draw_model=False)
        first = base.time_to_first_failure
        print(f"baseline, llm_passthrough_ids with the model's fixed default script: "
              f"{base.examples} runs in {base.elapsed:.2f} s; found: {found(base)}")
        base_runs = (first / per_run) if first is not None else float(base.examples)
        if "llm_passthrough_ids" in runs_to_find:
            print(ratio_line("runs-to-first-failure/baseline", runs_to_find[
                "llm_passthrough_ids"] / max(base_runs, 1e-9), None,
                "drawing the model's side vs the fixed script" +
                ("; the baseline found nothing: its count is a lower bound"
                 if first is None else "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
