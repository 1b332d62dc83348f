"""acp-conformance: conformance suite and fuzzer for ACP message identity."""

__version__ = "0.1.0"
TOOL_NAME = "acp-conformance"
