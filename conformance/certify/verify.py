"""``verify``: a bundle's verdict follows from its transcripts, and nothing in it was edited.

1. every file's SHA-256 is the manifest's, and every file is in the manifest;
2. every transcript is graded again offline (``grading.grade_recorded``, as ``check``
   does) under the catalogue revision the bundle names, which must be the installed one
   (else an input error naming both, or ``regrade``: grade under the installed one and
   say what differs);
3. every (case, rule, outcome) row of ``report.json``, its cases, summary and coverage,
   ``statement.md``, ``statement.json``, the badge and the manifest's predicate are
   derived again from those grades and compared. A difference is a problem naming the
   file and the row; a statement that claims more than the transcripts show is refused.

Metadata no transcript records (the date, the command line, the environment) is held by
the digests alone: a signature over the manifest (docs/certify.md) is what ties it, and
the transcripts, to the run that made them.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.certify.bundle import (
    MANIFEST,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    TRANSCRIPTS,
    BundleError,
    bundle_verdict,
    predicate,
    sha256_file,
    statement_data,
    statement_markdown,
)
from conformance.results import RunResult

REQUIRED = ("report.json", "run.json", "statement.md", "statement.json")
MAX_SHOWN = 20  # rows named per file; the count says how many more


@dataclass
class VerifyResult:
    bundle: str
    verdict: str = ""  # the verdict the transcripts give
    catalogue: str = ""
    problems: list[str] = field(default_factory=list)  # each: "FILE: what differs"
    differences: list[str] = field(default_factory=list)  # --regrade: under the installed one
    transcripts: int = 0
    rows: int = 0
    target: str = ""  # "agent Acme Agent 2.1.0": the side tested and the target's name

    @property
    def ok(self) -> bool:
        return not self.problems


def _json(path: Path, name: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _Unreadable(f"{name}: not readable JSON ({type(exc).__name__})") from None


class _Unreadable(Exception):
    """A bundle file that is there but cannot be read: a problem (it was edited)."""


def verify_bundle(path: Path, *, regrade: bool = False,
                  schema_dir: Path | None = None) -> VerifyResult:
    from conformance.certify.safety import bundle_root, check_tree, extract

    path = Path(path)
    if path.is_dir():
        check_tree(path)
        return _verify(bundle_root(path, MANIFEST), str(path), regrade, schema_dir)
    if not path.is_file():
        raise BundleError(f"{path}: no such bundle (a folder or a .tar.gz)")
    with tempfile.TemporaryDirectory(prefix="acp-verify-") as tmp:
        extract(path, Path(tmp))
        return _verify(bundle_root(Path(tmp), MANIFEST), str(path), regrade, schema_dir)


def _manifest(root: Path) -> dict[str, Any]:
    try:
        data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{MANIFEST}: not readable JSON ({type(exc).__name__}): not a "
                          "bundle this suite wrote, or a damaged one") from None
    if not isinstance(data, dict) or data.get("_type") != STATEMENT_TYPE \
            or data.get("predicateType") != PREDICATE_TYPE \
            or not isinstance(data.get("subject"), list) \
            or not isinstance(data.get("predicate"), dict):
        raise BundleError(f"{MANIFEST}: not an acp-conformance bundle manifest (an in-toto "
                          f"Statement v1 with predicateType {PREDICATE_TYPE})")
    return data


def _digests(root: Path, man: dict[str, Any], out: VerifyResult) -> None:
    from conformance.certify.safety import member_path

    named: dict[str, str] = {}
    for s in man["subject"]:
        name = s.get("name") if isinstance(s, dict) else None
        digest = (s.get("digest") or {}).get("sha256") if isinstance(s, dict) else None
        if not isinstance(name, str) or not isinstance(digest, str):
            raise BundleError(f"{MANIFEST}: a subject without a name and a sha256 digest")
        member_path(name, MANIFEST)
        named[name] = digest
    missing = [n for n in named if not (root / n).is_file()]
    if missing:
        raise BundleError(f"{MANIFEST} names {len(missing)} file(s) the bundle does not hold: "
                          + ", ".join(missing[:5]))
    for need in REQUIRED:
        if need not in named:
            raise BundleError(f"{MANIFEST}: no {need} among its subjects: not a complete "
                              "bundle")
    for name, digest in sorted(named.items()):
        actual = sha256_file(root / name)
        if actual != digest.lower():
            out.problems.append(f"{name}: its SHA-256 is {actual[:16]}..., the manifest says "
                                f"{digest[:16]}... (the file or the manifest was edited)")
    present = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                     if p.is_file() and p.name != MANIFEST)
    for extra in present:
        if extra not in named:
            out.problems.append(f"{extra}: in the bundle but not in the manifest")


def _verify(root: Path, shown: str, regrade: bool, schema_dir: Path | None) -> VerifyResult:
    from conformance.report.jsonreport import ReportFormatError, from_json
    from conformance.requirements import catalogue_revision

    out = VerifyResult(shown)
    man = _manifest(root)
    _digests(root, man, out)
    try:
        run = _json(root / "run.json", "run.json")
        report_data = _json(root / "report.json", "report.json")
    except _Unreadable as exc:
        out.problems.append(str(exc))
        return out
    if not isinstance(run, dict) or not isinstance(run.get("catalogue"), dict):
        out.problems.append("run.json: not the run description of a bundle")
        return out
    try:
        report = from_json(report_data, "report.json")
    except ReportFormatError as exc:
        out.problems.append(str(exc))
        return out
    named = str(run["catalogue"].get("revision"))
    installed = catalogue_revision()
    out.catalogue = named
    if named != installed and not regrade:
        raise BundleError(f"the bundle was graded under catalogue {named}; this suite holds "
                          f"catalogue {installed} (verify it with the suite version it names, "
                          f"{(run.get('tool') or {}).get('version')}, or give --regrade)")
    if report.catalogue and report.catalogue != named:
        out.problems.append(f"report.json: graded against catalogue {report.catalogue}, "
                            f"run.json says {named}")
    if run.get("schema_dir") and schema_dir is None:
        raise BundleError("the run validated frames against the official schemas: give "
                          "--schema-dir DIR to grade them again")
    interrupted = str(run.get("interrupted") or "")
    info = report.target_info or {}
    out.target = " ".join(str(x) for x in (report.role, info.get("name") or report.target,
                                           info.get("version")) if x)
    regraded = _regrade(root, report, out, schema_dir)
    if regraded is None:
        return out
    # a signal is a fact of the run, not of any transcript: the report and run.json must
    # agree on it, and the rebuilt run carries it (an interrupted run is never a pass)
    if bool(interrupted) != bool(report.interrupted):
        out.problems.append(f"report.json: interrupted {report.interrupted or 'not at all'}; "
                            f"run.json says {interrupted or 'not interrupted'}")
    regraded.interrupted = report.interrupted
    target = out.differences if regrade and named != installed else out.problems
    _compare_rows(report, regraded, target)
    if regrade and named != installed:
        regraded.catalogue = ""  # the installed register's revision names the new grades
        out.verdict = bundle_verdict(regraded, interrupted)
        old = str((man["predicate"] or {}).get("verdict"))
        if old != out.verdict:
            out.differences.append(f"verdict: {old} under {named}, {out.verdict} under "
                                   f"{installed}")
        return out
    out.verdict = bundle_verdict(regraded, interrupted)
    _compare_report(report_data, regraded, out.problems)
    _compare_statement(root, regraded, interrupted, out.problems)
    _compare_data("manifest predicate", man["predicate"], _plain(predicate(regraded, interrupted)),
                  out.problems)
    return out


def _plain(data: Any) -> Any:
    """As it reads back from JSON (tuples are lists, keys are strings)."""
    return json.loads(json.dumps(data, default=str))


def _regrade(root: Path, report: RunResult, out: VerifyResult,
             schema_dir: Path | None) -> RunResult | None:
    """Every transcript of the bundle graded again, as ``check`` grades it; the result has
    the report's run metadata (target, date, ...) and the cases in the report's order."""
    from conformance import transcript as tmod
    from conformance.grading import (
        RecordedError,
        case_protocol,
        conclude,
        grade_file,
        recorded_case,
    )

    files = sorted((root / TRANSCRIPTS).glob("*.jsonl")) if (root / TRANSCRIPTS).is_dir() else []
    headers: dict[Path, dict[str, Any]] = {}
    for f in files:
        try:
            headers[f] = tmod.read_header(f)
        except Exception as exc:  # noqa: BLE001 - an edited transcript: named, not a traceback
            out.problems.append(f"{TRANSCRIPTS}/{f.name}: cannot be read: {_short(exc)}")
    _check_scopes(headers, report, out.problems)
    cases = []
    for f, header in headers.items():
        if header.get("side") == "agent":
            continue  # graded with its client side
        protocol = case_protocol(header)
        try:
            findings = grade_file(f, header, schema_dir=schema_dir).findings
        except RecordedError as exc:  # a proxy case whose agent side is not in the bundle
            out.problems.append(f"{TRANSCRIPTS}/{f.name}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - see above
            out.problems.append(f"{TRANSCRIPTS}/{f.name}: cannot be graded: {_short(exc)}")
            continue
        out.transcripts += 1
        cases.append(recorded_case(header, findings, name=str(header.get("case") or f.stem),
                                   description="", protocol=protocol,
                                   path=f"{TRANSCRIPTS}/{f.name}"))
    order = {c.case: i for i, c in enumerate(report.cases)}
    cases.sort(key=lambda c: (order.get(c.case, len(order)), c.case))
    result = RunResult(report.tool_version, report.target, report.role, report.protocols,
                       report.profile, report.strict, target_info=report.target_info,
                       date=report.date, catalogue=report.catalogue)
    result.cases = cases
    conclude(result)
    if report.cut and result.cut:  # its wording names the --deadline, which no header holds
        result.cut = report.cut
    for p, why in report.unfinished.items():
        if p in result.unfinished:
            result.unfinished[p] = why
    by_name = {c.case: c for c in report.cases}
    for c in cases:
        if c.case in by_name:
            c.description = by_name[c.case].description
    out.rows = sum(len(c.findings) for c in cases)
    return result


def _check_scopes(headers: dict[Path, dict[str, Any]], report: RunResult,
                  problems: list[str]) -> None:
    """What each transcript says it grades is what the run graded: its role, profile and
    strictness the report's, the same options in every case, every rule of the role (a
    run never narrows a case; a proxy case grades its case's proxy rules), and no rule
    excluded that the installed case file does not exclude. Else a transcript's header
    could be edited to grade a fault away."""
    from conformance.grading import two_sided

    known = _installed_cases()
    options: dict[tuple[Any, ...], list[str]] = {}
    for f, header in headers.items():
        if header.get("side") == "agent":
            continue
        name = f"{TRANSCRIPTS}/{f.name}"
        scope = header.get("scope")
        if not isinstance(scope, dict):
            problems.append(f"{name}: records no grading scope; a run's transcript does")
            continue
        said = (scope.get("role"), scope.get("profile") or report.profile, scope.get("strict"))
        if said != (report.role, report.profile, report.strict):
            problems.append(f"{name}: graded as {said[0]}, profile {said[1]}, strict "
                            f"{said[2]}; the run was {report.role}, profile {report.profile}, "
                            f"strict {report.strict}")
        key = (scope.get("strict_ids"), scope.get("cross_turn_reuse"))
        options.setdefault(key, []).append(name)
        if not two_sided(header) and scope.get("rules") != "all":
            problems.append(f"{name}: grades only {scope.get('rules')}; a run's case grades "
                            "every rule of its role")
        case = known.get(str(header.get("case") or "").split("@", 1)[0])
        excluded = scope.get("exclude")
        exclude: dict[str, Any] = excluded if isinstance(excluded, dict) else {}
        if case is not None and exclude != dict(case.exclude):
            problems.append(f"{name}: excludes {sorted(exclude) or 'nothing'}; case "
                            f"{case.id} excludes {sorted(dict(case.exclude)) or 'nothing'}")
    if len(options) > 1:
        odd = min(options.values(), key=len)
        problems.append(f"{odd[0]}: graded with other options (--strict-ids, "
                        "--cross-turn-reuse) than the run's other transcripts")


def _installed_cases() -> dict[str, Any]:
    """The installed suite's cases by ID ({} when they cannot be read: then no case's
    exclusions are compared, as for a run of a --cases folder of its own)."""
    try:
        from conformance import cases as casemod

        return {c.id: c for c in casemod.load_dir()}
    except Exception:  # noqa: BLE001 - a comparison we cannot make is not a finding
        return {}


def _short(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _row_keys(result: RunResult) -> Counter[tuple[Any, ...]]:
    return Counter((f.case, f.requirement, f.outcome.value, f.reason.value if f.reason else "",
                    f.occurrences, f.faults, f.message)
                   for c in result.cases for f in c.findings)


def _compare_rows(report: RunResult, regraded: RunResult, problems: list[str]) -> None:
    """report.json's (case, rule, outcome) rows and its cases, against the transcripts'."""
    said = {c.case: c for c in report.cases}
    shown = {c.case: c for c in regraded.cases}
    for name in sorted(set(said) - set(shown)):
        problems.append(f"report.json: case {name} has no transcript in the bundle")
    for name in sorted(set(shown) - set(said)):
        problems.append(f"report.json: case {name} is missing (its transcript is in the bundle)")
    for name in sorted(set(said) & set(shown)):
        a, b = said[name], shown[name]
        if (a.outcome, a.reason, a.note) != (b.outcome, b.reason, b.note):
            problems.append(f"report.json: case {name}: the report says {a.outcome.value}"
                            f"{_why(a)}, its transcript gives {b.outcome.value}{_why(b)}")
    left, right = _row_keys(report), _row_keys(regraded)
    extra, lost = left - right, right - left
    diffs: list[str] = []
    pairs = {(k[0], k[1]) for k in [*extra, *lost]}
    for case, rule in sorted(pairs):
        if case not in said or case not in shown:
            continue
        claimed = sorted({k[2] for k in extra if k[:2] == (case, rule)})
        graded = sorted({k[2] for k in lost if k[:2] == (case, rule)})
        if claimed == graded:
            diffs.append(f"report.json: row ({case}, {rule}, {'/'.join(claimed)}): its message "
                         "or counts differ from what the transcript gives")
        else:
            diffs.append(f"report.json: row ({case}, {rule}): the report says "
                         f"{'/'.join(claimed) or 'nothing'}, the transcript gives "
                         f"{'/'.join(graded) or 'nothing'}")
    problems += diffs[:MAX_SHOWN]
    if len(diffs) > MAX_SHOWN:
        problems.append(f"report.json: {len(diffs) - MAX_SHOWN} more rows differ")


def _why(c: Any) -> str:
    return f" ({c.reason.value})" if c.reason else ""


def _compare_report(data: dict[str, Any], regraded: RunResult, problems: list[str]) -> None:
    """The report's summary, coverage and catalogue, as the transcripts give them."""
    from conformance.report.jsonreport import to_json

    want = _plain(to_json(regraded))
    for key in ("summary", "coverage", "graded_against", "protocols", "role", "profile",
                "strict", "cut", "unfinished"):
        _compare_data(f"report.json: {key}", data.get(key), want.get(key), problems)


def _compare_statement(root: Path, regraded: RunResult, interrupted: str,
                       problems: list[str]) -> None:
    from conformance.certify.badge import badge_svg

    want = statement_markdown(regraded, interrupted)
    have = (root / "statement.md").read_text(encoding="utf-8", errors="replace")
    if have != want:
        problems.append(_first_difference("statement.md", have, want, regraded, interrupted))
    try:
        data = _json(root / "statement.json", "statement.json")
    except _Unreadable as exc:
        problems.append(str(exc))
    else:
        if isinstance(data, dict) and data.get("verdict") != bundle_verdict(regraded, interrupted):
            problems.append(f"statement.json: claims {data.get('verdict')!r}; the transcripts "
                            f"show {bundle_verdict(regraded, interrupted)!r}")
        else:
            _compare_data("statement.json", data,
                          _plain(statement_data(regraded, interrupted)), problems)
    badge = root / "badge.svg"
    if badge.is_file() and badge.read_text(encoding="utf-8", errors="replace") \
            != badge_svg(regraded, bundle_verdict(regraded, interrupted)):
        problems.append("badge.svg: differs from the badge of the verdict the transcripts give")


def _first_difference(name: str, have: str, want: str, regraded: RunResult,
                      interrupted: str) -> str:
    verdict = bundle_verdict(regraded, interrupted)
    a, b = have.splitlines(), want.splitlines()
    for i, (x, y) in enumerate(zip(a, b, strict=False), 1):
        if x != y:
            if "| Verdict |" in x:
                return (f"{name}: line {i} claims {x.strip()!r}, more than its transcripts "
                        f"show ({verdict})" if _claims_more(x, verdict) else
                        f"{name}: line {i} says {x.strip()!r}; the transcripts give {verdict}")
            return (f"{name}: line {i} says {x.strip()[:160]!r}; the transcripts give "
                    f"{y.strip()[:160]!r}")
    return f"{name}: {len(a)} lines, the transcripts give {len(b)}"


def _claims_more(line: str, verdict: str) -> bool:
    if verdict == "FAIL":
        return "PASS" in line
    return verdict.startswith("PASS, partial") and "partial" not in line and "PASS" in line


def _compare_data(name: str, have: Any, want: Any, problems: list[str]) -> None:
    for path, a, b in _walk(have, want, ""):
        problems.append(f"{name}{' ' + path if path else ''}: says {_brief(a)}, the "
                        f"transcripts give {_brief(b)}")
        return  # the first difference names it; the rest follow from it


def _walk(a: Any, b: Any, path: str) -> Iterable[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*b, *(k for k in a if k not in b)]:
            yield from _walk(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from _walk(x, y, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


def _brief(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
