"""Stability is a tested property: the same target gets the same verdict on a busy machine.

While every core is kept busy (Debian's ``stress-ng`` when installed, else busy-loop
processes this module starts and ends by process group; they run while the rest of the
machine leaves the cores short of oversubscribed: :class:`Loops`), targets are run
through the suite with ``--repeat`` (each case played several times in one run, at the
default ``-j auto``), and every repetition's transcript is graded again on its own, so
each repetition's rows are known exactly. What must hold:

* a conformant target (the reference agent under the default profile and under
  ``acp-schema-1.21``, the reference client, every fixture of ``fixtures/*/manifest.yaml``
  that expects no fail and no warn) has no fail and no warn row in any repetition;
* a broken target (the demo's broken agent and client, and the broken fixtures) gives the
  same set of (case, rule, outcome) rows in every repetition.

The default selection: the reference targets and the demo's broken targets over the whole
suite, each conformant fixture over the whole suite of its versions, and the broken
fixtures whose faults a race could move (``TIMING``) over the cases of the rules they
break. ``ACP_STABILITY=all`` adds every other broken fixture of the manifests (each over
the cases of the rules it breaks). ``ACP_STABILITY_REPEAT=N`` plays every case N times
(default 2); the failure message lists exactly the rows that moved, repetition by
repetition.

The targets' runs go ``ACP_STABILITY_PARALLEL`` at a time (default 4) beside the busy
loops, so the machine is busy with the suite's own work as well as with the loops, and
the loops take a share of the cores only while the runs go. The module is one test, so
one xdist worker plays it (``--dist loadgroup`` would do that for a group of tests, but
pytest-xdist 3.8 cannot group under pytest 9.2, whose node IDs it can no longer change);
a target that fails is named in the failure message with what it did wrong.
``ACP_STABILITY=ID,ID`` plays only the targets with those IDs (``reference-agent``,
``agent-late_replay``, ...).
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT, cli_env
from helpers import settled

from conformance import transcript as tmod
from conformance.grading import grade_file

REPEAT = int(os.environ.get("ACP_STABILITY_REPEAT", "2"))
PARALLEL = int(os.environ.get("ACP_STABILITY_PARALLEL", "4"))
FIXTURES = REPO_ROOT / "fixtures"
PY = shlex.quote(sys.executable)
BAD = ("fail", "warn")


@dataclass(frozen=True)
class Target:
    id: str
    args: tuple[str, ...]  # the command line after ``acp-conformance``
    clean: bool  # conformant: no fail, no warn; else the same rows in every repetition


def _manifest(kind: str) -> Any:
    return yaml.safe_load((FIXTURES / kind / "manifest.yaml").read_text("utf-8"))


def _faults(expect: Any, profile: str | None = None) -> list[str]:
    """The fail and warn IDs an expectation lists (under ``profile`` when it maps them)."""
    out: list[str] = []
    for version in (expect or {}).values():
        version = version or {}
        out += list(version.get("fail") or []) + list(version.get("warn") or [])
        for name, by in (version.get("profiles") or {}).items():
            if profile is None or name == profile:
                out += list((by or {}).get("fail") or []) + list((by or {}).get("warn") or [])
    return out


def _protocol(protocols: list[int]) -> tuple[str, ...]:
    return ("--protocol", "both" if len(protocols) == 2 else str(protocols[0]))


def agent_targets() -> list[Target]:
    manifest = _manifest("agents")
    out = []
    for f in manifest["fixtures"]:
        agent = f"{PY} {shlex.quote(str(FIXTURES / 'agents' / (f['name'] + '.py')))}"
        base = ("--agent", agent, *_protocol(f["protocols"]))
        faults = _faults(f.get("expect"))
        if not faults:  # conformant under every profile: the whole suite of its versions
            out.append(Target(f"agent-{f['name']}", base, True))
            continue
        # broken: the cases of the rules it breaks, under a profile that grades them (the
        # default, unless only another profile's expectation lists a fault)
        args = base + tuple(a for r in sorted({r.split("/", 1)[0] for r in faults})
                            for a in ("--case", r))
        if not _faults({p: {k: v for k, v in (e or {}).items() if k != "profiles"}
                        for p, e in f["expect"].items()}):
            args += ("--profile", next(p for p in manifest["profiles"]
                                       if _faults(f["expect"], p)))
        out.append(Target(f"agent-{f['name']}", args, False))
    return out


def client_targets() -> list[Target]:
    out = []
    for f in _manifest("clients")["clients"]:
        path = FIXTURES / "clients" / f["file"]
        if f["run"] == "adapter":
            args: tuple[str, ...] = ("--client-adapter", f"{path}:make_client")
        else:
            words = [sys.executable, str(path), "--agent-cmd", "{agent}", *f.get("args", [])]
            args = ("--client", " ".join(shlex.quote(w) for w in words))
            if f["run"] != "wire":
                args += ("--client-profile", str(FIXTURES / "clients" / f["profile"]))
        if "acp_profile" in f:
            args += ("--profile", f["acp_profile"])
        protocols = sorted(int(v[1:]) for v in f["expect"])
        args += _protocol(protocols) + tuple(a for c in f["cases"] for a in ("--case", c))
        out.append(Target(f"client-{f['file'][:-3]}", args, not _faults(f["expect"])))
    return out


def proxy_targets() -> list[Target]:
    out = []
    for f in _manifest("proxies")["fixtures"]:
        proxy = f"{PY} {shlex.quote(str(FIXTURES / 'proxies' / (f['name'] + '.py')))} {{agent}}"
        args = ("--proxy", proxy, *_protocol(f["protocols"]))
        if f.get("adapts"):
            args += ("--proxy-adapts",)
        out.append(Target(f"proxy-{f['name']}", args, not _faults(f.get("expect"))))
    return out


REFERENCE_AGENT = f"{PY} -m conformance.reference.agent"
REFERENCE_CLIENT = (f"{PY} -c 'import sys; from conformance.client.reference import main; "
                    "sys.exit(main())' --agent-cmd {agent}")
EVERY = [
    Target("reference-agent", ("--agent", REFERENCE_AGENT), True),
    Target("reference-agent-acp-schema-1.21",
           ("--agent", REFERENCE_AGENT, "--protocol", "2", "--profile", "acp-schema-1.21"), True),
    Target("reference-client", ("--client", REFERENCE_CLIENT, "--client-profile",
                                str(FIXTURES / "clients" / "reference.yaml")), True),
    Target("demo-broken", ("demo", "--broken"), False),
    *agent_targets(), *client_targets(), *proxy_targets(),
]
#: Broken fixtures in the default selection: faults a race could move (a cancel, an echo of
#: queued prompts, a replay after the response, a marker around live chunks).
TIMING = {"agent-update_after_cancel", "agent-late_replay", "agent-v2_queued_prompt_wrong_echo",
          "agent-v2_marker_live_inside", "proxy-fans_out_late"}
CHOSEN = os.environ.get("ACP_STABILITY", "")  # "", "all" or target IDs: see the docstring
TARGETS = [t for t in EVERY if CHOSEN == "all" or (
    t.id in CHOSEN.split(",") if CHOSEN else t.clean or t.id == "demo-broken" or t.id in TIMING)]


def ends_with_us() -> list[str]:
    """A prefix that ends the command when the process that started it ends (util-linux's
    ``setpriv --pdeathsig``, where there is one): a test worker killed outright, as a
    cancelled CI job kills it, leaves no busy loop behind. Empty where there is none."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def runnable() -> int:
    """How many threads are runnable on the machine now (``procs_running`` in /proc/stat;
    -1 where there is no such file)."""
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"procs_running "):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


class Loops:
    """One busy loop per core, each in a process group of its own (stress-ng ``--cpu 1``,
    else a busy-loop process), run so that the machine is always oversubscribed and no
    more: every half second as many loops run as make the runnable threads (the rest of
    the machine's, sampled every 50 ms) at least one more than the cores; the others are
    stopped (SIGSTOP) until then. Alone, the test's runs contend with every loop, as with
    loops that always run; beside other xdist workers that oversubscribe the cores
    themselves, the loops burn no CPU those would have used. Where /proc/stat cannot be
    read, every loop runs all the time."""

    def __init__(self) -> None:
        self.cores = os.cpu_count() or 1
        stress = shutil.which("stress-ng")
        argv = ([stress, "--cpu", "1", "--timeout", "3600s", "--quiet"] if stress
                else [sys.executable, "-c", "while True: pass"])
        self.how = (f"stress-ng --cpu 1, one per core ({self.cores})" if stress
                    else f"{self.cores} busy-loop process(es)")
        self.how += ", running while the rest leaves the cores short of oversubscribed"
        self.procs = [subprocess.Popen([*ends_with_us(), *argv], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, start_new_session=True)
                      for _ in range(self.cores)]
        self.running = self.cores
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._govern, name="busy-loops", daemon=True)
        self.thread.start()

    def _govern(self) -> None:
        while not self.done.is_set():
            samples = []
            for _ in range(10):
                samples.append(runnable())
                if self.done.wait(0.05):
                    return
            if min(samples) < 0:
                return  # nothing to read: every loop keeps running
            others = sum(samples) / len(samples) - self.running - 1  # less this thread
            self._run(max(0, min(self.cores, math.ceil(self.cores + 1 - others))))

    def _run(self, n: int) -> None:
        for i, p in enumerate(self.procs):
            if (i < n) != (i < self.running):
                try:
                    os.killpg(p.pid, signal.SIGCONT if i < n else signal.SIGSTOP)
                except ProcessLookupError:
                    pass
        self.running = n

    def close(self) -> None:
        """End every loop by its process group (a stopped one is continued to take it)."""
        self.done.set()
        self.thread.join(timeout=5)
        for p in self.procs:
            for sig in (signal.SIGTERM, signal.SIGCONT):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


@pytest.fixture(scope="module")
def busy_machine() -> Iterator[str]:
    """Every core kept busy while the module's tests run (:class:`Loops`), the loops all
    ended by their own process groups at the end, or with this process
    (:func:`ends_with_us`)."""
    loops = Loops()
    try:
        yield loops.how
    finally:
        loops.close()


def repetition_of(path: Path) -> int:
    """1 for NAME.jsonl, K for NAME.run-K.jsonl (and the agent sides alike)."""
    last = path.stem.rsplit(".", 1)[-1]
    return int(last[4:]) if last.startswith("run-") and last[4:].isdigit() else 1


def rows_by_repetition(folder: Path) -> dict[str, dict[int, set[tuple[str, str]]]]:
    """{case: {repetition: {(rule, outcome), ...}}}, each repetition's transcript graded on
    its own (a proxy case with the agent side its header names, which must lie beside it)."""
    out: dict[str, dict[int, set[tuple[str, str]]]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        if ".agent-side" in path.name:
            continue
        header = tmod.read_header(path)
        found = grade_file(path, header).findings  # as ``check`` grades it
        out.setdefault(str(header.get("case")), {})[repetition_of(path)] = {
            (f.requirement, f.outcome.value) for f in found}
    return out


def moved(rows: dict[str, dict[int, set[tuple[str, str]]]]) -> list[str]:
    """The rows that are not the same in every repetition of their case, said per case.
    Info and pass count as one: an info row records an ordering the suite cannot control
    (the benefit of the doubt) and never decides a verdict; a fail or warn must not move."""
    out = []
    for case, reps in sorted(rows.items()):
        if len(reps) < 2:
            continue  # not played (or played once: a cut or a case the target refused)
        reps = {k: {(rule, "pass" if o == "info" else o)
                    for rule, o in ((rule, settled(rule, o)) for rule, o in r)}
                for k, r in reps.items()}
        every = set.intersection(*reps.values())
        for k, r in sorted(reps.items()):
            if r - every:
                out.append(f"{case} run {k}: only here {sorted(r - every)}")
    return out


@dataclass(frozen=True)
class Played:
    """A target's run: its exit status, the tail of what it printed, its transcripts."""
    returncode: int
    output: str
    transcripts: Path


class Runs:
    """The targets' runs, :data:`PARALLEL` at a time; a command line still going when the
    test ends is ended by its PID (in this process's group, as a signal to the group
    that runs the tests reaches it too)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="stability")
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.lock = threading.Lock()
        self.closing = False

    def play(self, target: Target) -> Played:
        """One target's run (in a pool thread; :meth:`close` ends it early)."""
        folder = self.root / target.id
        folder.mkdir()
        transcripts = folder / "t"
        args = list(target.args) + ["--repeat", str(REPEAT), "--no-color", "--timeout", "30"]
        if args[0] == "demo":
            args += ["--out", str(folder), "--transcripts", str(transcripts)]
        else:
            args += ["--transcripts", str(transcripts), "--json", str(folder / "r.json")]
        with self.lock:
            if self.closing:
                raise RuntimeError(f"the test ended before {target.id} was played")
            proc = subprocess.Popen([sys.executable, "-m", "conformance", *args],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    cwd=folder, env=cli_env())
            self.procs[target.id] = proc
        try:
            out, err = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += "\n(the run took over 900 s and was ended)"
        finally:
            with self.lock:
                self.procs.pop(target.id, None)
        return Played(proc.returncode, out[-3000:] + err[-3000:], transcripts)

    def close(self) -> None:
        with self.lock:
            self.closing = True
            for proc in self.procs.values():
                proc.terminate()  # the command line ends its own targets
        self.pool.shutdown(wait=True, cancel_futures=True)


def problems(target: Target, played: Played, busy: str) -> str:
    """What is wrong with one target's run (empty when nothing is)."""
    if played.returncode not in (0, 1):
        return f"exit {played.returncode}\n{played.output}"
    rows = rows_by_repetition(played.transcripts)
    if not rows:
        return f"no transcript was graded\n{played.output}"
    played_cases = [c for c, reps in rows.items() if len(reps) == REPEAT]
    # (a conformant target may take no case: one without a capability plays none again)
    if not played_cases and not target.clean:
        return f"no case was played {REPEAT} times: {sorted(rows)}"
    if target.clean:
        bad = sorted({f"{case} run {k}: {rule} {outcome}" for case, reps in rows.items()
                      for k, r in reps.items() for rule, outcome in r if outcome in BAD})
        return f"a conformant target got fail/warn rows (busy: {busy}):\n" \
            + "\n".join(bad) if bad else ""
    if not any(o in BAD for reps in rows.values() for r in reps.values() for _, o in r):
        return "a broken target showed no fault"
    flipped = moved(rows)
    return f"rows moved between repetitions (busy: {busy}):\n" + "\n".join(flipped) \
        if flipped else ""


def test_the_verdict_is_stable_on_a_busy_machine(busy_machine: str, tmp_path: Path) -> None:
    assert TARGETS, f"ACP_STABILITY={CHOSEN}: no such target (IDs: {[t.id for t in EVERY]})"
    runs = Runs(tmp_path)
    try:
        started = [(t, runs.pool.submit(runs.play, t)) for t in TARGETS]
        found = {t.id: problems(t, future.result(), busy_machine) for t, future in started}
    finally:
        runs.close()
    wrong = {k: v for k, v in found.items() if v}
    assert not wrong, f"{len(wrong)} of {len(TARGETS)} target(s):\n\n" + "\n\n".join(
        f"[{k}] {v}" for k, v in wrong.items())
