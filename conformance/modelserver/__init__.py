"""A scripted model server on loopback, so real LLM-backed agents run offline and repeatably.

See :mod:`conformance.modelserver.server` for the server and
:mod:`conformance.modelserver.script` for the YAML script format.
"""

from conformance.modelserver.script import ModelScript, ScriptError, default_script, load_script
from conformance.modelserver.server import DUMMY_KEY, ModelServer, target_env

__all__ = ["DUMMY_KEY", "ModelScript", "ModelServer", "ScriptError", "default_script",
           "load_script", "target_env"]
