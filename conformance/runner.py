"""The runner: cases x protocol versions -> processes -> transcripts -> checkers -> results.

The CLI and the pytest plugin are thin shells over this module.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from conformance import __version__
from conformance.cases import Case
from conformance.checks import Options, grade
from conformance.driver import ClientDriver, DriveAborted, NotTestable, _RpcError
from conformance.results import CaseResult, Finding, Outcome, RunResult, apply_strict
from conformance.transcript import Transcript

ALWAYS = ("MID-S-06", "TARGET")  # framing and liveness are graded in every case


@dataclass
class AgentRun:
    command: Sequence[str]
    protocols: Sequence[int]
    options: Options
    timeout: float = 10.0
    strict: bool = False
    transcripts: Path | None = None
    schema_dir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    progress: Callable[[int, int, str], None] | None = None
    model: Any = None  # a running ModelServer (--model-server), or None
    model_script: Path | None = None  # --model-script: one script for every case


def run_agent_suite(run: AgentRun, cases: Sequence[Case], target_label: str) -> RunResult:
    result = RunResult(__version__, target_label, "agent", list(run.protocols),
                       run.options.profile.name, run.strict)
    plan = agent_plan(run, cases)
    unsupported: dict[int, str] = {}
    for i, (protocol, case) in enumerate(plan):
        if run.progress:
            run.progress(i, len(plan), f"{case.id} v{protocol}")
        if protocol in unsupported:  # one negotiation answer settles it for the version
            result.cases.append(_not_testable(case, protocol, unsupported[protocol]))
            continue
        cr = run_agent_case(run, case, protocol)
        result.cases.append(cr)
        if cr.note.startswith(("v2 unsupported", "v1 unsupported")):
            unsupported[protocol] = cr.note
    if result.target_info == {}:
        result.target_info = _target_info(result)
    return result


def agent_plan(run: AgentRun, cases: Sequence[Case]) -> list[tuple[int, Case]]:
    """The (protocol, case) pairs a run executes, in report order."""
    return [(p, c) for p in run.protocols for c in cases
            if c.role == "agent" and c.applies_to(p, run.options.profile.name)]


def _not_testable(case: Case, protocol: int, note: str) -> CaseResult:
    cr = CaseResult(f"{case.id}@v{protocol}", case.description, list(case.requirements),
                    protocol, note=note)
    cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, f"not testable: {note}", case=cr.case)
                   for r in case.requirements]
    return cr


def run_agent_case(run: AgentRun, case: Case, protocol: int) -> CaseResult:
    name = f"{case.id}@v{protocol}"
    transcript = Transcript({"role": "agent", "protocol": protocol,
                             "profile": run.options.profile.name,
                             "target": " ".join(run.command), "case": name})
    cr = CaseResult(name, case.description, list(case.requirements), protocol)
    if run.model is not None:
        from conformance.modelserver.cases import use_case_script

        use_case_script(run.model, case, name, run.model_script, transcript.header)
    with tempfile.TemporaryDirectory(prefix="acp-conformance-") as cwd:
        driver = ClientDriver(run.command, transcript, protocol=protocol, timeout=run.timeout,
                              cwd=cwd, env=run.env)
        try:
            for step in case.drive:
                perform(driver, step)
        except NotTestable as exc:
            cr.note = str(exc)
        except DriveAborted as exc:
            cr.note = f"aborted: {exc}"
        except _RpcError as exc:
            cr.note = f"aborted: the agent answered a step with {exc}"
            transcript.add(max(driver.conn, 0), "harness", "harness", event="note",
                           data={"note": cr.note})
        finally:
            stderr = driver.proc.stderr_text() if driver.proc else ""
            driver.stop()
        cr.stderr_tail = stderr
        info = driver.info
        transcript.header["target_info"] = {"name": info.name, "version": info.version,
                                            "protocol": info.protocol}
        if run.model is not None:  # what the model said while the agent made this traffic
            transcript.header["model_requests"] = run.model.take_log()
    if cr.note and not cr.note.startswith("aborted"):
        cr.findings = [Finding(r, Outcome.NOT_APPLICABLE, f"not testable: {cr.note}", case=name)
                       for r in case.requirements]
    else:
        findings = grade(transcript.entries, protocol=protocol, options=run.options,
                         select=list(case.checks) + list(ALWAYS))
        if run.schema_dir is not None:
            from conformance.schema import validate_transcript

            findings += validate_transcript(transcript.entries, run.schema_dir, protocol,
                                            run.options.profile)
        cr.findings = [f.with_case(name) for f in apply_strict(findings, run.strict)]
    if run.transcripts is not None:
        path = Path(run.transcripts) / f"{safe_name(name)}.jsonl"
        transcript.save(path)
        cr.transcript_path = str(path)
    cr.target_info = dict(transcript.header.get("target_info", {}))
    return cr


def perform(driver: ClientDriver, step: Any) -> None:
    """Execute one declarative step (see cases/*.yaml and the case schema)."""
    if step == "start":
        driver.start()
    elif step == "restart":
        driver.stop()
        driver.start()
    elif step == "new_session":
        driver.new_session()
    elif step == "load":
        driver.load()
    elif step == "close_session":
        driver.close_session()
    elif isinstance(step, dict) and "prompt" in step:
        p = step["prompt"]
        driver.prompt(p["text"], legacy_message_id=p.get("legacy_message_id"),
                      meta_message_id=p.get("meta_message_id"), cancel=p.get("cancel", False))
    elif isinstance(step, dict) and "resume" in step:
        driver.resume(step["resume"]["replay"] if step["resume"]["replay"] != "none" else None)
    else:
        raise ValueError(f"unknown step {step!r}")  # the case schema makes this unreachable


def _target_info(result: RunResult) -> dict[str, Any]:
    for c in result.cases:
        if c.target_info.get("name"):
            return dict(c.target_info)
    return {}


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", name)[:120]
