"""``demo``: the suite against the bundled reference agent, then the reference client;
``demo --broken``: against a bundled broken agent and broken client (exits 1)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import EXIT_INTERNAL, build_masker, default_outputs, is_stdout
from conformance.cli.run import build_parser, cmd_run
from conformance.usage import UsageError

#: What a vendor runs next, against their own agent (printed at the end of a plain demo).
NEXT = """next:
  acp-conformance demo --broken                          # watch it catch a bug (exits 1)
  acp-conformance --agent "my-agent --acp"               # the suite against your agent
  acp-conformance --agent "my-agent --acp" --html report.html   # a report to read or publish
  acp-conformance fuzz --agent "my-agent --acp"          # generated sessions until a rule breaks"""


def _root() -> str:
    import conformance

    return str(Path(conformance.__file__).resolve().parent.parent)


def reference_agent_command() -> list[str]:
    """The bundled reference agent, runnable from any working directory."""
    return [sys.executable, "-c",
            (f"import sys; sys.path.insert(0, {_root()!r}); "
            "from conformance.reference.agent import main; sys.exit(main())")]


def broken_agent_command() -> list[str]:
    """The bundled broken agent (per-turn message ID counter: MID-A-02)."""
    return [sys.executable, "-c",
            (f"import sys; sys.path.insert(0, {_root()!r}); "
            "from conformance.reference.broken import main; sys.exit(main(['agent']))")]


def broken_client() -> tuple[str, Any]:
    """The bundled broken client (case-insensitive IDs: MID-C-02), with the reference
    client's profile (it is the reference client but for one method)."""
    import shlex

    from conformance.client.runner import reference_client

    _, profile = reference_client()
    code = (f"import sys; sys.path.insert(0, {_root()!r}); "
            "from conformance.reference.broken import main; "
            "sys.exit(main(['client'] + sys.argv[1:]))")
    command = " ".join(shlex.quote(w) for w in (sys.executable, "-c", code, "--agent-cmd",
                                                "{agent}", "--render", "cumulative"))
    return command, profile


def cmd_demo(ns: argparse.Namespace) -> int:
    masker = build_masker(ns)  # one for both suites: a secret is masked alike in both
    from conformance.engine import NothingToRun
    from conformance.roles import ROLES

    broken = getattr(ns, "broken", False)
    empty: list[NothingToRun] = []  # a --case of one side only: the other side says so
    try:
        if broken:
            print("Running the agent suite against a bundled broken agent (its message IDs "
                  "come from a counter that restarts at every prompt).\n")
            status = cmd_run(ns, ROLES["agent"], target=broken_agent_command(),
                             label="acp-conformance broken agent", masker=masker)
        else:
            print("Running the agent suite against the bundled reference agent.\n")
            status = cmd_run(ns, ROLES["agent"], target=reference_agent_command(),
                             label="acp-conformance reference agent", masker=masker)
    except NothingToRun as exc:
        print(f"not run: {exc}")
        empty.append(exc)
        status = 0
    if status > EXIT_INTERNAL:  # interrupted (128 + signal): the client suite does not start
        return status
    from conformance.client.runner import reference_client

    for opt in ("json", "junit", "html", "markdown"):  # the client reports go beside the agent's
        path = getattr(ns, opt, None)
        if path is not None:
            setattr(ns, opt, path.with_name(f"{path.stem}-client{path.suffix}"))
    if broken:
        print("\nRunning the client suite against a bundled broken client (it compares "
              "message IDs case-insensitively; through a pty).\n")
        command, profile = broken_client()
        label = "acp-conformance broken client"
    else:
        print("\nRunning the client suite against the bundled reference client "
              "(through a pty).\n")
        command, profile = reference_client()
        label = "acp-conformance reference client"
    try:
        status = max(status, cmd_run(ns, ROLES["client"], target=command, label=label,
                                     masker=masker, values={"client-profile": profile}))
    except NothingToRun as exc:
        if empty:  # neither side has a case to run: a usage error, as for one side
            raise
        print(f"not run: {exc}")
    if status <= EXIT_INTERNAL:
        print("\n" + (BROKEN_NEXT if broken else NEXT))
    return status


BROKEN_NEXT = """Both runs failed, as they should: each Failures section above names the rule,
what was expected, what the target sent, and the transcript lines that show it.
next:
  acp-conformance --agent "my-agent --acp"               # the suite against your agent"""


def main(args: Sequence[str]) -> int:
    ns = build_parser("demo").parse_args(list(args))
    for opt in ("json", "junit", "markdown", "html"):  # two runs: two reports, not one stream
        if is_stdout(getattr(ns, opt, None)):
            raise UsageError(f"--{opt} -: demo writes two reports (agent and client); "
                             "give a file path")
    default_outputs(ns, stem="acp-conformance-broken" if ns.broken else "acp-conformance")
    return cmd_demo(ns)
