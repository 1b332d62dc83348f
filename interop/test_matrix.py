"""The interop matrix as pytest items: one per target x run x protocol version.

Each item installs its target (once per cache, under a lock), runs the suite against it
for one protocol version, and asserts that every requirement's verdict matches the
baseline in ``interop/targets/<target>.yaml``. Item IDs read ``<target>/<run>/v<N>``,
so ``-k codex-acp`` or ``-k "suite and v2"`` selects a shard for a CI matrix.
"""

from __future__ import annotations

import matrix
import pytest

try:
    TARGETS = matrix.load_targets([])
except matrix.InteropError as exc:
    pytest.fail(str(exc), pytrace=False)

ITEMS = [pytest.param(t, r, p, id=f"{t.name}/{r.name}/{p}")
         for t in TARGETS for r in t.runs for p in matrix.protocols_of(r)]


@pytest.mark.parametrize(("target", "run", "protocol"), ITEMS)
def test_verdicts_match_the_baseline(target: matrix.Target, run: matrix.Run, protocol: str,
                                     installer: matrix.Installer,
                                     pytestconfig: pytest.Config) -> None:
    try:
        installer.install(target)
        inner = matrix.behind(run)  # a proxy run's agent behind the proxy
        if inner is not None:
            installer.install(inner)
    except matrix.InteropError as exc:
        pytest.fail(str(exc), pytrace=False)
    if pytestconfig.getoption("--install-only"):
        pytest.skip(f"--install-only: {target.name} is installed")
    res = matrix.run_one(target, run, installer, protocol)
    problems = matrix.compare(res)
    where = f"(transcripts: {res.out}/transcripts, {res.seconds:.0f} s)"
    if pytestconfig.getoption("--update") and not res.error:
        matrix.update_baseline(res, installer.cache / "locks")
        for line in problems:
            print(f"baseline changed: {line}")
        return
    assert not problems, "\n".join([f"{target.name}/{run.name}/{protocol} {where}:", *problems])
