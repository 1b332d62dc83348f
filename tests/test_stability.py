"""Stability is a tested property: the same target gets the same verdict on a busy machine.

While every core is kept busy (Debian's ``stress-ng`` when installed, else busy-loop
processes this module starts and ends by PID), targets are run through the suite with
``--repeat`` (each case played several times in one run, at the default ``-j auto``), and
every repetition's transcript is graded again on its own, so each repetition's rows are
known exactly. What must hold:

* a conformant target (the reference agent under the default profile and under
  ``acp-schema-1.21``, the reference client, every fixture of ``fixtures/*/manifest.yaml``
  that expects no fail and no warn) has no fail and no warn row in any repetition;
* a broken target (the demo's broken agent and client, and the broken fixtures) gives the
  same set of (case, rule, outcome) rows in every repetition.

The default selection fits a few minutes of the test budget on two cores (about 4 min
measured): the reference targets and the demo's broken targets over the whole suite, each
conformant fixture over the whole suite of its versions, and the broken fixtures whose
faults a race could move (``TIMING``) over the cases of the rules they break.
``ACP_STABILITY=all`` adds every other broken fixture of the manifests (each over the
cases of the rules it breaks; some ten minutes more). ``ACP_STABILITY_REPEAT=N`` plays every case N times (default 2); the failure
message lists exactly the rows that moved, repetition by repetition.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
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
TARGETS = [t for t in EVERY if os.environ.get("ACP_STABILITY") == "all"
           or t.clean or t.id == "demo-broken" or t.id in TIMING]


@pytest.fixture(scope="module")
def busy_machine() -> Iterator[str]:
    """Every core kept busy while the module's tests run: stress-ng (one CPU worker per
    core, in its own process group), else one busy-loop process per core; all ended by
    their own process group or PID at the end."""
    cores = os.cpu_count() or 1
    stress = shutil.which("stress-ng")
    if stress:
        procs = [subprocess.Popen([stress, "--cpu", str(cores), "--timeout", "3600s", "--quiet"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)]
        how = f"stress-ng --cpu {cores}"
    else:
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                  start_new_session=True) for _ in range(cores)]
        how = f"{cores} busy-loop process(es)"
    try:
        yield how
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)  # its own group: stress-ng and its workers
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


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


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
def test_the_verdict_is_stable_on_a_busy_machine(target: Target, busy_machine: str,
                                                 tmp_path: Path) -> None:
    transcripts = tmp_path / "t"
    args = list(target.args) + ["--repeat", str(REPEAT), "--no-color", "--timeout", "30"]
    if args[0] == "demo":
        args += ["--out", str(tmp_path), "--transcripts", str(transcripts)]
    else:
        args += ["--transcripts", str(transcripts), "--json", str(tmp_path / "r.json")]
    proc = subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=cli_env(), timeout=900, check=False)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = rows_by_repetition(transcripts)
    assert rows, proc.stdout[-3000:] + proc.stderr[-3000:]
    played = [c for c, reps in rows.items() if len(reps) == REPEAT]
    # (a conformant target may take no case: one without a capability plays none again)
    assert played or target.clean, f"no case was played {REPEAT} times: {sorted(rows)}"
    if target.clean:
        bad = sorted({f"{case} run {k}: {rule} {outcome}" for case, reps in rows.items()
                      for k, r in reps.items() for rule, outcome in r if outcome in BAD})
        assert bad == [], f"a conformant target got fail/warn rows (busy: {busy_machine}):\n" \
            + "\n".join(bad)
    else:
        assert any(o in BAD for reps in rows.values() for r in reps.values() for _, o in r), \
            "a broken target showed no fault"
        flipped = moved(rows)
        assert flipped == [], f"rows moved between repetitions (busy: {busy_machine}):\n" \
            + "\n".join(flipped)
