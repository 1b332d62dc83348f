"""``demo``: the suite against the bundled reference agent, then the reference client."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.cli.options import EXIT_INTERNAL, default_outputs
from conformance.cli.run import build_parser, cmd_agent, cmd_client


def reference_agent_command() -> list[str]:
    """The bundled reference agent, runnable from any working directory."""
    import conformance

    root = str(Path(conformance.__file__).resolve().parent.parent)
    return [sys.executable, "-c",
            (f"import sys; sys.path.insert(0, {root!r}); "
            "from conformance.reference.agent import main; sys.exit(main())")]


def cmd_demo(ns: argparse.Namespace) -> int:
    print("Running the agent suite against the bundled reference agent.\n")
    status = cmd_agent(ns, reference_agent_command(), "acp-conformance reference agent")
    if status > EXIT_INTERNAL:  # interrupted (128 + signal): the client suite does not start
        return status
    print("\nRunning the client suite against the bundled reference client (through a pty).\n")
    from conformance.client.runner import reference_client

    for opt in ("json", "junit", "html", "markdown"):  # the client reports go beside the agent's
        path = getattr(ns, opt, None)
        if path is not None:
            setattr(ns, opt, path.with_name(f"{path.stem}-client{path.suffix}"))
    command, profile = reference_client()
    return max(status, cmd_client(ns, command, "acp-conformance reference client", profile))


def main(args: Sequence[str]) -> int:
    ns = build_parser("demo").parse_args(list(args))
    default_outputs(ns)
    return cmd_demo(ns)
