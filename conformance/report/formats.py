"""The report formats: one row each, and the one loop every shell writes reports through.

A format is a module of ``report/`` that renders a whole run as text, plus one
:class:`Format` row here. The option table (:mod:`conformance.settings.table`) makes its
option (``--json``, ``--acp-json``, the Action's input) from the row, and the command
line and the pytest plugin write what was asked for with :func:`write_reports`, so a new
format is one module and one row; no shell names a format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the option table reads the rows: --help imports no report
    from conformance.results import RunResult

__all__ = ["FORMATS", "STDOUT", "Format", "Inputs", "behind_paths", "names", "write_reports"]

STDOUT = "-"  # ``--json -``: the report goes to standard output


@dataclass
class Inputs:
    """What a format may use besides the run: the baseline's verdict, the traceability
    rows (built only when a format asks for them), and a case's transcript (the HTML
    report embeds the wire lines)."""

    baseline: Any = None
    trace: Callable[[], Any] | None = None
    transcripts: Callable[[Any], Any] | None = None
    _trace: Any = field(default=None, init=False, repr=False)  # built once, on first ask

    def traceability(self) -> Any:
        if self._trace is None and self.trace is not None:
            self._trace = self.trace()
        return self._trace


def _json(result: RunResult, inputs: Inputs) -> str:
    from conformance.report.jsonreport import dumps

    return dumps(result)


def _junit(result: RunResult, inputs: Inputs) -> str:
    from conformance.report.junit import to_xml

    return to_xml(result)


def _html(result: RunResult, inputs: Inputs) -> str:
    from conformance.report.html import to_html

    return to_html(result, baseline=inputs.baseline, trace=inputs.traceability(),
                   transcripts=inputs.transcripts)


def _markdown(result: RunResult, inputs: Inputs) -> str:
    from conformance.report.markdown import to_markdown

    return to_markdown(result, baseline=inputs.baseline, trace=inputs.traceability())


@dataclass(frozen=True)
class Format:
    """One report format: its option's name, its help, the shells that have the option,
    whether it may go to standard output, and how it renders a run."""

    name: str  # the option: --NAME on the command line, --acp-NAME in the plugin
    help: str  # as the option table writes helps (``<cli>...</cli>`` marks one shell's part)
    render: Callable[[RunResult, Inputs], str]
    shells: frozenset[str]
    to_stdout: bool = True
    behind: bool = False  # written for the target behind a proxy too, as NAME.<role>.EXT


def behind_paths(paths: Mapping[str, Any], role: str) -> dict[str, Path]:
    """Where the reports of the target behind (a proxy's real agent) go: beside the run's
    file of each format written for it (``report.json`` -> ``report.agent.json``)."""
    return {f.name: Path(p).with_name(f"{Path(p).stem}.{role}{Path(p).suffix}")
            for f in FORMATS if f.behind for p in [paths.get(f.name)]
            if p and str(p) != STDOUT}


_CLI, _CLI_PLUGIN, _ALL = (frozenset({"cli"}), frozenset({"cli", "plugin"}),
                           frozenset({"cli", "plugin", "action"}))

#: In this order a run names its reports, and the transcripts go beside the first one named.
FORMATS: tuple[Format, ...] = (
    Format("json", "write the JSON report here<cli> (-: stdout)</cli>", _json, _CLI_PLUGIN,
           behind=True),
    Format("junit", "write JUnit XML here (-: stdout)", _junit, _CLI),
    Format("html", "write a self-contained HTML report (statement, requirements, findings, "
           "wire transcripts) here", _html, _CLI_PLUGIN, to_stdout=False),
    Format("markdown", "write a Markdown summary with the certification statement here"
           "<cli> (e.g. $GITHUB_STEP_SUMMARY; -: stdout)</cli>", _markdown, _CLI_PLUGIN),
)


def names(*, stdout: bool = False) -> tuple[str, ...]:
    """The formats' option names (``stdout=True``: those that may go to standard output)."""
    return tuple(f.name for f in FORMATS if f.to_stdout or not stdout)


def write_reports(result: RunResult, paths: Mapping[str, Any], inputs: Inputs, *,
                  stdout: Callable[[str], None] | None = None) -> list[str]:
    """Write each format whose path ``paths`` names (``-``: through ``stdout``); the
    files written, in the table's order."""
    from conformance.transcript import write_atomic

    written = []
    for f in FORMATS:
        path = paths.get(f.name)
        if not path:
            continue
        text = f.render(result, inputs)
        if str(path) == STDOUT and stdout is not None:
            stdout(text if text.endswith("\n") else text + "\n")
            continue
        write_atomic(Path(path), text)
        written.append(str(path))
    return written
