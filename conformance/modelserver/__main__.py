"""``python -m conformance.modelserver [--script FILE]``: serve a model script by hand.

Prints the base URL and the environment for an agent, then serves until
interrupted; with ``--log FILE`` every request served is appended there as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    from conformance import masking
    from conformance.modelserver import ModelServer, ScriptError, load_script
    from conformance.modelserver.script import dump_example

    p = argparse.ArgumentParser(prog="python -m conformance.modelserver",
                                description="Scripted model server on 127.0.0.1 (OpenAI chat "
                                            "and responses, Anthropic messages, Gemini).")
    p.add_argument("--script", type=Path, help="model script (YAML); default: built in")
    p.add_argument("--log", type=Path, help="append every request served to FILE (JSON lines)")
    p.add_argument("--example", action="store_true", help="print the default script and exit")
    ns = p.parse_args(argv)
    if ns.example:
        print(dump_example(), end="")
        return 0
    try:
        script = load_script(ns.script) if ns.script else None
    except ScriptError as exc:
        print(f"modelserver: error: {exc}", file=sys.stderr)
        return 2
    # The log holds what agents sent: secrets of this process's environment are masked.
    with ModelServer(script, masker=masking.build(environ=os.environ)) as server:
        print(f"model server listening on {server.url}", flush=True)
        for k, v in server.env().items():
            print(f"  {k}={v}", flush=True)
        stop = threading.Event()
        try:
            while not stop.wait(0.5):
                if ns.log:
                    log = server.take_log()
                    if log:
                        with ns.log.open("a", encoding="utf-8") as fh:
                            fh.writelines(json.dumps(e) + "\n" for e in log)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
