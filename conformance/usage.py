"""Usage errors and option values shared by the shells and the engines below them.

A :class:`UsageError` is a harness error (bad options or input): the command
line prints it as one line and exits 2. The engines raise it too (a client that
cannot be set up, a regression file without a target), so it lives here, below
the CLI, and the CLI knows the engines but not the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence


class UsageError(Exception):
    """Bad options or input: one line, exit 2."""


def env_pairs(pairs: Sequence[str], option: str = "--agent-env") -> dict[str, str]:
    """``KEY=VALUE`` pairs (``--agent-env``, ``--agent-config``) as a dict."""
    env = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"{option} {pair!r}: expected KEY=VALUE")
        k, v = pair.split("=", 1)
        env[k] = v
    return env
