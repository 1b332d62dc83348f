"""``replay``: saved regression files against a target, FIXED or STILL FAILING per file."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.cli.options import (
    EXIT_FAIL,
    EXIT_OK,
    Parser,
    build_masker,
    check_run_options,
    client_choice,
    masking_options,
    model_group,
    out_option,
    target_group,
    use_out,
)
from conformance.cli.run import model_server
from conformance.usage import UsageError


def build_replay_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="acp-conformance replay",
        description="Replay regression files against a target: FIXED or STILL FAILING per "
                    "file. Without a target option each file replays against the target it "
                    "was found on (its header's 'target').",
        epilog="exit codes: 0 every file fixed, 1 at least one still failing, 2 usage or "
               "input error, 3 internal error")
    p.add_argument("files", nargs="+", type=Path, help="regression files (.jsonl) or folders")
    target_group(p, required_hint="optional: the target to replay against")
    model_group(p, fuzz=False)
    p.add_argument("--attempts", type=int, default=1, metavar="N",
                   help="replay a file up to N times; one failing replay is STILL FAILING "
                        "(for failures that depend on timing)")
    g = p.add_argument_group("grading (default: as recorded in each file)")
    g.add_argument("--profile", default=None, help="v2 rule profile")
    g.add_argument("--strict", action="store_true", help="turn every warn into a fail")
    g.add_argument("--schema-dir", type=Path,
                   help="also validate every frame against the official ACP JSON Schemas in "
                        "DIR (needed to replay a SCHEMA/official regression)")
    g.add_argument("--no-color", action="store_true", help="plain console output")
    p.add_argument("--emit-case", type=Path, default=None, metavar="FILE.yaml",
                   help="also write the regressions as one case file (run it with "
                        "--cases DIR)")
    masking_options(p.add_argument_group("masking (secrets kept out of every line written)"))
    out_option(p.add_argument_group("output"))
    return p


def main(argv: Sequence[str]) -> int:
    from conformance import profiles
    from conformance.checks import Options
    from conformance.fuzz import regressions

    ns = build_replay_parser().parse_args(list(argv))
    check_run_options(ns)
    use_out(ns, hypothesis=True)
    if ns.attempts < 1:
        raise UsageError("--attempts must be at least 1")
    if ns.schema_dir is not None and not ns.schema_dir.is_dir():
        raise UsageError(f"--schema-dir {ns.schema_dir}: no such directory")
    if ns.agent and (ns.client or ns.client_adapter):
        raise UsageError("give --agent or --client, not both")
    paths = regressions.files(ns.files)
    if not paths:
        raise UsageError("no regression files found")
    regs = [regressions.read(p) for p in paths]
    masker = build_masker(ns)
    if ns.emit_case is not None:
        _emit_cases(ns.emit_case, regs)
    graded = []  # each file with its profile, all known before any file is replayed
    for reg in regs:
        try:
            graded.append((reg, profiles.get(ns.profile or reg.header.get("profile")
                                             or profiles.DEFAULT_PROFILE)))
        except KeyError as exc:
            where = "--profile" if ns.profile else f"{reg.path}:1"
            raise UsageError(f"{where}: {exc.args[0]}") from None
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="acp-replay-") as cwd:
        for reg, profile in graded:
            options = Options(profile=profile)
            strict = ns.strict or bool(reg.header.get("strict"))
            verdict = _replay_one(ns, reg, options, strict, cwd, masker)
            verdicts.append(verdict)
            _print_verdict(verdict, colour=sys.stdout.isatty() and not ns.no_color,
                           masker=masker)
    still = sum(v.status == regressions.STILL_FAILING for v in verdicts)
    fixed = sum(v.status == regressions.FIXED for v in verdicts)
    skipped = len(verdicts) - still - fixed
    print(f"\n{len(verdicts)} regression(s): {still} still failing, {fixed} fixed"
          + (f", {skipped} not replayed" if skipped else ""))
    return EXIT_FAIL if still else EXIT_OK


def _replay_one(ns: argparse.Namespace, reg: Any, options: Any, strict: bool, cwd: str,
                masker: Any) -> Any:
    from conformance.fuzz import regressions
    from conformance.fuzz.player import AgentTarget
    from conformance.transport import split_command

    if reg.role == "agent":
        if ns.client or ns.client_adapter:
            return regressions.Verdict(reg, regressions.NOT_REPLAYED,
                                       note="an agent regression needs --agent")
        command = ns.agent or reg.target
        if not command:
            raise UsageError(f"{reg.path}: no --agent given and no target recorded")
        # A file with a model script gets the same model answers from a scripted model
        # server of its own ({model_url} filled in the command, env and configs).
        ns.model_server = reg.model is not None
        model, filled, env = model_server(ns, command, [], masker)
        target = AgentTarget(split_command(filled), command, env, ns.timeout, masker)
        try:
            return regressions.replay_agent(reg, target, options=options, strict=strict,
                                            attempts=ns.attempts, cwd=cwd,
                                            schema_dir=ns.schema_dir, model=model)
        finally:
            if model is not None:
                model.stop()
    if ns.agent:
        return regressions.Verdict(reg, regressions.NOT_REPLAYED,
                                   note="a client regression needs --client or --client-adapter")
    from conformance.fuzz.client_fuzz import replay_client

    return replay_client(reg, client_choice(ns, masker), options=options, strict=strict, attempts=ns.attempts,
                         schema_dir=ns.schema_dir)


def _print_verdict(v: Any, *, colour: bool, masker: Any) -> None:
    from conformance.fuzz import regressions

    code = {regressions.FIXED: "32", regressions.STILL_FAILING: "31"}.get(v.status, "33")
    label = f"{v.status:<14}"
    if colour:
        label = f"\x1b[{code}m{label}\x1b[0m"
    reg = v.regression
    line = f"{label} {reg.path}  {reg.requirement} (v{reg.protocol})"
    if v.findings:
        first = v.findings[0]
        where = f" [#{','.join(map(str, first.entries[:4]))}]" if first.entries else ""
        line += f": {first.message}{where}"
    if v.note:
        line += f" ({v.note})"
    print(masker.text(line))
    if v.others:
        print(f"{'':15}other rules broken in this replay: "
              f"{', '.join(sorted({f.requirement for f in v.others}))}")


def _emit_cases(path: Path, regs: Sequence[Any]) -> None:
    from conformance.fuzz import emit

    try:
        written = emit.write(path, [emit.of_regression(r) for r in regs])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"case file: {written[0]} ({len(regs)} case(s))")
