"""The client suite end to end: the reference client passes on every path (pty with a
profile, one-shot, in-process adapter, wire only), hostile clients become findings with
evidence and leave no process behind, profiles are validated with file:line errors, and
a saved client transcript regrades offline with the same result.
"""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_report as cli
from helpers import alive, pids_in

from conformance.client.runner import reference_client

REPO = Path(__file__).resolve().parents[1]
def by_requirement(report: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in report["results"]:
        out.setdefault(r["requirement"], set()).add(r["outcome"])
    return out


def reference_profile(tmp_path: Path, render: str = "cumulative") -> Path:
    from conformance.client.reference import PROFILE_YAML

    path = tmp_path / f"reference-{render}.yaml"
    path.write_text(PROFILE_YAML.replace("cumulative", render), encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# The reference client passes, on every path
# --------------------------------------------------------------------------


def test_reference_client_through_the_pty_passes_v1_and_v2(tmp_path: Path) -> None:
    command, _ = reference_client()
    code, report, out = cli("--client", command, "--client-profile",
                            str(reference_profile(tmp_path)), "--case", "client-grouping",
                            "--case", "client-opacity", "--case", "client-v2-upserts",
                            "--case", "client-missing-and-null", "--transcripts",
                            str(tmp_path / "tr"), tmp_path=tmp_path)
    assert code == 0, out
    assert report["role"] == "client" and report["summary"]["verdict"] == "pass"
    seen = by_requirement(report)
    for req in ("MID-C-02/merged", "MID-C-03/merged", "MID-C-03/content", "MID-C-04",
                "MID-V2-03", "MID-C-08/probe", "MID-C-01"):
        assert seen[req] == {"pass"} or seen[req] == {"pass", "not_applicable"}, (req, seen)
    assert {c["protocol"] for c in report["cases"]} == {1, 2}
    assert report["target_info"]["name"] == "acp-conformance-reference-client"
    # Every process the run started (client and agent doubles) is gone.
    pids = pids_in(tmp_path / "tr")
    assert pids and not any(alive(p) for p in pids)


def test_reference_client_in_process_passes_every_client_case(tmp_path: Path) -> None:
    code, report, out = cli("--client-adapter", "conformance.client.reference:make_client",
                            tmp_path=tmp_path)
    assert code == 0, out
    seen = by_requirement(report)
    # Every case grades every client rule: a rule passes where its situation comes up and
    # is not_applicable (with its reason) elsewhere, never failing.
    for rule in ("MID-V2-04", "MID-C-05", "MID-V2-07"):  # the adapter shows _meta: testable
        assert "pass" in seen[rule] and seen[rule] <= {"pass", "not_applicable"}, rule
    assert {c["case"].split("@")[0] for c in report["cases"]} >= {
        "client-fuzz", "client-display-order", "client-empty-id", "client-malformed-ids"}


def test_reference_client_one_shot_and_incremental(tmp_path: Path) -> None:
    command, _ = reference_client()
    one_shot = command + " --prompt {prompt}"
    code, report, out = cli("--client", one_shot, "--client-profile",
                            str(reference_profile(tmp_path)), "--case", "client-grouping",
                            tmp_path=tmp_path, name="one-shot")
    assert code == 0, out
    assert by_requirement(report)["MID-C-03/split"] == {"pass"}
    incremental, _ = reference_client("incremental")
    code, report, out = cli("--client", incremental, "--client-profile",
                            str(reference_profile(tmp_path, "incremental")), "--case",
                            "client-grouping", "--protocol", "2", tmp_path=tmp_path,
                            name="incremental")
    assert code == 0, out


def test_without_profile_observation_is_not_testable(tmp_path: Path) -> None:
    command, _ = reference_client()
    code, report, out = cli("--client", command, "--case", "client-opacity", "--protocol", "1",
                            tmp_path=tmp_path)
    assert code == 0, out
    seen = by_requirement(report)
    assert seen["MID-C-08/probe"] == {"pass"} and seen["MID-C-01"] == {"pass"}
    observed = [r for r in report["results"] if r["requirement"].startswith("MID-C-02")]
    assert observed and all(r["outcome"] == "not_applicable"
                            and r["message"].startswith("not testable: no profile")
                            for r in observed)


def test_demo_runs_both_suites(tmp_path: Path) -> None:
    code, report, out = cli("demo", "--case", "wire-shapes", "--case", "client-grouping",
                            tmp_path=tmp_path)
    assert code == 0, out
    assert "Running the client suite against the bundled reference client" in out
    client = json.loads((tmp_path / "report-client.json").read_text(encoding="utf-8"))
    assert client["role"] == "client" and client["summary"]["verdict"] == "pass"
    assert report["role"] == "agent"


def test_saved_client_transcript_regrades_offline(tmp_path: Path) -> None:
    code, report, out = cli("--client-adapter", "fixtures/clients/case_insensitive.py:make_client",
                            "--case", "client-opacity", "--protocol", "2", "--transcripts",
                            str(tmp_path / "tr"), tmp_path=tmp_path)
    assert code == 1, out
    [saved] = list((tmp_path / "tr").glob("*.jsonl"))
    code2, regraded, out2 = cli("check", str(saved), tmp_path=tmp_path, name="check")
    assert code2 == 1, out2
    live = {(r["requirement"], r["outcome"]) for r in report["results"]}
    again = {(r["requirement"], r["outcome"]) for r in regraded["results"]}
    assert ("MID-C-02/merged", "fail") in live & again


# --------------------------------------------------------------------------
# Hostile clients: findings with evidence, every process ended
# --------------------------------------------------------------------------


def write(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


PROFILE = "ready: '^> $'\nsubmit: \"{prompt}\\r\"\nmessage: '^(?P<role>agent): (?P<text>.*)$'\n"


def test_client_that_never_shows_ready(tmp_path: Path) -> None:
    cmd = write(tmp_path, "silent.py", f"""
        import os, sys, time
        open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))
        print("starting...", flush=True)
        sys.stdin.read()
    """)
    (tmp_path / "p.yaml").write_text(PROFILE, encoding="utf-8")
    code, report, out = cli("--client", cmd + " {agent}", "--client-profile",
                            str(tmp_path / "p.yaml"), "--case", "client-grouping", "--protocol",
                            "1", "--timeout", "1.5", tmp_path=tmp_path)
    assert code == 1, out
    [hang] = [r for r in report["results"] if r["requirement"] == "MID-C-08/hang"]
    assert hang["outcome"] == "fail" and "ready" in hang["message"]
    assert "starting..." in hang["evidence"]["actual"]["output_tail"]
    assert not alive(int((tmp_path / "pid").read_text()))


def test_client_that_hangs_mid_turn(tmp_path: Path) -> None:
    cmd = write(tmp_path, "hangs.py", f"""
        import os, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from conformance.client.reference import ReferenceClient, main
        open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid()))

        class Hangs(ReferenceClient):
            def on_chunk(self, kind, update):
                while True:
                    time.sleep(1)

        sys.exit(main(client_class=Hangs))
    """)
    profile = reference_profile(tmp_path)
    code, report, out = cli("--client", cmd + " --agent-cmd {agent}", "--client-profile",
                            str(profile), "--case", "client-grouping", "--protocol", "2",
                            "--timeout", "2", "--transcripts", str(tmp_path / "tr"),
                            tmp_path=tmp_path)
    assert code == 1, out
    seen = by_requirement(report)
    assert "fail" in seen["MID-C-08/hang"] or "fail" in seen["MID-C-08/probe"], seen
    assert "fail" not in seen["MID-C-03/content"]  # one fault: the hang, not the lost turn
    pids = pids_in(tmp_path / "tr") + [int((tmp_path / "pid").read_text())]
    assert not any(alive(p) for p in pids)


def test_send_delay_waits_for_a_client_that_discards_typeahead(tmp_path: Path) -> None:
    """A client that draws its prompt, then resets the terminal and throws away what was
    typed meanwhile (TCSAFLUSH, as curses-style programs do) times out when the suite
    types at once, and passes with the profile's send_delay."""
    cmd = write(tmp_path, "discards.py", f"""
        import sys, termios, time
        sys.path.insert(0, {str(REPO)!r})
        from conformance.client import reference

        pump = reference.Terminal.pump

        def late_reader(self, until, *, stdin=False):
            if stdin:
                time.sleep(0.5)
                fd = sys.stdin.fileno()
                termios.tcsetattr(fd, termios.TCSAFLUSH, termios.tcgetattr(fd))
            return pump(self, until, stdin=stdin)

        reference.Terminal.pump = late_reader
        sys.exit(reference.main())
    """) + " --agent-cmd {agent}"
    base = reference_profile(tmp_path).read_text(encoding="utf-8")
    outcomes = {}
    for delay in (0, 2.0):
        profile = tmp_path / f"delay-{delay}.yaml"
        profile.write_text(base + f"send_delay: {delay}\n", encoding="utf-8")
        code, report, out = cli("--client", cmd, "--client-profile", str(profile), "--case",
                                "client-grouping", "--protocol", "1", "--timeout", "2",
                                tmp_path=tmp_path, name=f"delay-{delay}")
        outcomes[delay] = (code, by_requirement(report).get("MID-C-08/hang"), out)
    assert outcomes[0][0] == 1 and "fail" in outcomes[0][1], outcomes[0]
    assert outcomes[2.0][0] == 0 and outcomes[2.0][1] == {"pass"}, outcomes[2.0]


def test_client_that_floods_its_output(tmp_path: Path) -> None:
    cmd = write(tmp_path, "flood.py", """
        import sys
        line = "x" * 4096 + "\\n"
        while True:
            sys.stdout.write(line)
    """)
    (tmp_path / "p.yaml").write_text(PROFILE, encoding="utf-8")
    code, report, out = cli("--client", cmd + " {agent}", "--client-profile",
                            str(tmp_path / "p.yaml"), "--case", "client-grouping", "--protocol",
                            "1", "--timeout", "5", tmp_path=tmp_path)
    assert code == 1, out
    [flood] = [r for r in report["results"] if r["requirement"] == "MID-C-08/flood"]
    assert flood["outcome"] == "fail" and "xxxx" in flood["evidence"]["actual"]["output_tail"]


def test_adapter_that_raises_is_a_crash(tmp_path: Path) -> None:
    mod = tmp_path / "raising.py"
    mod.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from conformance.client.reference import ReferenceAdapter, ReferenceClient

        class Raises(ReferenceClient):
            def on_chunk(self, kind, update):
                raise KeyError("messageId")

        class Adapter(ReferenceAdapter):
            client_class = Raises

        def make_client():
            return Adapter()
    """), encoding="utf-8")
    code, report, out = cli("--client-adapter", f"{mod}:make_client", "--case",
                            "client-grouping", "--protocol", "1", tmp_path=tmp_path)
    assert code == 1, out
    [crash] = [r for r in report["results"] if r["requirement"] == "MID-C-08/exit"]
    assert crash["outcome"] == "fail" and "KeyError" in json.dumps(crash["evidence"])


@pytest.mark.parametrize("hangs_in", ["on_chunk", "messages"])
def test_adapter_that_hangs_is_a_hang_and_the_run_goes_on(tmp_path: Path, hangs_in: str) -> None:
    """A call into the adapter that never returns is MID-C-08/hang naming the call; the
    thread stuck in it is given up, the next case runs on a new one, and the run ends
    within the timeouts even though close() hangs too."""
    mod = tmp_path / "hanging.py"
    mod.write_text(textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(REPO)!r})
        from conformance.client.reference import ReferenceAdapter, ReferenceClient

        FOREVER = threading.Event()

        class Hangs(ReferenceClient):
            def on_chunk(self, kind, update):
                if {hangs_in!r} == "on_chunk":
                    FOREVER.wait()
                return super().on_chunk(kind, update)

        class Adapter(ReferenceAdapter):
            client_class = Hangs

            def messages(self):
                if {hangs_in!r} == "messages":
                    FOREVER.wait()
                return super().messages()

            def close(self):
                FOREVER.wait()

        def make_client():
            return Adapter()
    """), encoding="utf-8")
    code, report, out = cli("--client-adapter", f"{mod}:make_client", "--case",
                            "client-grouping", "--case", "client-opacity", "--protocol", "1",
                            "--timeout", "1", tmp_path=tmp_path)
    assert code == 1, out
    hangs = [r for r in report["results"] if r["requirement"] == "MID-C-08/hang"]
    assert {r["case"] for r in hangs if r["outcome"] == "fail"} == {
        "client-grouping@v1", "client-opacity@v1"}, hangs
    waited = json.dumps([r["evidence"] for r in hangs])
    assert ("receive()" if hangs_in == "on_chunk" else "messages()") in waited
    assert "Traceback" not in out


# --------------------------------------------------------------------------
# Bad input: one line, exit 2
# --------------------------------------------------------------------------


@pytest.mark.parametrize("text, where, says", [
    ("ready: '^> $'\nsubmit: '{prompt}\\r'\nmessage: '(?P<role>x)'\n", 3, "(?P<text>"),
    ("ready: '('\nsubmit: '{prompt}'\nmessage: '(?P<role>x)(?P<text>y)'\n", 1, "not a valid regex"),
    ("ready: '>'\nsubmit: 'go'\nmessage: '(?P<role>x)(?P<text>y)'\n", 2, "{prompt}"),
    ("ready: '>'\nsubmit: '{prompt}'\nmessage: '(?P<role>x)(?P<text>y)'\nrender: all\n", 4,
     "cumulative or incremental"),
    ("ready: '>'\nsubmit: '{prompt}'\nmesage: '(?P<role>x)(?P<text>y)'\n", 3, "unknown key"),
    ("message: '(?P<role>x)(?P<text>y)'\n", None, "missing key 'ready'"),
    ("ready: '>'\nsubmit: '{prompt}'\nmessage: '(?P<role>x)(?P<text>y)'\nsend_delay: 9\n", 4,
     "send_delay"),
    ("ready: '>'\nsubmit: '{prompt}'\nmessage: '(?P<role>x)(?P<text>y)'\nsend_delay: no\n", 4,
     "send_delay"),
])
def test_bad_profile_is_a_usage_error(tmp_path: Path, text: str, where: int | None,
                                      says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    command, _ = reference_client()
    code, _, out = cli("--client", command, "--client-profile", str(path), tmp_path=tmp_path)
    assert code == 2, out
    assert says in out and "Traceback" not in out
    if where is not None:
        assert f"bad.yaml:{where}:" in out


@pytest.mark.parametrize("args, says", [
    (["--client", "true"], "{agent}"),
    (["--client", "no-such-client-xyz {agent}"], "not found"),
    (["--client-adapter", "nosuchmodule:make"], "cannot import"),
    (["--client-adapter", "conformance.client.reference"], "MODULE:FACTORY"),
    (["--client", "x {agent}", "--client-adapter", "a:b"], "not both"),
])
def test_bad_client_options_are_usage_errors(tmp_path: Path, args: list[str], says: str) -> None:
    code, _, out = cli(*args, "--case", "client-grouping", tmp_path=tmp_path)
    assert code == 2, out
    assert says in out and "Traceback" not in out
