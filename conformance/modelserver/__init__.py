"""A scripted model server on loopback, so real LLM-backed agents run offline and repeatably.

See :mod:`conformance.modelserver.server` for the server and
:mod:`conformance.modelserver.script` for the YAML script format.
"""

from __future__ import annotations

from typing import Any

# The names are loaded on first use: a run without --model-server imports this package
# (for conformance.modelserver.cases) but never the HTTP server behind it.
_HOME = {"ModelScript": "script", "ScriptError": "script", "default_script": "script",
         "load_script": "script", "DUMMY_KEY": "server", "ModelServer": "server",
         "target_env": "server"}

__all__ = ["DUMMY_KEY", "ModelScript", "ModelServer", "ScriptError", "default_script",
           "load_script", "target_env"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
