"""The submission bundle: what ``--certify DIR`` writes, and the statement it carries.

Layout (docs/certify.md)::

    DIR/manifest.intoto.json   in-toto Statement v1: subjects = every other file (sha256),
                               predicate = the verdict (PREDICATE_TYPE)
    DIR/statement.md           the certification statement, with what the run could not measure
    DIR/statement.json         the same, as data
    DIR/report.json            the JSON report (transcript paths relative to DIR)
    DIR/run.json               tool, catalogue revision, profile, the target as it described
                               itself, the command line (masked), the environment's shape
    DIR/badge.svg              the verdict as a self-contained SVG
    DIR/transcripts/*.jsonl    every transcript of the run (both sides of a proxy case)
    DIR.tar.gz                 the folder, as one reproducible archive

Everything in it is derived from the run's :class:`RunResult` and its transcripts, masked
as the run's reports are; :mod:`conformance.certify.verify` derives the statement, the
rows and the predicate again from the transcripts and compares.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conformance.results import Reason, RunResult

MANIFEST = "manifest.intoto.json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
#: Ours (a name, not an address to fetch): the predicate's fields are documented in
#: docs/certify.md ("The predicate"); a new major version of them gets a new name.
PREDICATE_TYPE = "urn:acp-conformance:certification:v1"
BUNDLE_FORMAT = "acp-conformance-bundle"
TRANSCRIPTS = "transcripts"
FILES = ("statement.md", "statement.json", "report.json", "run.json", "badge.svg")


class BundleError(Exception):
    """Bad input (an unreadable, foreign or unsafe bundle, a folder we may not write):
    one line, exit 2."""


# -- the verdict and its scope -------------------------------------------------------


def bundle_verdict(result: RunResult, interrupted: str = "") -> str:
    """The verdict as the statement words it: FAIL, PASS or "PASS, partial: ..."; an
    interrupted run is never a pass."""
    from conformance.report.catalogue import statement

    return "FAIL" if interrupted else statement(result).verdict


def profile_limits(result: RunResult) -> list[str]:
    """The requirements of the tested side that the run's profile does not grade (another
    profile does): a limit of the profile, not of the target."""
    from conformance.checks import all_rules

    roles = set(result.role.split("/"))
    here: set[str] = set()
    elsewhere: set[str] = set()
    for r in all_rules().values():
        if r.role not in roles or not set(result.protocols) & set(r.versions):
            continue
        (here if r.record.applies_under(result.profile) else elsewhere).add(r.id.split("/", 1)[0])
    return sorted(elsewhere - here)


def not_run_groups(result: RunResult) -> list[str]:
    """Cases that were not graded, one line per (version, why): "22 v2 cases not run: why"."""
    groups: dict[tuple[int, str], int] = {}
    for c in result.cases:
        if c.reason in (Reason.NOT_RUN, Reason.VERSION_UNSUPPORTED):
            why = c.note or c.reason.value.replace("_", " ")
            groups[(c.protocol, why)] = groups.get((c.protocol, why), 0) + 1
    return [f"{n} v{p} case{'s' if n != 1 else ''} not run: {why}"
            for (p, why), n in sorted(groups.items())]


def scope(result: RunResult, interrupted: str = "") -> dict[str, Any]:
    """What the run measured and what it could not: per version the MUST counts, the MUSTs
    not exercised and those the target does not advertise; the profile's limits; cases not
    run; an interruption, a cut. ``lines`` says it in words (the statement's section)."""
    from conformance.report.coverage import coverage, partial

    cov = {f"v{p}": c for p, c in coverage(result).items()}
    limits = profile_limits(result)
    lines: list[str] = []
    if interrupted:
        lines.append(f"interrupted: {interrupted}; the cases not graded before it are missing")
    if result.cut:
        lines.append(f"run cut: {result.cut}")
    lines += [f"not tested: {why}" for _, why in sorted(result.unfinished.items())]
    gap = partial(result)
    if gap:
        lines.append(gap)
    for v, c in cov.items():
        if c.get("not_exercised"):
            lines.append(f"{v}: MUST requirements not exercised: {', '.join(c['not_exercised'])}")
        if c.get("not_advertised"):
            lines.append(f"{v}: not advertised by the target (left out of the count): "
                         f"{', '.join(c['not_advertised'])}")
    if limits:
        lines.append(f"profile {result.profile} does not grade (another profile does): "
                     f"{', '.join(limits)}")
    lines += not_run_groups(result)
    return {"partial": gap, "coverage": cov, "profile_limits": limits,
            "interrupted": interrupted or None, "lines": lines}


def statement_data(result: RunResult, interrupted: str = "") -> dict[str, Any]:
    """The statement as data (``statement.json``): what ``statement.md`` says."""
    from conformance.report.catalogue import statement
    from conformance.report.coverage import counted, say

    st = statement(result)

    def rows(verdicts: Sequence[Any]) -> list[dict[str, Any]]:
        return [{"id": v.meta.id, "level": v.meta.level, "result": v.shown,
                 "counts": {o.value: n for o, n in sorted(v.counts.items(),
                                                          key=lambda kv: kv[0].value)}}
                for v in verdicts]

    return {
        "format": "acp-conformance-statement", "version": 1,
        "verdict": bundle_verdict(result, interrupted),
        "target": {"name": st.target_name, "version": st.target_version,
                   "command": st.target, "role": st.role},
        "protocols": st.protocols, "profile": st.profile, "strict": st.strict,
        "tool": st.tool, "date": st.date, "graded_against": st.graded_against,
        "must": {"result": say(not st.must_passed, st.partial), "summary": st.summary(st.must),
                 "requirements": rows(st.must)},
        "should": {"summary": st.summary(st.should), "requirements": rows(st.should)},
        "counts": counted(result), "cases": len(result.cases),
        "scope": scope(result, interrupted),
        "notes": st.notes,
    }


def statement_markdown(result: RunResult, interrupted: str = "") -> str:
    """``statement.md``: the certification statement and what the run could not measure."""
    from conformance.report.catalogue import statement
    from conformance.report.markdown import certification_statement, md

    st = statement(result)
    name = " ".join(x for x in (st.target_name, st.target_version) if x) or st.target
    lines = [f"# acp-conformance certification: {md(st.role)} {md(name, 100)}", ""]
    if interrupted:
        lines += [f"**FAIL: the run was interrupted** ({md(interrupted)}): the statement below "
                  "covers only the cases graded before it, and is not a pass.", ""]
    lines += [certification_statement(st), "", "### What this run could not measure", ""]
    said = scope(result, interrupted)["lines"]
    lines += [f"- {md(line, 2000)}" for line in said] or [
        "- nothing: every MUST requirement of the side tested was exercised"]
    lines += ["", "This statement is part of a submission bundle: `acp-conformance verify` "
              "re-grades its transcripts and confirms every line of it."]
    return "\n".join(lines) + "\n"


def predicate(result: RunResult, interrupted: str = "") -> dict[str, Any]:
    """The in-toto predicate: the verdict and what it rests on (docs/certify.md)."""
    from conformance import TOOL_NAME
    from conformance.report.catalogue import graded_against, statement
    from conformance.report.coverage import counted

    st = statement(result)
    sc = scope(result, interrupted)
    return {
        "verdict": bundle_verdict(result, interrupted),
        "partial": sc["partial"] or None,
        "interrupted": interrupted or None,
        "tool": {"name": TOOL_NAME, "version": result.tool_version},
        "catalogue": graded_against(result)["catalogue"],
        "role": result.role, "protocols": list(result.protocols), "profile": result.profile,
        "strict": result.strict,
        "target": {"name": st.target_name, "version": st.target_version},
        "date": result.date,
        "must": {"passed": st.must_passed,
                 "results": {v.meta.id: v.shown for v in st.must}},
        "should": {"results": {v.meta.id: v.shown for v in st.should}},
        "counts": counted(result),
        "cases": len(result.cases),
        "coverage": sc["coverage"],
        "profile_limits": sc["profile_limits"],
    }


# -- the run's own description -------------------------------------------------------


def environment_shape() -> dict[str, Any]:
    """The machine as far as a run's result may depend on it: no variable, no path."""
    return {"os": platform.system(), "os_release": platform.release(),
            "machine": platform.machine(), "python": platform.python_version(),
            "python_implementation": platform.python_implementation(),
            "cores": os.cpu_count()}


def run_info(result: RunResult, *, command_line: str, interrupted: str = "",
             schema_dir: bool = False, transcripts: Sequence[str] = ()) -> dict[str, Any]:
    from conformance import TOOL_NAME
    from conformance.report.catalogue import graded_against

    against = graded_against(result)
    return {
        "format": BUNDLE_FORMAT, "version": 1,
        "tool": {"name": TOOL_NAME, "version": result.tool_version},
        "catalogue": {"revision": against["catalogue"], "profile": result.profile,
                      "spec_source": against["spec_source"],
                      "schema_versions": against["schema_versions"]},
        "role": result.role, "protocols": list(result.protocols), "strict": result.strict,
        "target": {"command": result.target, "described": result.target_info},
        "command_line": command_line,
        "environment": environment_shape(),
        "date": result.date,
        "interrupted": interrupted or None,
        "schema_dir": schema_dir,  # validated against the official schemas: verify needs them
        # a --repeat run keeps every repetition: one transcript per case and repetition
        "repetitions": 1,
        "transcripts": list(transcripts),
    }


# -- writing -------------------------------------------------------------------------


def transcript_files(result: RunResult, saved: Mapping[str, str | None]) -> list[Path]:
    """Every transcript file of the run: each case's, and the agent side a proxy case's
    header names beside it. (A --repeat run: every repetition's file belongs here too.)"""
    from conformance import transcript as tmod

    files: list[Path] = []
    for c in result.cases:
        path = saved.get(c.case)
        if not path or not Path(path).is_file():
            continue
        files.append(Path(path))
        try:
            other = tmod.read_header(Path(path)).get("agent_side")
        except Exception:  # noqa: BLE001 - an unreadable header: verify names it later
            other = None
        if other and (Path(path).parent / str(other)).is_file():
            files.append(Path(path).parent / str(other))
    unique: dict[str, Path] = {}
    for f in files:
        unique.setdefault(f.name, f)
    return list(unique.values())


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest(folder: Path, pred: dict[str, Any]) -> dict[str, Any]:
    """The in-toto Statement v1 over every file of ``folder`` but itself."""
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and p.name != MANIFEST)
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": n, "digest": {"sha256": sha256_file(folder / n)}}
                        for n in names],
            "predicateType": PREDICATE_TYPE, "predicate": pred}


def dump(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=True, sort_keys=False, default=str) + "\n"


def bundle_report(result: RunResult, names: Mapping[str, Any],
                  saved: Mapping[str, str | None]) -> RunResult:
    """The result as the bundle's report.json says it: transcripts named inside the bundle
    (also those of a run whose own reports name none: --no-transcripts)."""
    out = copy.deepcopy(result)
    for c in out.cases:
        path = saved.get(c.case) or c.transcript_path
        base = Path(path).name if path else None
        c.transcript_path = f"{TRANSCRIPTS}/{base}" if base in names else None
        c.findings = [dataclasses.replace(f, transcript=c.transcript_path) if f.transcript
                      else f for f in c.findings]
    return out


def check_folder(folder: Path) -> None:
    """Before a run: ``--certify DIR`` must be new, empty or an earlier bundle."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise BundleError(f"--certify {folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / MANIFEST).is_file():
        raise BundleError(f"--certify {folder}: the folder is not empty and holds no bundle "
                          "(give a new folder)")
    parent = folder.resolve().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BundleError(f"--certify {folder}: cannot write into {parent}")


def write_bundle(folder: Path, result: RunResult, saved: Mapping[str, str | None], *,
                 command_line: str, interrupted: str = "", schema_dir: bool = False,
                 badge: Path | None = None) -> tuple[Path, Path]:
    """Write the bundle of a graded (and masked) run: the folder and ``folder.tar.gz``.
    ``saved``: each case's transcript file (the run's, before any scratch folder goes)."""
    from conformance.certify.badge import badge_svg
    from conformance.report.jsonreport import dumps as report_dumps

    folder = Path(folder)
    check_folder(folder)
    files = transcript_files(result, saved)
    names = {f.name: f for f in files}
    folder.resolve().parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=str(folder.resolve().parent)))
    try:
        umask = os.umask(0o22)
        os.umask(umask)
        os.chmod(build, 0o777 & ~umask)  # a folder like any other, not mkdtemp's 0700
        (build / TRANSCRIPTS).mkdir()
        for name, src in sorted(names.items()):
            shutil.copyfile(src, build / TRANSCRIPTS / name)
        reported = bundle_report(result, names, saved)
        texts = {
            "report.json": report_dumps(reported),
            "statement.md": statement_markdown(reported, interrupted),
            "statement.json": dump(statement_data(reported, interrupted)),
            "run.json": dump(run_info(reported, command_line=command_line,
                                      interrupted=interrupted, schema_dir=schema_dir,
                                      transcripts=[f"{TRANSCRIPTS}/{n}" for n in sorted(names)])),
            "badge.svg": badge_svg(reported, bundle_verdict(reported, interrupted)),
        }
        for name, text in texts.items():
            (build / name).write_text(text, encoding="utf-8")
        (build / MANIFEST).write_text(dump(manifest(build, predicate(reported, interrupted))),
                                      encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(build, folder)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    tarball = folder.with_name(folder.name + ".tar.gz")
    write_tarball(folder, tarball)
    if badge is not None:
        Path(badge).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "badge.svg", badge)
    return folder, tarball


def write_tarball(folder: Path, tarball: Path) -> None:
    """``folder`` as a reproducible ``.tar.gz`` (sorted, no owner, no time): one top folder."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        top = tarfile.TarInfo(folder.name)
        top.type, top.mode, top.mtime = tarfile.DIRTYPE, 0o755, 0
        tar.addfile(top)
        for path in sorted(p for p in folder.rglob("*")):
            info = tarfile.TarInfo(f"{folder.name}/{path.relative_to(folder).as_posix()}")
            info.mtime = 0
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            data = path.read_bytes()
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp = tarball.with_name(f".{tarball.name}.tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                               mtime=0) as gz:
        gz.write(buf.getvalue())
    os.replace(tmp, tarball)


__all__ = ["BUNDLE_FORMAT", "FILES", "MANIFEST", "PREDICATE_TYPE", "STATEMENT_TYPE",
           "BundleError", "bundle_verdict", "predicate", "statement_data",
           "statement_markdown", "write_bundle"]
