"""Every report of the demo and of every fixture, as digests: proof that a refactor left
what users read unchanged.

    python tests/report_digests.py --out before.json        # on the old code
    python tests/report_digests.py --out after.json         # on the new code
    python tests/report_digests.py --compare before.json after.json

Each target (the demo; every broken agent of ``fixtures/agents/manifest.yaml`` in its
protocol versions; every broken client of ``fixtures/clients/manifest.yaml``, driven as
its manifest says) runs through the real CLI with ``-j 1`` and a fixed
``SOURCE_DATE_EPOCH``, writing the console summary, JSON, JUnit, Markdown and HTML. The
digest of each output is recorded with its text, so ``--compare`` shows what changed.
What is random by design in every run (the reference agent's ``uuid4`` message and
session IDs, process IDs, temporary folder names) is masked before comparing.

Outputs that depend on timing (how many chunks of a cancelled "long" reply arrived
before the cancel, a shutdown that needed SIGTERM) can differ between two runs of the
same code: run ``--out`` twice on the old code and pass both to ``--compare`` (the
first two files are the old code's runs): an output that differs between those two
is reported as unstable, not as changed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]  # the helpers, and the package they import

from helpers import CLIENT_MANIFEST, client_args

AGENTS = REPO / "fixtures" / "agents"
FORMATS = ("json", "junit", "markdown", "html")


# Random in every run by design, the same in kind: masked before comparing.
MASKS = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"[0-9a-f]{32}"), "<hex>"),  # uuid4().hex: message, session, tool call IDs
    (re.compile(r"acp-[a-z-]+?[-_][A-Za-z0-9_]{8}\b"), "<tmpdir>"),  # tempfile.mkdtemp names
    (re.compile(r"(p(?:g)?id(?:&quot;|\\?\")?\s*:\s*)\d+"), r"\1<pid>"),
)


def masked(text: str) -> str:
    for pattern, repl in MASKS:
        text = pattern.sub(repl, text)
    return text


def digest(entry: dict[str, Any]) -> str:
    return hashlib.sha256(masked(entry["text"]).encode()).hexdigest()


def targets() -> dict[str, list[str]]:
    """{name: CLI arguments} for the demo and every fixture."""
    out: dict[str, list[str]] = {"demo": ["demo"]}
    manifest = yaml.safe_load((AGENTS / "manifest.yaml").read_text(encoding="utf-8"))
    for fx in manifest["fixtures"]:
        protocols = fx.get("protocols", [1, 2])
        proto = "both" if len(protocols) > 1 else str(protocols[0])
        out[f"agent/{fx['name']}"] = ["--agent", f"{sys.executable} {AGENTS / fx['name']}.py",
                                      "--protocol", proto]
    for entry in CLIENT_MANIFEST:
        args = client_args(entry)
        for case in entry.get("cases", []):
            args += ["--case", case]
        out[f"client/{entry['file']}"] = args
    return out


def run_one(name: str, args: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="acp-digest-") as tmp:
        files = {f: Path(tmp) / f"report.{f}" for f in FORMATS}
        extra: list[str] = []
        if args[0] != "demo":
            extra = ["-j", "1", "--no-color"] + [x for f, p in files.items()
                                                 for x in (f"--{f}", str(p))]
        env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000", NO_COLOR="1")
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run([sys.executable, "-m", "conformance", *args, *extra],
                              capture_output=True, text=True, cwd=REPO, env=env, timeout=600,
                              check=False)
        texts = {"console": proc.stdout.replace(tmp, "<tmp>"), "exit": str(proc.returncode)}
        for f, p in files.items():
            if p.exists():
                texts[f] = p.read_text(encoding="utf-8").replace(tmp, "<tmp>")
    return texts


def record(out: Path, jobs: int, only: list[str]) -> None:
    plan = {n: a for n, a in targets().items() if not only or n in only}
    results: dict[str, Any] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, n, a): n for n, a in plan.items()}
        for fut in concurrent.futures.as_completed(futures):
            name = futures[fut]
            texts = fut.result()
            results[name] = {k: {"text": v} for k, v in texts.items()}
            print(f"{name}: exit {texts['exit']}", flush=True)
    out.write_text(json.dumps(dict(sorted(results.items())), indent=1), encoding="utf-8")


def compare(paths: list[Path]) -> int:
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    old, new = runs[0], runs[-1]
    noisy = runs[1] if len(runs) == 3 else None
    changed = unstable = same = 0

    def of(run: dict[str, Any], name: str, fmt: str) -> str | None:
        entry = run.get(name, {}).get(fmt)
        return digest(entry) if entry is not None else None

    for name in sorted(set(old) | set(new)):
        for fmt in sorted(set(old.get(name, {})) | set(new.get(name, {}))):
            a, b = of(old, name, fmt), of(new, name, fmt)
            if a == b:
                same += 1
            elif noisy is not None and of(noisy, name, fmt) != a:
                unstable += 1
                print(f"unstable (differs between two runs of the old code): {name} {fmt}")
            else:
                changed += 1
                print(f"CHANGED: {name} {fmt}")
    print(f"{same} identical, {changed} changed, {unstable} unstable")
    return 1 if changed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="record the digests of this checkout's reports")
    p.add_argument("--compare", type=Path, nargs="+", metavar="FILE",
                   help="OLD NEW, or OLD OLD-AGAIN NEW: what changed")
    p.add_argument("-j", "--jobs", type=int, default=2, help="targets run at once")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="only this target (e.g. client/trimmed.py); repeatable")
    ns = p.parse_args()
    if ns.out:
        record(ns.out, ns.jobs, ns.only)
        return 0
    if ns.compare and len(ns.compare) in (2, 3):
        return compare(ns.compare)
    p.error("give --out FILE or --compare OLD [OLD-AGAIN] NEW")
    return 2


if __name__ == "__main__":
    sys.exit(main())
