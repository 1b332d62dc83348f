"""``verify BUNDLE``: a submission bundle's digests, and its verdict re-graded offline."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.cli.options import EXIT_FAIL, EXIT_OK, Parser


def build_verify_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance verify",
               description="Check a submission bundle (--certify DIR): every file's SHA-256 "
                           "against its manifest, every transcript graded again offline, and "
                           "the statement, report rows and verdict derived again from them. "
                           "Exit 0 when it holds (whatever the verdict it certifies), 1 when "
                           "anything was edited (each file and row named), 2 for a bundle "
                           "that cannot be read or was graded under another catalogue.")
    p.add_argument("bundle", type=Path, help="the bundle: its folder or its .tar.gz")
    p.add_argument("--regrade", action="store_true",
                   help="a bundle graded under another catalogue revision: grade its "
                        "transcripts under this suite's and print what differs (exit 1 when "
                        "the verdict is then FAIL)")
    p.add_argument("--schema-dir", type=Path, metavar="DIR",
                   help="the official ACP JSON Schemas, for a bundle whose run validated "
                        "frames against them")
    return p


def main(args: Sequence[str]) -> int:
    from conformance.certify import verify_bundle

    ns = build_verify_parser().parse_args(list(args))
    result = verify_bundle(ns.bundle, regrade=ns.regrade, schema_dir=ns.schema_dir)
    for line in result.problems:
        print(f"NOT VERIFIED: {line}")
    for line in result.differences:
        print(f"regrade: {line}")
    if not result.ok:
        print(f"acp-conformance verify: {ns.bundle}: {len(result.problems)} problem(s); the "
              "bundle does not hold", file=sys.stderr)
        return EXIT_FAIL
    print(f"verified: {ns.bundle}: {result.target}: {result.transcripts} transcript(s) "
          f"re-graded, {result.rows} row(s) as reported; catalogue {result.catalogue}; "
          f"verdict {result.verdict}")
    if ns.regrade and result.differences:
        return EXIT_FAIL if result.verdict == "FAIL" else EXIT_OK
    return EXIT_OK
