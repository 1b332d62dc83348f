"""``show TRANSCRIPT[#N[,M...]]``: a transcript, one readable line per entry.

Each line says who wrote it and what it is (the method, the update kind, the
``messageId``, the text), the entries named after ``#`` marked ``>>`` as a finding's
evidence is: a report's ``transcript: FILE (acp-conformance show FILE#7)`` line opens the
transcript at the finding's lines. ``--wire`` prints the raw lines instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.cli.options import EXIT_OK, Parser
from conformance.usage import UsageError


def build_show_parser() -> argparse.ArgumentParser:
    p = Parser(prog="acp-conformance show",
               description="Print a transcript one readable line per entry (who wrote it, "
                           "the method or update kind, messageId, text); the entries named "
                           "after # are marked >>.",
               epilog="exit codes: 0 printed, 2 the file cannot be read or an entry is not "
                      "in it")
    p.add_argument("transcript", metavar="TRANSCRIPT[#N[,M...]]",
                   help="a transcript file (.jsonl), optionally with the entries to mark, "
                        "e.g. reports/transcripts/ids-across-turns@v1.jsonl#7,21")
    p.add_argument("--wire", action="store_true",
                   help="the raw lines as they went over the wire, not their description")
    p.add_argument("--around", type=int, default=None, metavar="K",
                   help="only the K entries before and after each marked one")
    return p


def parse_target(text: str) -> tuple[Path, list[int]]:
    """``FILE#7,21`` -> (FILE, [7, 21]); a file whose name holds ``#`` is taken whole."""
    if Path(text).exists() or "#" not in text:
        return Path(text), []
    path, _, marks = text.rpartition("#")
    try:
        seqs = [int(m) for m in marks.split(",") if m.strip()]
    except ValueError:
        raise UsageError(f"{text}: expected FILE#N or FILE#N,M (entry numbers) after #") from None
    return Path(path), seqs


def show_lines(path: Path, marked: Sequence[int] = (), *, wire: bool = False,
               around: int | None = None) -> list[str]:
    from conformance.fuzz.report import describe_entry
    from conformance.report.evidence import wire_line
    from conformance.report.text import safe
    from conformance.transcript import load

    header, entries = load(path)
    seqs = {e.seq for e in entries}
    missing = [n for n in marked if n not in seqs]
    if missing:
        raise UsageError(f"{path}: no entry #{missing[0]} (entries #{min(seqs, default=0)} "
                         f"to #{max(seqs, default=0)})")
    out = [(f"{path}: case {safe(header.get('case'))}, {safe(header.get('role'))} "
           f"{safe(header.get('target'), 80)}, protocol v{header.get('protocol')}, "
           f"{len(entries)} entries")]
    keep = None
    if around is not None and marked:
        index = {e.seq: i for i, e in enumerate(entries)}
        keep = {j for n in marked for j in range(index[n] - around, index[n] + around + 1)}
    skipped = 0
    for i, e in enumerate(entries):
        if keep is not None and i not in keep:
            skipped += 1
            continue
        if skipped:
            out.append(f"      ... {skipped} entries left out")
            skipped = 0
        mark = e.seq in marked
        if wire:
            out.append(wire_line(e, marked=mark, limit=2000))
            continue
        who = {"client": "client", "agent": "agent ", "harness": "suite "}.get(e.src, e.src)
        out.append(f"#{e.seq:<4}{'>>' if mark else '  '} {who} {describe_entry(e)}")
    if skipped:
        out.append(f"      ... {skipped} entries left out")
    return out


def main(args: Sequence[str]) -> int:
    ns = build_show_parser().parse_args(list(args))
    path, marked = parse_target(ns.transcript)
    if not path.is_file():
        raise UsageError(f"{path}: no such transcript file")
    if ns.around is not None and ns.around < 0:
        raise UsageError("--around must be 0 or more")
    print("\n".join(show_lines(path, marked, wire=ns.wire, around=ns.around)))
    sys.stdout.flush()
    return EXIT_OK
