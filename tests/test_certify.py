"""Submission bundles (``--certify DIR``) and ``verify``: a bundle of a real run verifies,
and any edit to it is found and named; a bundle that cannot be trusted to unpack is
refused before anything is written outside the folder given (docs/certify.md)."""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from conftest import REPO_ROOT, run_cli, run_cli_process

pytest_plugins = ["pytester"]

REFERENCE = shlex.join([sys.executable, "-m", "conformance.reference.agent"])
BROKEN = shlex.join([sys.executable, str(REPO_ROOT / "fixtures" / "agents" / "per_turn_counter.py")])
TRANSPARENT = REPO_ROOT / "fixtures" / "proxies" / "transparent.py"
CASE_CLIENT = REPO_ROOT / "fixtures" / "clients" / "case_insensitive.py"
SECRET = "s3cr3t-value-never-written"


def certify(tmp: Path, name: str, *args: str) -> tuple[int, Path, str]:
    folder = tmp / name
    proc = run_cli(*args, "--certify", str(folder), "--out", str(tmp / f"{name}-out"),
                   "--no-color", "-j", "2", timeout=400)
    return proc.returncode, folder, proc.stdout + proc.stderr


def verify(bundle: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli("verify", str(bundle), *args, cwd=cwd, timeout=300)


def rehash(folder: Path) -> None:
    """What someone who edits a bundle does next: make the manifest agree with the files."""
    man = json.loads((folder / "manifest.intoto.json").read_text(encoding="utf-8"))
    for s in man["subject"]:
        s["digest"]["sha256"] = hashlib.sha256((folder / s["name"]).read_bytes()).hexdigest()
    (folder / "manifest.intoto.json").write_text(json.dumps(man, indent=2), encoding="utf-8")


def copy(bundle: Path, tmp: Path, name: str) -> Path:
    out = tmp / name
    shutil.copytree(bundle, out)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference agent, v1: every MUST exercised, a full PASS (a secret in its env)."""
    tmp = tmp_path_factory.mktemp("ref")
    code, folder, out = certify(tmp, "bundle", "--agent", REFERENCE, "--protocol", "1",
                                "--agent-env", f"API_TOKEN={SECRET}")
    assert code == 0, out
    return folder


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("broken")
    code, folder, out = certify(tmp, "bundle", "--agent", BROKEN, "--protocol", "1")
    assert code == 1, out
    return folder


@pytest.fixture(scope="module")
def partial(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("partial")
    code, folder, out = certify(tmp, "bundle", "--agent", REFERENCE, "--protocol", "1",
                                "--case", "ids-across-turns")
    assert code == 0, out
    return folder


def manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.intoto.json").read_text(encoding="utf-8"))


def test_the_bundle_holds_every_file_under_an_in_toto_statement(reference: Path) -> None:
    man = manifest(reference)
    assert man["_type"] == "https://in-toto.io/Statement/v1"
    assert man["predicateType"] == "urn:acp-conformance:certification:v1"
    files = sorted(p.relative_to(reference).as_posix() for p in reference.rglob("*")
                   if p.is_file() and p.name != "manifest.intoto.json")
    assert [s["name"] for s in man["subject"]] == files
    for s in man["subject"]:
        assert s["digest"]["sha256"] == hashlib.sha256((reference / s["name"]).read_bytes()).hexdigest()
    for name in ("statement.md", "statement.json", "report.json", "run.json", "badge.svg"):
        assert name in files
    report = json.loads((reference / "report.json").read_text(encoding="utf-8"))
    transcripts = [f for f in files if f.startswith("transcripts/")]
    assert len(transcripts) == len(report["cases"]) > 5
    assert {c["transcript"] for c in report["cases"]} == set(transcripts)
    pred = man["predicate"]
    assert pred["verdict"] == "PASS" and pred["must"]["passed"] is True
    assert pred["protocols"] == [1] and pred["catalogue"].startswith("sha256:")
    assert pred["counts"] == {k: v for k, v in report["summary"].items()
                              if k in ("pass", "fail", "warn", "info", "not_applicable")}
    assert pred["coverage"]["v1"]["exercised"] == pred["coverage"]["v1"]["musts"]
    run = json.loads((reference / "run.json").read_text(encoding="utf-8"))
    assert set(run["environment"]) == {"os", "os_release", "machine", "python",
                                       "python_implementation", "cores"}
    assert run["target"]["described"]["name"] == "acp-conformance-reference-agent"
    assert run["catalogue"]["profile"] == "acp-sdk-2.4.0"
    assert "--agent-env" in run["command_line"] and SECRET not in run["command_line"]
    for path in reference.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    with tarfile.open(reference.with_name("bundle.tar.gz")) as tar:
        names = tar.getnames()
    from conformance.certify.bundle import write_tarball

    again = reference.with_name("again.tar.gz")  # the archive is a function of the folder
    write_tarball(reference, again)
    assert again.read_bytes() == reference.with_name("bundle.tar.gz").read_bytes()
    again.unlink()
    assert all(n == "bundle" or n.startswith("bundle/") for n in names)
    assert "bundle/manifest.intoto.json" in names


def test_a_bundle_of_the_reference_agent_and_of_a_broken_fixture_verify(
        reference: Path, broken: Path) -> None:
    for bundle, verdict in ((reference, "verdict PASS"), (broken, "verdict FAIL"),
                            (reference.with_name("bundle.tar.gz"), "verdict PASS"),
                            (broken.with_name("bundle.tar.gz"), "verdict FAIL")):
        # the entry point in a real process (the other tests run verify in this one)
        proc = run_cli_process("verify", str(bundle), timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.rstrip().endswith(verdict), proc.stdout
        assert "re-graded" in proc.stdout
    report = json.loads((broken / "report.json").read_text(encoding="utf-8"))
    assert any(r["requirement"] == "MID-A-02/cross-turn-reuse" and r["outcome"] == "fail"
               for r in report["results"])


def test_one_byte_of_a_transcript_is_found_and_named(broken: Path, tmp_path: Path) -> None:
    b = copy(broken, tmp_path, "b")
    victim = sorted((b / "transcripts").iterdir())[0]
    data = bytearray(victim.read_bytes())
    data[-3] = ord("x") if data[-3] != ord("x") else ord("y")
    victim.write_bytes(bytes(data))
    proc = verify(b)
    assert proc.returncode == 1
    assert f"NOT VERIFIED: transcripts/{victim.name}: its SHA-256" in proc.stdout, proc.stdout


def test_one_outcome_in_the_report_is_found_even_with_the_manifest_rehashed(
        broken: Path, tmp_path: Path) -> None:
    b = copy(broken, tmp_path, "b")
    report = json.loads((b / "report.json").read_text(encoding="utf-8"))
    row = next(r for r in report["results"] if r["outcome"] == "fail")
    row["outcome"] = "pass"
    (b / "report.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    proc = verify(b)
    assert proc.returncode == 1
    assert "NOT VERIFIED: report.json: its SHA-256" in proc.stdout, proc.stdout
    rehash(b)
    proc = verify(b)
    assert proc.returncode == 1
    assert (f"NOT VERIFIED: report.json: row ({row['case']}, {row['requirement']}): the "
            "report says pass, the transcript gives fail") in proc.stdout, proc.stdout


def test_one_word_of_the_statement_is_found_and_named(reference: Path, tmp_path: Path) -> None:
    b = copy(reference, tmp_path, "b")
    text = (b / "statement.md").read_text(encoding="utf-8")
    (b / "statement.md").write_text(text.replace("| Side tested | agent |",
                                                 "| Side tested | client |"), encoding="utf-8")
    proc = verify(b)
    assert proc.returncode == 1 and "NOT VERIFIED: statement.md: its SHA-256" in proc.stdout
    rehash(b)
    proc = verify(b)
    assert proc.returncode == 1
    assert "NOT VERIFIED: statement.md: line" in proc.stdout and "Side tested" in proc.stdout


def test_one_digest_in_the_manifest_is_found_and_named(reference: Path, tmp_path: Path) -> None:
    b = copy(reference, tmp_path, "b")
    man = manifest(b)
    target = next(s for s in man["subject"] if s["name"].startswith("transcripts/"))
    digest = target["digest"]["sha256"]
    target["digest"]["sha256"] = ("0" if digest[0] != "0" else "1") + digest[1:]
    (b / "manifest.intoto.json").write_text(json.dumps(man), encoding="utf-8")
    proc = verify(b)
    assert proc.returncode == 1
    assert f"NOT VERIFIED: {target['name']}: its SHA-256" in proc.stdout, proc.stdout


def test_a_transcript_header_edited_to_grade_a_fault_away_is_named(
        broken: Path, tmp_path: Path) -> None:
    """Excluding the failing rule in a transcript's recorded scope, with the report made to
    agree, is still found: the installed case file does not exclude it."""
    b = copy(broken, tmp_path, "b")
    report = json.loads((b / "report.json").read_text(encoding="utf-8"))
    row = next(r for r in report["results"] if r["outcome"] == "fail")
    victim = b / report["cases"][[c["case"] for c in report["cases"]].index(row["case"])][
        "transcript"]
    lines = victim.read_text(encoding="utf-8").split("\n")
    header = json.loads(lines[0])
    header["scope"]["exclude"] = {row["requirement"]: "not ours"}
    victim.write_text("\n".join([json.dumps(header), *lines[1:]]), encoding="utf-8")
    rehash(b)
    proc = verify(b)
    assert proc.returncode == 1
    assert (f"NOT VERIFIED: transcripts/{victim.name}: excludes ['{row['requirement']}']; "
            f"case {row['case'].split('@')[0]} excludes nothing") in proc.stdout, proc.stdout


def test_the_predicate_is_checked_against_the_transcripts(broken: Path, tmp_path: Path) -> None:
    b = copy(broken, tmp_path, "b")
    man = manifest(b)
    man["predicate"]["verdict"] = "PASS"
    (b / "manifest.intoto.json").write_text(json.dumps(man), encoding="utf-8")
    proc = verify(b)
    assert proc.returncode == 1
    assert 'NOT VERIFIED: manifest predicate verdict: says "PASS", the transcripts give "FAIL"' \
        in proc.stdout, proc.stdout


def test_a_partial_bundle_says_so_and_a_claim_of_full_coverage_is_refused(
        partial: Path, tmp_path: Path) -> None:
    st = json.loads((partial / "statement.json").read_text(encoding="utf-8"))
    assert st["verdict"].startswith("PASS, partial:"), st["verdict"]
    text = (partial / "statement.md").read_text(encoding="utf-8")
    assert "### What this run could not measure" in text
    assert "v1: MUST requirements not exercised: MID-" in text
    assert st["scope"]["coverage"]["v1"]["exercised"] < st["scope"]["coverage"]["v1"]["musts"]
    assert verify(partial).returncode == 0
    b = copy(partial, tmp_path, "b")
    full = text.replace(f"| Verdict | **{st['verdict']}** |", "| Verdict | **PASS** |")
    assert full != text
    (b / "statement.md").write_text(full, encoding="utf-8")
    st["verdict"] = "PASS"
    (b / "statement.json").write_text(json.dumps(st, indent=2), encoding="utf-8")
    rehash(b)
    proc = verify(b)
    assert proc.returncode == 1
    assert "statement.md: line" in proc.stdout and "more than its transcripts show" \
        in proc.stdout, proc.stdout
    assert f"statement.json: claims 'PASS'; the transcripts show {st['scope']['partial']!r}" \
        not in proc.stdout  # says the verdict the transcripts give, whole:
    assert "statement.json: claims 'PASS'; the transcripts show 'PASS, partial:" in proc.stdout


def test_another_catalogue_revision_is_an_input_error_unless_regraded(
        partial: Path, tmp_path: Path) -> None:
    b = copy(partial, tmp_path, "b")
    run = json.loads((b / "run.json").read_text(encoding="utf-8"))
    installed = run["catalogue"]["revision"]
    run["catalogue"]["revision"] = "sha256:000000000000"
    (b / "run.json").write_text(json.dumps(run), encoding="utf-8")
    report = json.loads((b / "report.json").read_text(encoding="utf-8"))
    report["graded_against"]["catalogue"] = "sha256:000000000000"
    (b / "report.json").write_text(json.dumps(report), encoding="utf-8")
    rehash(b)
    proc = verify(b)
    assert proc.returncode == 2
    assert "sha256:000000000000" in proc.stderr and installed in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = verify(b, "--regrade")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified:" in proc.stdout and "regrade:" not in proc.stdout  # nothing differs
    row = next(r for r in report["results"] if r["outcome"] == "pass")
    row["outcome"] = "warn"  # graded otherwise then: --regrade says what differs now
    (b / "report.json").write_text(json.dumps(report), encoding="utf-8")
    rehash(b)
    proc = verify(b, "--regrade")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (f"regrade: report.json: row ({row['case']}, {row['requirement']}): the report "
            "says warn, the transcript gives pass") in proc.stdout, proc.stdout


def test_the_badge_is_self_contained_svg(reference: Path, broken: Path, tmp_path: Path) -> None:
    for bundle, word in ((reference, "PASS"), (broken, "FAIL")):
        text = (bundle / "badge.svg").read_text(encoding="utf-8")
        root = ElementTree.fromstring(text)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        every = list(root.iter())
        assert not [e for e in every if e.tag.lower().endswith(("script", "foreignobject",
                                                                "image", "use", "a"))]
        for e in every:
            for k, v in e.attrib.items():
                assert "href" not in k.lower() and not k.lower().startswith("on"), (k, v)
                assert "url(" not in v and "://" not in v.replace("http://www.w3.org/2000/svg", "")
        words = " ".join(e.text or "" for e in every)
        assert word in words and "v1" in words and "catalogue sha256:" in words
    proc = run_cli("--agent", REFERENCE, "--protocol", "1", "--case", "ids-across-turns",
                   "--badge", str(tmp_path / "b.svg"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    assert ">PASS, partial<" in (tmp_path / "b.svg").read_text(encoding="utf-8")


def test_a_client_run_and_a_proxy_run_certify_and_verify(tmp_path: Path) -> None:
    client = " ".join(shlex.quote(w) for w in (sys.executable, str(CASE_CLIENT),
                                                "--agent-cmd", "{agent}"))
    proxy = f"{shlex.quote(sys.executable)} {shlex.quote(str(TRANSPARENT))} {{agent}}"
    for name, args in (("client", ["--client", client, "--case", "client-opacity"]),
                       ("proxy", ["--proxy", proxy, "--case", "proxy-grouping"])):
        code, folder, out = certify(tmp_path, name, *args, "--protocol", "1")
        assert code in (0, 1) and (folder / "manifest.intoto.json").is_file(), out
        pred = manifest(folder)["predicate"]
        assert pred["role"] == name
        transcripts = list((folder / "transcripts").iterdir())
        assert transcripts, out
        if name == "proxy":  # both sides of each case
            assert sorted(p.name for p in transcripts) == [
                "proxy-grouping@v1.agent-side.jsonl", "proxy-grouping@v1.jsonl"]
        proc = verify(folder.with_name(f"{name}.tar.gz"))
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_pytest_plugin_writes_a_bundle_that_verifies(plugin_pytest: Any,
                                                          tmp_path: Path) -> None:
    bundle = tmp_path / "plugin-cert"
    outcome = plugin_pytest("--acp-agent", REFERENCE, "--acp-protocol", "1",
                            "--acp-case", "ids-across-turns", "--acp-certify", str(bundle),
                            "--acp-target-name", "Acme Agent")
    outcome.assert_outcomes(passed=1)
    pred = manifest(bundle)["predicate"]
    assert pred["verdict"].startswith("PASS, partial:") and pred["target"]["name"] == "Acme Agent"
    assert json.loads((bundle / "run.json").read_text(encoding="utf-8"))["command_line"] \
        .startswith("pytest ")
    proc = verify(bundle.with_name("plugin-cert.tar.gz"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- bad input: nothing ever written outside the folder given ------------------------


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def assert_refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("acp-conformance: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_tar_members_that_climb_out_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / f"escaped-{tmp_path.name}.txt"
    cases = {
        "dotdot": ([_file("bundle/../../escaped.txt")], "climbs out"),
        "absolute": ([_file(str(outside))], "absolute path"),
        "symlink": ([_link("bundle/link", str(outside), tarfile.SYMTYPE)], "symbolic link"),
        "hardlink": ([_link("bundle/hard", str(outside), tarfile.LNKTYPE)], "hard link"),
    }
    dev = tarfile.TarInfo("bundle/null")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
    cases["device"] = ([(dev, None)], "character device")
    fifo = tarfile.TarInfo("bundle/fifo")
    fifo.type = tarfile.FIFOTYPE
    cases["fifo"] = ([(fifo, None)], "FIFO")
    for name, (members, words) in cases.items():
        archive = _tar(tmp_path / f"{name}.tar.gz", [*members, _file("bundle/x.txt")])
        assert_refused(verify(archive, cwd=work), words)
        assert not outside.exists() and not (tmp_path / "escaped.txt").exists()
        assert not list(work.iterdir()), name


def test_an_enormous_member_is_refused_before_it_is_read(tmp_path: Path) -> None:
    info = tarfile.TarInfo("bundle/huge.jsonl")
    info.size = 64 * 1024 ** 3  # a header claiming 64 GiB, and no data behind it
    raw = io.BytesIO(info.tobuf(format=tarfile.PAX_FORMAT))
    import gzip

    archive = tmp_path / "huge.tar.gz"
    archive.write_bytes(gzip.compress(raw.getvalue()))
    assert_refused(verify(archive), "huge.jsonl", "bytes, over the")


def test_missing_truncated_foreign_and_incomplete_bundles_are_input_errors(
        reference: Path, tmp_path: Path) -> None:
    assert_refused(verify(tmp_path / "nothing.tar.gz"), "no such bundle")
    whole = reference.with_name("bundle.tar.gz").read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(whole[: len(whole) // 2])
    assert_refused(verify(tmp_path / "cut.tar.gz"), "truncated")
    (tmp_path / "text.tar.gz").write_text("hello", encoding="utf-8")
    assert_refused(verify(tmp_path / "text.tar.gz"), "not a readable bundle")
    foreign = _tar(tmp_path / "foreign.tar.gz", [_file("pkg/setup.py", b"print(1)\n")])
    assert_refused(verify(foreign), "no manifest.intoto.json")
    b = copy(reference, tmp_path, "b")
    victim = sorted((b / "transcripts").iterdir())[0]
    victim.unlink()
    assert_refused(verify(b), "does not hold", victim.name)
    c = copy(reference, tmp_path, "c")
    (c / "manifest.intoto.json").write_text('{"_type": "something else"}', encoding="utf-8")
    assert_refused(verify(c), "not an acp-conformance bundle manifest")
    d = copy(reference, tmp_path, "d")
    (d / "transcripts" / "link.jsonl").symlink_to(tmp_path / "elsewhere")
    assert_refused(verify(d), "symbolic link")


def test_a_run_that_keeps_no_transcripts_still_bundles_them(tmp_path: Path) -> None:
    code, folder, out = certify(tmp_path, "cert", "--agent", REFERENCE, "--protocol", "1",
                                "--case", "ids-across-turns", "--no-transcripts")
    assert code == 0, out
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert [c["transcript"] for c in report["cases"]] == ["transcripts/ids-across-turns@v1.jsonl"]
    assert (folder / "transcripts" / "ids-across-turns@v1.jsonl").is_file()
    assert not (tmp_path / "cert-out" / "transcripts").exists()
    assert verify(folder).returncode == 0


def test_certify_refuses_a_folder_holding_something_else(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine", encoding="utf-8")
    proc = run_cli("--agent", REFERENCE, "--certify", str(tmp_path / "taken"))
    assert_refused(proc, "not empty")
    assert (tmp_path / "taken" / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_require_full_fails_a_partial_pass_and_not_a_full_one(tmp_path: Path) -> None:
    partial_run = run_cli("--agent", REFERENCE, "--protocol", "1", "--case", "ids-across-turns",
                          "--require-full", "--out", str(tmp_path / "a"))
    assert partial_run.returncode == 1, partial_run.stderr
    assert "--require-full: the verdict is only PASS, partial: " in partial_run.stderr
    full = run_cli("--agent", REFERENCE, "--protocol", "1", "--require-full", "-j", "2",
                   "--out", str(tmp_path / "b"))
    assert full.returncode == 0, full.stdout + full.stderr


def test_a_bundle_of_an_interrupted_run_never_verifies_as_a_pass(tmp_path: Path) -> None:
    import os
    import select
    import signal

    sys.path.insert(0, str(REPO_ROOT / "fixtures" / "hostile"))
    from harness import agent_command, finish_cli, start_cli

    fifo = tmp_path / "ready"
    os.mkfifo(fifo)
    bundle = tmp_path / "cert"
    proc = start_cli(["--agent", agent_command("silent_after_prompt"), "--protocol", "1",
                      "--case", "prompt-lifecycle", "--timeout", "60",
                      "--agent-env", f"HOSTILE_READY_FIFO={fifo}", "--certify", str(bundle),
                      "--out", str(tmp_path / "out"), "--no-color"], tmp_path)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert select.select([fd], [], [], 60)[0], "the agent never went silent"
    finally:
        os.close(fd)
    proc.send_signal(signal.SIGINT)
    run = finish_cli(proc, tmp_path, 0.0)
    assert run.returncode == 128 + signal.SIGINT, run.stderr
    pred = manifest(bundle)["predicate"]
    assert pred["verdict"] == "FAIL" and "SIGINT" in pred["interrupted"]
    assert "the run was interrupted" in (bundle / "statement.md").read_text(encoding="utf-8")
    proc2 = verify(bundle)
    assert proc2.returncode == 0 and proc2.stdout.rstrip().endswith("verdict FAIL"), proc2.stdout
    b = copy(bundle, tmp_path, "edited")  # dropping the interruption is found
    run_json = json.loads((b / "run.json").read_text(encoding="utf-8"))
    run_json["interrupted"] = None
    (b / "run.json").write_text(json.dumps(run_json), encoding="utf-8")
    assert "NOT VERIFIED: run.json: its SHA-256" in verify(b).stdout


def test_a_bundle_validated_against_the_schemas_needs_them_to_verify(
        shared_dir: Path, tmp_path: Path) -> None:
    schemas = str(shared_dir / "acp-schema")
    code, folder, out = certify(tmp_path, "cert", "--agent", REFERENCE, "--protocol", "1",
                                "--case", "ids-across-turns", "--schema-dir", schemas)
    assert code == 0, out
    assert json.loads((folder / "run.json").read_text(encoding="utf-8"))["schema_dir"] is True
    assert_refused(verify(folder), "--schema-dir")
    proc = verify(folder, "--schema-dir", schemas)
    assert proc.returncode == 0, proc.stdout + proc.stderr
