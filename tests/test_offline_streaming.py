"""Offline grading streams a transcript from its file (``transcript.EntryFile``).

``check`` of a million updates held every entry before (1.7 GB and four times the CPU of
a bare parse at 1M real-shaped updates): the grading read the file into a list for the
few readers that need the entries again (folding a fault's consequences, the timers a
finding rests on, the evidence lines). These tests demand that a conformant transcript
is graded without the entries ever being held, that a failing one reads the file again
rather than holding it, and that the findings are the very ones grading a list gives.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.gen_transcript import generate
from conformance import transcript as tmod
from conformance.grading import grade_recorded

ROOT = Path(__file__).resolve().parents[1]


class _Counted(tmod.EntryFile):
    """An EntryFile that counts its passes over the file and, every few hundred lines, the
    entries alive at once (held in a list, they would be all read so far)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.passes = 0
        self.most_alive = 0

    def __iter__(self) -> Iterator[tmod.Entry]:
        self.passes += 1
        return self._watched(super().__iter__())

    def _watched(self, entries: Iterator[tmod.Entry]) -> Iterator[tmod.Entry]:
        for n, e in enumerate(entries):
            if n % 500 == 499:
                alive = sum(1 for o in gc.get_objects() if type(o) is tmod.Entry)
                self.most_alive = max(self.most_alive, alive)
            yield e


@pytest.mark.parametrize("shape", ["long", "real"])
@pytest.mark.parametrize("violation", ["none", "cross-turn-reuse"])
def test_a_file_is_graded_as_it_streams_with_the_findings_of_a_list(
        tmp_path: Path, shape: str, violation: str) -> None:
    path = tmp_path / "t.jsonl"
    generate(path, updates=3000, shape=shape, violation=violation, chunks_per_message=40)
    header, entries = tmod.iter_entries(path)
    held = grade_recorded(header, list(entries))
    del entries
    gc.collect()  # the list's entries in cycles: not the streamed grading's
    before = sum(1 for o in gc.get_objects() if type(o) is tmod.Entry)
    streamed = _Counted(path)
    assert grade_recorded(header, streamed) == held
    assert streamed._list is None  # never read into a list: no entry outlives its line
    assert 0 < streamed.most_alive - before < 100, (streamed.most_alive, before)
    failing = [f for f in held if f.outcome.name in ("FAIL", "WARN")]
    if violation == "none":
        assert not failing and streamed.passes == 1  # one pass: the grading's own
    else:
        assert any(f.requirement == "MID-A-02/cross-turn-reuse" for f in failing)
        assert streamed.passes >= 2  # the timers read the file again for the fail


def test_check_of_a_failing_transcript_shows_its_evidence_lines(tmp_path: Path) -> None:
    """The evidence of a fail is read from the file as it streams: the cited lines are
    still shown (the console prints them under the finding)."""
    path = tmp_path / "t.jsonl"
    generate(path, updates=3000, shape="real", violation="cross-turn-reuse")
    done = subprocess.run([sys.executable, "-m", "conformance", "check", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MID-A-02/cross-turn-reuse" in done.stdout
    assert any(line.lstrip().startswith("#") and "agent_message_chunk" in line
               for line in done.stdout.splitlines()), done.stdout
