"""Reports: console summary, JSON (documented schema) and JUnit XML, from one RunResult."""

from conformance.report.console import console_summary
from conformance.report.jsonreport import to_json, write_json
from conformance.report.junit import write_junit

__all__ = ["console_summary", "to_json", "write_json", "write_junit"]
