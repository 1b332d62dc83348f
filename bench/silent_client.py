"""A client that never answers the liveness probe costs one probe timeout per case.

1. The baseline: the client suite against the reference client, one process per turn
   (``--prompt {prompt}``), v1, ``--timeout 10``.
2. The subject: the same cases against ``fixtures/clients/ignores_ids.py``, a one-shot v1
   client that ignores message IDs and never answers a request it does not know (the
   probe included). The first unanswered probe of a case waits the probe timeout
   (``min(--timeout, 5)`` s); later turns of the case, and the control streams, do not.
3. The subject again with ``--protocol both``: its v2 cases are "v2 unsupported by the
   client" after one turn.

It prints the subject's extra time per played case in probe timeouts (target: at most
1.5) and the ``--protocol both`` run against one minute (target: at most 1x).

    python3 -m bench.silent_client
    python3 -m bench.silent_client --repeats 1 --case client-empty-id   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from bench.common import REPO_ROOT, Sample, alternate, conformance_cli, ratio_line, run

CLIENTS = REPO_ROOT / "fixtures" / "clients"
TIMEOUT = 10.0
PROBE_WAIT = min(TIMEOUT, 5.0)  # the double's wait for an answer (conformance.client.runner)
TARGET_EXCESS = 1.5
MINUTE = 60.0


def suite(client: list[str], profile: Path, protocol: str, cases: list[str],
          report: Path) -> Sample:
    argv = [*conformance_cli(), "--client", " ".join(shlex.quote(w) for w in client),
            "--client-profile", str(profile), "--protocol", protocol, "--timeout", f"{TIMEOUT:g}",
            "--no-color", "--json", str(report)]
    for case in cases:
        argv += ["--case", case]
    return run(argv)


def played(report: Path) -> int:
    data = json.loads(report.read_text(encoding="utf-8"))
    return sum(1 for c in data["cases"] if not c.get("note"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--case", action="append", default=[], help="only these cases (repeatable)")
    args = p.parse_args(argv)
    reference = [sys.executable, "-m", "conformance.client.reference", "--agent-cmd", "{agent}",
                 "--prompt", "{prompt}"]
    silent = [sys.executable, str(CLIENTS / "ignores_ids.py"), "--agent-cmd", "{agent}",
              "--prompt", "{prompt}"]
    with tempfile.TemporaryDirectory(prefix="bench-silent-") as tmp:
        base_report, subject_report = Path(tmp) / "reference.json", Path(tmp) / "silent.json"
        base, subject = alternate(
            args.repeats,
            lambda: suite(reference, CLIENTS / "reference.yaml", "1", args.case, base_report),
            lambda: suite(silent, CLIENTS / "ignores-ids.yaml", "1", args.case, subject_report))
        cases = played(subject_report)
        both = suite(silent, CLIENTS / "ignores-ids.yaml", "both", args.case,
                     Path(tmp) / "both.json")
    print(f"reference one-shot client, v1: {base.wall:.1f} s; ignores_ids.py, v1: "
          f"{subject.wall:.1f} s; {cases} case(s) played; probe timeout {PROBE_WAIT:g} s")
    excess = (subject.wall - base.wall) / max(cases, 1) / PROBE_WAIT
    print(ratio_line("extra time per case, in probe timeouts", excess, TARGET_EXCESS,
                     f"{subject.wall - base.wall:.1f} s over {cases} case(s)"))
    print(ratio_line("ignores_ids.py --protocol both, against one minute", both.wall / MINUTE,
                     1.0, f"{both.wall:.1f} s"))
    return 0 if base.returncode in (0, 1) and subject.returncode == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
