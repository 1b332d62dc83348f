"""Reports: console summary, JSON (documented schema) and JUnit XML, from one RunResult.

The names load on first use (``from conformance.report import console_summary``), so a
module of this package (``report.formats``, which the option table reads) can be imported
without the reports' own imports: ``--help`` stays as quick as a bare interpreter."""

from __future__ import annotations

from typing import Any

__all__ = ["console_summary", "to_json", "write_json", "write_junit"]

_WHERE = {"console_summary": "conformance.report.console",
          "to_json": "conformance.report.jsonreport",
          "write_json": "conformance.report.jsonreport",
          "write_junit": "conformance.report.junit"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
