"""The evidence that travels with a finding: its transcript and the wire lines it points at.

A report read away from the run (a CI test viewer, a JUnit failure, a JSON report
without its artifact) shows the lines a finding is about, not only their numbers.
:func:`attach` reads each case's transcript once and gives every failing or warning
finding that names entries the path of the transcript and the raw lines of its first
few entries, each marked ``>>`` as the fuzzer and ``show`` mark the lines a finding
points at::

    #21 >> agent  {"jsonrpc":"2.0","method":"session/update","params":{...}}

The lines come from the recorded transcript, which was masked as it was recorded; the
run masks the whole result again before any report is written, these lines with it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Container, Iterable, Mapping
from pathlib import Path

from conformance.report.text import safe
from conformance.results import Finding, Outcome, RunResult
from conformance.transcript import Entry, TranscriptError, iter_entries

MAX_LINES = 5  # wire lines per finding; the rest are counted
MAX_CHARS = 240  # characters of one wire line
MARK = ">>"
SHOWN = (Outcome.FAIL, Outcome.WARN)  # the findings that carry their lines


def wire_line(e: Entry, *, marked: bool = True, limit: int = MAX_CHARS) -> str:
    """One entry as its line on the wire (a harness event as its name and data)."""
    who = {"agent": "agent ", "client": "client", "harness": "suite "}.get(e.src, e.src)
    if e.raw is not None:
        body = e.raw
    elif e.event is not None:
        body = f"[{e.event}]" + (f" {json.dumps(e.data, ensure_ascii=False)}"
                                 if e.data is not None else "")
    else:
        body = f"({e.stream}: {len(e.raw_b64 or '')} base64 characters)"
    arrow = MARK if marked else "  "
    return f"#{e.seq:<4}{arrow} {who} {safe(body, limit)}"


def lines_of(entries: Mapping[int, Entry], seqs: Iterable[int],
             limit: int = MAX_LINES) -> tuple[str, ...]:
    """The wire lines of ``seqs`` (those the transcript holds), the rest counted."""
    found = [entries[s] for s in dict.fromkeys(seqs) if s in entries]
    out = [wire_line(e) for e in found[:limit]]
    if len(found) > limit:
        out.append(f"... and {len(found) - limit} more line(s): acp-conformance show")
    return tuple(out)


def _entries(path: str | None, cited: Container[int]) -> dict[int, Entry] | None:
    """The entries ``cited`` of the transcript at ``path``, streamed from it (a transcript
    of a million lines is never held whole for a few lines of evidence)."""
    if not path:
        return None
    try:
        _, entries = iter_entries(Path(path))
        return {e.seq: e for e in entries if e.seq in cited}
    except (OSError, TranscriptError):
        return None  # a transcript that cannot be read leaves the finding as it was


def attach(result: RunResult, transcripts: Mapping[str, str | None] | None = None) -> None:
    """Give each failing or warning finding its evidence, in place: the transcript path the
    reports name (the case's, None when none was kept) and the wire lines of its entries,
    read from ``transcripts`` ({case: path}, e.g. a scratch folder the run deletes;
    default the cases' own paths)."""
    for case in result.cases:
        wanted = [f for f in case.findings if f.outcome in SHOWN]
        if not wanted:
            continue
        source = (transcripts or {}).get(case.case) or case.transcript_path
        cited = {s for f in wanted for s in f.entries}
        entries = _entries(source, cited) if cited else None
        case.findings = [_with_evidence(f, case.transcript_path, entries)
                         if f.outcome in SHOWN and not _own_run(f) else
                         _with_evidence(f, case.transcript_path and _own_run(f),
                                        _entries(_own_run(f), set(f.entries)))
                         if f.outcome in SHOWN else f for f in case.findings]


def _own_run(f: Finding) -> str | None:
    """--repeat: the transcript of the repetition a row comes from, when it has its own."""
    return f.repeats.transcript(f.outcome) if f.repeats is not None else None


def _with_evidence(f: Finding, path: str | None, entries: dict[int, Entry] | None) -> Finding:
    wire = lines_of(entries, f.entries) if entries is not None and f.entries else f.wire
    return dataclasses.replace(f, transcript=path or f.transcript, wire=wire)


def evidence_text(f: Finding) -> list[str]:
    """The evidence lines a text report (console, JUnit) prints under a finding."""
    out: list[str] = []
    if f.transcript:
        where = f.transcript + (f"#{f.entries[0]}" if f.entries else "")
        out.append(f"transcript: {f.transcript} (acp-conformance show {where})")
    if f.repeats is not None:  # --repeat: a transcript of each outcome, when kept
        out += [f"unstable: {f.repeats.text}"] + [
            f"  a run where it {verb}: {path}" for verb, path in f.repeats.kept()]
    out += list(f.wire)
    return out

