"""Where a command's CPU goes: its own processes against the agents it starts.

``run_split(argv)`` runs ``argv`` like :func:`bench.common.run` with a
``sitecustomize`` module put first on ``PYTHONPATH``: every Python process of the
command (the ``fuzz`` command, its workers, Python agents, a model server) appends
its own CPU time (``getrusage(RUSAGE_SELF)``, user and system apart) to a log
when it exits. The command's total comes from ``wait4`` as before (every
process it waited for, Python or not); what no Python process logged is the
rest: agents that are not Python (a Node agent), and any process that ended
by a signal before it could log.

Roles, from each process's command line: ``harness`` (``conformance fuzz``, the
run's own process), ``worker`` (a ``fuzz --workers`` worker), ``agent`` (the
reference agent or a fixture), ``other`` (any other Python process).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import REPO_ROOT, Sample, run

LOG_ENV = "ACP_BENCH_CPU_LOG"

_SITECUSTOMIZE = f'''\
import os as _os
_log = _os.environ.get("{LOG_ENV}")
_worker = _os.environ.get("ACP_FUZZ_WORKER_INDEX")  # read now: a worker takes it out
if _log:
    import atexit as _atexit

    def _acp_bench_cpu() -> None:
        import json, resource, sys
        r = resource.getrusage(resource.RUSAGE_SELF)
        line = json.dumps({{"pid": _os.getpid(), "argv": list(sys.argv),
                           "worker": _worker,
                           "user": r.ru_utime, "sys": r.ru_stime}}) + "\\n"
        fd = _os.open(_log, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
        try:
            _os.write(fd, line.encode())
        finally:
            _os.close(fd)

    _atexit.register(_acp_bench_cpu)
'''


@dataclass
class Split:
    """CPU seconds by role (user + system), and the system part of each."""

    total: float
    roles: dict[str, float] = field(default_factory=dict)
    system: dict[str, float] = field(default_factory=dict)
    processes: dict[str, int] = field(default_factory=dict)

    @property
    def ours(self) -> float:
        return self.roles.get("harness", 0.0) + self.roles.get("worker", 0.0)

    @property
    def unlogged(self) -> float:
        return max(0.0, self.total - sum(self.roles.values()))

    def line(self) -> str:
        parts = []
        for role in ("harness", "worker", "agent", "other"):
            if role in self.roles:
                parts.append(f"{role} {self.roles[role]:.2f} s ({self.processes[role]} "
                             f"proc, sys {self.system[role]:.2f})")
        parts.append(f"not logged {self.unlogged:.2f} s")
        return f"cpu split of {self.total:.2f} s: " + ", ".join(parts)


def role(record: dict[str, object]) -> str:
    argv = [str(a) for a in record.get("argv") or []]
    text = " ".join(argv)
    if "fuzz" in argv[1:2] and argv[0].endswith(os.path.join("conformance", "__main__.py")):
        return "worker" if record.get("worker") is not None else "harness"
    if "reference" in text or os.sep + "fixtures" + os.sep in text:
        return "agent"
    return "other"


def read_split(log: Path, total: float) -> Split:
    split = Split(total)
    if not log.exists():
        return split
    for line in log.read_text("utf-8").splitlines():
        record = json.loads(line)
        r = role(record)
        split.roles[r] = split.roles.get(r, 0.0) + record["user"] + record["sys"]
        split.system[r] = split.system.get(r, 0.0) + record["sys"]
        split.processes[r] = split.processes.get(r, 0) + 1
    return split


def run_split(argv: Sequence[str], **kwargs: object) -> tuple[Sample, Split]:
    """Run ``argv`` (see :func:`bench.common.run`) and split its CPU by process role."""
    with tempfile.TemporaryDirectory(prefix="acp-bench-cpu-") as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
        log = Path(tmp) / "cpu.log"
        extra = dict(kwargs.pop("extra_env", None) or {})  # type: ignore[call-overload]
        extra[LOG_ENV] = str(log)
        extra["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO_ROOT),
                                              os.environ.get("PYTHONPATH", "")])
        sample = run(argv, extra_env=extra, **kwargs)  # type: ignore[arg-type]
        return sample, read_split(log, sample.cpu)
