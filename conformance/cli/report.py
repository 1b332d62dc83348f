"""``report --from out.json``: a run's reports rebuilt from its JSON report."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from conformance.cli.options import Parser, report_outputs
from conformance.cli.output import load_baseline, report_run


def build_report_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance report",
                                description="Rebuild the reports of a run from its JSON report.")
    p.add_argument("--from", dest="source", type=Path, required=True, metavar="FILE",
                   help="a JSON report written with --json")
    p.add_argument("--cases", type=Path, metavar="DIR",
                   help="case directory for the traceability section (default: bundled)")
    o = p.add_argument_group("output")
    o.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML here")
    report_outputs(o)
    o.add_argument("-v", "--verbose", action="store_true", help="show every requirement's finding")
    return p


def cmd_report(ns: argparse.Namespace) -> int:
    """``report --from out.json``: the same reports as the run, rebuilt from its JSON."""
    from conformance import cases as casemod
    from conformance.report.jsonreport import read_json

    result = read_json(ns.source)
    all_cases = casemod.load_dir(ns.cases)
    return report_run(ns, result, baseline=load_baseline(ns, all_cases), cases=all_cases)


def main(args: Sequence[str]) -> int:
    return cmd_report(build_report_parser().parse_args(list(args)))
