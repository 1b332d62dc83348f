"""Command line: a thin shell over the runner, one module per subcommand. Exit codes:

0  no fail;  1  at least one fail (including a target that crashed, hung or
broke framing);  2  usage error or invalid input (bad option, unknown case,
malformed case file or transcript, target command not found);  3  internal
error of the suite.

Heavy imports (jsonschema, hypothesis, pexpect) happen only in the commands
that need them, so ``--help`` starts fast: a subcommand's module loads only
when it runs. The options they share are in :mod:`conformance.cli.options`,
the end of a run (summary, reports, exit status) in :mod:`conformance.cli.output`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from conformance.cli.options import EXIT_INTERNAL, EXIT_USAGE, SUBCOMMANDS
from conformance.usage import UsageError


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # text from a target never crashes the console
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    stdout = sys.stdout  # a report written to stdout (--json -) sends the rest to stderr
    terminated = _on_sigterm()
    try:
        return _dispatch(args)
    except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:  # a command without its own handling (check, replay, ...)
        import signal

        signum = terminated[0] or signal.SIGINT
        print(f"acp-conformance: interrupted by {signal.Signals(signum).name}; no report "
              "written", file=sys.stderr)
        return 128 + int(signum)
    except BrokenPipeError:  # `acp-conformance list | head`: the reader has gone; so do we
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout
        return 141  # 128 + SIGPIPE, as a shell reports it
    except Exception as exc:  # noqa: BLE001 - the three error families are sorted here
        return _error_exit(exc)
    finally:
        sys.stdout = stdout
        _on_sigterm(terminated)


def _on_sigterm(installed: list[Any] | None = None) -> list[Any]:
    """SIGTERM ends any command as Ctrl-C does (KeyboardInterrupt: its targets are stopped
    on the way out) and :func:`main` exits 128+15, not killed with no word. Returns
    ``[signum or 0, the previous handler]``; given that list back, restores the handler.
    A run's own handlers (the suite, ``fuzz``) take over while it lasts."""
    import signal
    import threading

    if installed is not None:
        if len(installed) > 1:
            signal.signal(signal.SIGTERM, installed[1])
        return installed
    caught: list[Any] = [0]
    if threading.current_thread() is not threading.main_thread():
        return caught

    def handle(signum: int, frame: Any) -> None:
        if not caught[0]:
            caught[0] = signum
            raise KeyboardInterrupt

    caught.append(signal.signal(signal.SIGTERM, handle))
    return caught


def _dispatch(args: list[str]) -> int:
    name, rest = (args[0], args[1:]) if args and args[0] in SUBCOMMANDS else (None, args)
    if name == "list":
        from conformance.cli import listing

        return listing.main(rest)
    if name == "lint-cases":
        from conformance.cli import lint_cases

        return lint_cases.main(rest)
    if name == "check":
        from conformance.cli import check

        return check.main(rest)
    if name == "report":
        from conformance.cli import report

        return report.main(rest)
    if name == "fuzz":  # Hypothesis loads only when a run starts
        from conformance.cli import fuzz

        return fuzz.main(rest)
    if name == "replay":
        from conformance.cli import replay

        return replay.main(rest)
    if name == "show":
        from conformance.cli import show

        return show.main(rest)
    if name == "verify":
        from conformance.cli import verify

        return verify.main(rest)
    if name == "demo":
        from conformance.cli import demo

        return demo.main(rest)
    from conformance.cli import run

    return run.main(rest)


def _error_exit(exc: Exception) -> int:
    from conformance.baseline import BaselineError
    from conformance.cases import CaseError
    from conformance.certify.bundle import BundleError
    from conformance.report.jsonreport import ReportFormatError
    from conformance.transcript import TranscriptError
    from conformance.transport import TargetCommandError

    if isinstance(exc, (UsageError, CaseError, TranscriptError, TargetCommandError,
                        BaselineError, ReportFormatError, BundleError)):
        print(f"acp-conformance: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if os.environ.get("ACP_CONFORMANCE_DEBUG"):
        raise exc
    print(f"acp-conformance: internal error: {type(exc).__name__}: {str(exc)[:300]} "
          "(set ACP_CONFORMANCE_DEBUG=1 for the traceback)", file=sys.stderr)
    return EXIT_INTERNAL


__all__ = ["SUBCOMMANDS", "main"]
