"""``check``: grade recorded transcripts offline (no process)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from conformance.cli.options import Parser, check_run_options, common_options, grading_options
from conformance.cli.output import load_baseline, report_run
from conformance.usage import UsageError


def build_check_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance check",
                                description="Grade recorded transcripts offline (no process).")
    p.add_argument("files", nargs="+", type=Path, help="transcript files (.jsonl) or folders")
    common_options(p)
    return p


def cmd_check(ns: argparse.Namespace) -> int:
    from conformance import __version__
    from conformance import transcript as tmod
    from conformance.checks import grade
    from conformance.results import CaseResult, RunResult, apply_strict

    check_run_options(ns)
    files = tmod.jsonl_files(ns.files, lambda f: UsageError(f"{f}: no such transcript"))
    if not files:
        raise UsageError("no transcript files given")
    headers = [tmod.read_header(f) for f in files]
    roles = {h.get("role", "agent") for h in headers}
    protocols = sorted({int(h.get("protocol", 1)) for h in headers})
    result = RunResult(__version__, ", ".join(str(f) for f in files), "/".join(sorted(roles)),
                       protocols, "", ns.strict)
    for f, header in zip(files, headers):
        options = grading_options(ns, header.get("profile"))
        result.profile = options.profile.name
        protocol = int(header.get("protocol", 1))
        if ns.protocol != "both":
            protocol = int(ns.protocol)
        _, entries = tmod.iter_entries(f)
        findings = grade(entries, protocol=protocol, options=options,
                         role=header.get("role", "agent"))
        name = str(header.get("case") or f.stem)
        cr = CaseResult(name, f"recorded transcript {f.name}", [], protocol,
                        transcript_path=str(f))
        # A fuzz regression records whether it was found under --strict.
        strict = ns.strict or header.get("strict") is True
        cr.findings = [x.with_case(name) for x in apply_strict(findings, strict)]
        result.cases.append(cr)
    baseline = None
    if ns.baseline is not None:  # the cases (and jsonschema) load only for the baseline's IDs
        from conformance import cases as casemod

        baseline = load_baseline(ns, casemod.load_dir())
    return report_run(ns, result, baseline=baseline)


def main(args: Sequence[str]) -> int:
    return cmd_check(build_check_parser().parse_args(list(args)))
