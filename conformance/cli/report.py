"""``report --from out.json``: a run's reports rebuilt from its JSON report;
``report --merge A.json B.json ...``: one target x rule matrix of many runs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.cli.options import (
    EXIT_FAIL,
    EXIT_OK,
    Parser,
    build_masker,
    is_stdout,
    report_outputs,
    show_options,
)
from conformance.cli.output import load_baseline, report_run
from conformance.usage import UsageError


def build_report_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance report",
               description="Rebuild the reports of a run from its JSON report, or merge the "
                           "JSON reports of many runs into one target x rule matrix.",
               epilog="exit codes: 0 every run passed, 1 a run failed, 2 usage or input error "
                      "(with --merge: runs graded against different catalogue revisions, "
                      "unless --allow-mixed)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from", dest="source", type=Path, metavar="FILE",
                     help="a JSON report written with --json")
    src.add_argument("--merge", nargs="+", type=Path, metavar="REPORT.json",
                     help="JSON reports of several runs (targets, shards): write one matrix "
                          "with --html, --markdown and --json")
    p.add_argument("--allow-mixed", action="store_true",
                   help="--merge: merge runs graded against different catalogue revisions "
                        "(each column names its own)")
    p.add_argument("--cases", type=Path, metavar="DIR",
                   help="case directory for the traceability section (default: bundled)")
    o = p.add_argument_group("output")
    o.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML here")
    report_outputs(o)
    o.add_argument("--json", dest="matrix_json", type=Path, metavar="PATH",
                   help="--merge: write the matrix as JSON here (-: stdout)")
    o.add_argument("--out", type=Path, metavar="DIR",
                   help="write the HTML, Markdown and JUnit reports into DIR "
                        "(acp-conformance.html, .md, .xml) unless an option names a file")
    show_options(o, default=None)
    return p


def cmd_report(ns: argparse.Namespace) -> int:
    """``report --from out.json``: the same reports as the run, rebuilt from its JSON."""
    from conformance import cases as casemod
    from conformance.report.jsonreport import read_json

    if ns.merge is not None:
        return cmd_merge(ns)
    if ns.allow_mixed or ns.matrix_json is not None:
        raise UsageError("--allow-mixed and --json go with --merge")
    result = read_json(ns.source)
    all_cases = casemod.load_dir(ns.cases)
    return report_run(ns, result, baseline=load_baseline(ns, all_cases), cases=all_cases,
                      masker=build_masker(ns))


def cmd_merge(ns: argparse.Namespace) -> int:
    """``report --merge``: one matrix of many runs (see conformance.report.matrix)."""
    from conformance.report import matrix
    from conformance.transcript import write_atomic

    outputs = [(ns.html, matrix.to_html), (ns.markdown, matrix.to_markdown),
               (ns.matrix_json, lambda m: json.dumps(matrix.to_json(m), indent=1) + "\n")]
    if not any(path for path, _ in outputs):
        raise UsageError("--merge writes a matrix: give --html, --markdown or --json")
    if ns.junit is not None or ns.baseline is not None:
        raise UsageError("--junit and --baseline go with --from (one run), not --merge")
    stdout = [o for o, (path, _) in zip(("html", "markdown", "json"), outputs, strict=True)
              if is_stdout(path)]  # -: standard output, as every run's --json - is
    if "html" in stdout:
        raise UsageError("--html -: this output is a file; only --json or --markdown can go "
                         "to standard output")
    if len(stdout) > 1:
        raise UsageError(" and ".join(f"--{o} -" for o in stdout) + ": only one report "
                         "can go to standard output")
    for path, make in outputs:
        if path is None:
            continue
        try:
            m = matrix.build(ns.merge, allow_mixed=ns.allow_mixed,
                             out_dir=Path.cwd() if is_stdout(path) else path.parent)
        except matrix.MatrixError as exc:
            raise UsageError(str(exc)) from None
        if is_stdout(path):
            text = make(m)
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
        else:
            write_atomic(path, make(m))
    m = matrix.build(ns.merge, allow_mixed=True)
    print(f"matrix: {len(m.runs)} run(s), {len(m.rules)} rule(s): "
          + ", ".join(f"{r.label} {r.verdict}" for r in m.runs),
          file=sys.stderr if stdout else sys.stdout)  # stdout holds the report only
    return EXIT_FAIL if any(r.verdict != "pass" for r in m.runs) else EXIT_OK


def main(args: Sequence[str]) -> int:
    ns = build_report_parser().parse_args(list(args))
    if ns.out is not None and ns.merge is not None:  # the matrix of many runs goes there
        if not (ns.html or ns.markdown or ns.matrix_json):
            ns.html, ns.markdown = ns.out / "matrix.html", ns.out / "matrix.md"
    elif ns.out is not None and not (ns.html or ns.markdown or ns.junit):
        ns.html, ns.markdown, ns.junit = (ns.out / f"acp-conformance.{ext}"
                                          for ext in ("html", "md", "xml"))
        ns.default_reports = True  # say where they went
    return cmd_report(ns)
