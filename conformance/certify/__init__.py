"""Certification a third party can check: a submission bundle, its verification, a badge.

``--certify DIR`` (every role) writes one folder and a ``.tar.gz`` of it: the statement
(Markdown and JSON), the JSON report, every transcript, ``run.json`` (tool, catalogue
revision, profile, the target as it described itself, the masked command line, the
environment's shape) and ``badge.svg``, with ``manifest.intoto.json``: an in-toto
Statement v1 whose subjects are those files (SHA-256) and whose predicate is the verdict.
``acp-conformance verify BUNDLE`` checks the digests and re-grades every transcript
offline: the verdict must follow from the transcripts (docs/certify.md).

Fed by the one engine's results (a :class:`conformance.results.RunResult`); the shells
only call :func:`write_bundle` and :func:`verify_bundle`.
"""

from conformance.certify.bundle import PREDICATE_TYPE, BundleError, write_bundle
from conformance.certify.verify import VerifyResult, verify_bundle

__all__ = ["PREDICATE_TYPE", "BundleError", "VerifyResult", "verify_bundle", "write_bundle"]
