"""The end of every run: the console summary, the reports asked for, the exit status."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from conformance.cli.options import EXIT_FAIL, EXIT_OK, build_masker, claim_stdout
from conformance.report.formats import names


def interrupted(ns: argparse.Namespace, exc: Any, **report: Any) -> int:
    """SIGINT/SIGTERM: the reports cover what was graded; exit 128 + signal number."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not tear the reports
    ns.interrupted_by = str(exc)  # a bundle of it says so, and is never a pass
    report_run(ns, exc.result, **report)
    print(f"acp-conformance: {exc}; the reports cover the {len(exc.result.cases)} case(s) "
          "graded so far", file=sys.stderr)
    return 128 + int(exc.signum)


def load_baseline(ns: argparse.Namespace, cases: Any) -> Any:
    from conformance import baseline

    if getattr(ns, "baseline", None) is None:
        return None
    return baseline.load(ns.baseline, known_cases=[c.id for c in cases])


def report_run(ns: argparse.Namespace, result: Any, *, baseline: Any = None, cases: Any = None,
            scratch: bool = False, masker: Any = None) -> int:
    """Print the summary, write every report asked for; the exit status (baseline-aware).

    Every string of the result is masked with ``masker`` (the run's, or one built from
    ``ns``) before anything is printed or written."""
    from conformance.report import console_summary
    from conformance.report.catalogue import run_date

    claim_stdout(ns)  # --json - (or --junit -, --markdown -): stdout holds that report only
    masker = masker if masker is not None else build_masker(ns)
    saved = {c.case: c.transcript_path for c in result.cases}
    if scratch:  # the scratch transcripts go with the run; no line or report may name them
        for c in result.cases:
            c.transcript_path = None
    from conformance.report.evidence import attach

    attach(result, saved)  # each finding's wire lines travel with it, masked below
    if scratch:  # --repeat: nor may a repetition's transcript be named
        import dataclasses

        for c in result.cases:
            c.runs = []
            c.findings = [dataclasses.replace(f, repeats=f.repeats.without_paths())
                          if f.repeats is not None else f for f in c.findings]
    result = masker.data(result)
    from conformance.report.heading import with_label

    with_label(result, getattr(ns, "target_name", None), getattr(ns, "target_version", None))
    if result.date is None:
        result.date = run_date()
    colour = sys.stdout.isatty() and not ns.no_color
    show = getattr(ns, "show", "failures")
    quiet = getattr(ns, "quiet", False)
    if quiet:  # -q: the verdict line only (errors still go to stderr)
        from conformance.report.coverage import headline

        print("verdict: " + headline(result))
    elif show is not None or ns.verbose:  # report --from prints nothing unless asked
        print(console_summary(result, colour=colour, verbose=ns.verbose, show=show or "all"))
    verdict = baseline.evaluate(result.cases) if baseline is not None else None
    if verdict is not None:
        if not quiet:
            print("\n".join(verdict.lines()))
        print("verdict with baseline: " + ("FAIL" if verdict.failed else "PASS"))
    from conformance.report.formats import Inputs, write_reports

    def trace() -> Any:
        from conformance import cases as casemod
        from conformance.report.traceability import traceability

        return traceability(cases if cases is not None
                            else casemod.load_dir(getattr(ns, "cases", None)))

    def transcript(case: Any) -> Any:
        from conformance.report.html import read_transcript

        return masker.data(read_transcript(saved.get(case.case)))

    written = write_reports(result, {f: getattr(ns, f, None) for f in names()},
                            Inputs(baseline=verdict, trace=trace, transcripts=transcript),
                            stdout=lambda text: _to_stdout(ns, text))
    if written and getattr(ns, "default_reports", False) and not quiet:  # where they went
        print("reports: " + ", ".join(written), file=sys.stderr)
    for why in result.unfinished.values():  # never green: nothing of it ran to its end
        print(f"acp-conformance: not tested: {why}", file=sys.stderr)
    extras(ns, result, verdict, cases)
    certify(ns, result, saved, masker)
    if result.behind is not None:  # apart: the run's verdict is its own target's
        report_behind(ns, result, masker.data(result.behind))
    if result.cut:  # never green by accident: a cut run has not tested everything
        print(f"acp-conformance: run cut: {result.cut}", file=sys.stderr)
        return EXIT_FAIL
    if result.unfinished and not (verdict is not None and verdict.excuses(result.unfinished)):
        return EXIT_FAIL  # a version left untested by a fault the baseline lists does not
    if getattr(ns, "require_full", False) and not result.failed:
        from conformance.report.coverage import partial

        gap = partial(result)
        if gap:
            print(f"acp-conformance: --require-full: the verdict is only PASS, {gap}",
                  file=sys.stderr)
            return EXIT_FAIL
    if verdict is not None:
        return EXIT_FAIL if verdict.failed else EXIT_OK
    return EXIT_FAIL if result.failed else EXIT_OK


def report_behind(ns: argparse.Namespace, result: Any, behind: Any) -> None:
    """The target behind the one tested (a proxy's real agent): its own findings, apart
    from the run's: a console section and, with --json, a JSON report beside the run's
    (``NAME.agent.json``). Its verdict is its own; the run's exit status is not changed."""
    from conformance.report import console_summary
    from conformance.report.catalogue import run_date
    from conformance.report.formats import Inputs, behind_paths, write_reports

    behind.date = behind.date or run_date()
    tested = result.role
    print(f"\nThe {behind.role} behind the {tested} (its own findings, graded on what it "
          f"wrote before the {tested}; not the {tested}'s):")
    print(console_summary(behind, colour=sys.stdout.isatty() and not ns.no_color,
                          verbose=ns.verbose, show=getattr(ns, "show", None) or "failures"))
    write_reports(behind, behind_paths({f: getattr(ns, f, None) for f in names()}, behind.role),
                  Inputs())  # stdout holds the run's report only


def _to_stdout(ns: argparse.Namespace, text: str) -> None:
    """The one report named ``-``, on the standard output the run kept for it."""
    out = getattr(ns, "report_stdout", None) or sys.stdout
    out.write(text)
    out.flush()


def certify(ns: argparse.Namespace, result: Any, saved: Any, masker: Any) -> None:
    """``--certify DIR`` (the submission bundle) and ``--badge PATH``, after the reports."""
    folder: Any = getattr(ns, "certify", None)
    badge: Any = getattr(ns, "badge", None)
    if folder is None and badge is None:
        return
    import shlex

    interrupted = str(getattr(ns, "interrupted_by", "") or "")
    if folder is None:
        from conformance.certify.badge import write_badge
        from conformance.certify.bundle import bundle_verdict

        write_badge(result, Path(badge), bundle_verdict(result, interrupted))
        return
    from conformance.certify import write_bundle

    command_line = masker.text(shlex.join(["acp-conformance", *sys.argv[1:]]))
    folder, tarball = write_bundle(Path(folder), result, saved, command_line=command_line,
                                   interrupted=interrupted,
                                   schema_dir=getattr(ns, "schema_dir", None) is not None,
                                   badge=badge)
    print(f"certify: wrote the bundle {folder}/ and {tarball} "
          f"(acp-conformance verify {tarball})", file=sys.stderr)


def extras(ns: argparse.Namespace, result: Any, verdict: Any, cases: Any) -> None:
    """``--write-baseline FILE`` (the run's fails as a baseline) and
    ``--github-annotations`` (one ``::error`` per failing rule), after the reports."""
    if getattr(ns, "write_baseline", None) is not None:
        from conformance import baseline
        from conformance.report.catalogue import graded_against
        from conformance.transcript import write_atomic

        text = baseline.render(result.all_findings(), target=result.target,
                               catalogue=str(graded_against(result).get("catalogue")),
                               date=str(result.date))
        write_atomic(ns.write_baseline, text)
        fails = sum(1 for line in text.splitlines() if line.startswith("  - "))
        print(f"baseline: wrote {fails} expected failure(s) to {ns.write_baseline}",
              file=sys.stderr)
    if getattr(ns, "github_annotations", False):
        from conformance.report.annotations import case_sources, github_annotations

        for line in github_annotations(result, verdict=verdict,
                                       sources=case_sources(cases or ())):
            print(line)
        sys.stdout.flush()
