"""``check``: grade recorded transcripts offline (no process)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import Parser, build_masker, check_run_options, common_options
from conformance.cli.output import load_baseline, report_run
from conformance.usage import UsageError


def build_check_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance check",
                                description="Grade recorded transcripts offline (no process).")
    p.add_argument("files", nargs="+", type=Path, help="transcript files (.jsonl) or folders")
    common_options(p)
    return p


def cmd_check(ns: argparse.Namespace) -> int:
    """Grade each transcript from what its header records (its scope: the rules, profile
    and options the live run graded with, and how the case ended), so a run's transcripts
    give the run's findings and verdict. A transcript that records no scope (someone
    else's) is graded with the default scope, and its case says so."""
    from conformance import __version__
    from conformance import transcript as tmod
    from conformance.grading import (
        DEFAULT_SCOPE_NOTE,
        RecordedError,
        Scope,
        case_protocol,
        conclude,
        grade_file,
        recorded_case,
        run_behind,
    )
    from conformance.results import RunResult

    check_run_options(ns)
    files = tmod.jsonl_files(ns.files, lambda f: UsageError(f"{f}: no such transcript"))
    if not files:
        raise UsageError("no transcript files given")
    headers = [tmod.read_header(f) for f in files]
    # A proxy case is two transcripts: its client side is graded, with its agent side.
    sides = [(f, h) for f, h in zip(files, headers, strict=False) if h.get("side") != "agent"]
    for f, h in zip(files, headers, strict=False):
        if h.get("side") == "agent" and not any(
                g.name == h.get("client_side") and g.parent == f.parent for g, _ in sides):
            raise UsageError(f"{f}: the agent side of a proxy case; check its client side "
                             f"{h.get('client_side')} (graded with this file)")
    files, headers = [f for f, _ in sides], [h for _, h in sides]
    roles = {h.get("role", "agent") for h in headers}
    protocols = sorted({case_protocol(h) for h in headers})
    result = RunResult(__version__, ", ".join(str(f) for f in files), "/".join(sorted(roles)),
                       protocols, "", ns.strict)
    behind_header: dict[str, Any] | None = None  # the first of a target behind, if any
    for f, header in zip(files, headers, strict=False):
        header = with_options(ns, header)
        scope = Scope.from_header(header)
        try:
            result.profile = scope.options().profile.name
        except KeyError as exc:  # a profile this version does not know
            raise UsageError(f"{f}: {exc.args[0]}") from None
        protocol = case_protocol(header)
        if ns.protocol != "both":
            protocol = int(ns.protocol)
        # A fuzz regression records whether it was found under --strict.
        strict = ns.strict or header.get("strict") is True
        try:
            graded = grade_file(f, header, strict=strict,
                                protocol=None if ns.protocol == "both" else protocol,
                                schema_dir=getattr(ns, "schema_dir", None))
        except RecordedError as exc:
            raise UsageError(f"{f}: {exc}") from None
        findings, behind = graded.findings, graded.behind
        cr = recorded_case(header, findings, name=str(header.get("case") or f.stem),
                           description=f"recorded transcript {f.name}", protocol=protocol,
                           path=str(f))
        if not scope.recorded:
            cr.note = "; ".join(n for n in (cr.note, DEFAULT_SCOPE_NOTE) if n)
        if behind is not None:  # the agent side recorded its own scope: its own result
            other, side, own = behind
            cr.behind = recorded_case(side, own, name=cr.case, path=str(other),
                                      description=f"recorded transcript {other.name}",
                                      protocol=protocol)
            behind_header = behind_header or side
        result.cases.append(cr)
    conclude(result)
    if behind_header is not None:  # the target behind (a proxy's real agent), apart
        result.behind = run_behind(result, str(behind_header.get("target") or ""),
                                   Scope.from_header(behind_header).role)
    baseline = None
    if ns.baseline is not None:  # the cases (and jsonschema) load only for the baseline's IDs
        from conformance import cases as casemod

        baseline = load_baseline(ns, casemod.load_dir())
    return report_run(ns, result, baseline=baseline, masker=build_masker(ns))


def with_options(ns: argparse.Namespace, header: dict[str, Any]) -> dict[str, Any]:
    """The header, with the grading options given to ``check`` in place of those recorded
    (--profile, --strict-ids, --cross-turn-reuse given on purpose); without them, what was
    recorded stands, so a run's transcripts reproduce its findings."""
    scope = header.get("scope")
    if not isinstance(scope, dict):
        changed: dict[str, Any] = {}
        if ns.profile:
            changed["profile"] = ns.profile
        return {**header, **changed}
    scope = dict(scope)
    if ns.profile:
        scope["profile"] = ns.profile
    if ns.strict_ids:
        scope["strict_ids"] = True
    if ns.cross_turn_reuse != "fail":
        scope["cross_turn_reuse"] = ns.cross_turn_reuse
    return {**header, "scope": scope}


def main(args: Sequence[str]) -> int:
    from conformance.cli.options import default_outputs, use_out

    ns = build_check_parser().parse_args(list(args))
    # check runs no Hypothesis: its data folder is not set up (nor Hypothesis imported)
    if ns.out is not None:  # asked for: the reports go there
        default_outputs(ns, "acp-conformance-check")
    else:
        use_out(ns)
    return cmd_check(ns)
