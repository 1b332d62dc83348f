"""The steps of the GitHub Action (``action.yml`` at the top of the repository).

The action runs this file by its path (``python -I``: the file's own folder, the
working directory and PYTHON* variables stay out of ``sys.path``). The ``install`` step
runs before the package is installed, so the module uses the standard library only at
its top; the ``run`` step's Python has the package (the install step saw to it), and
checks the inputs with the option table's one check
(:func:`conformance.settings.table.check_values`, inputs spelled ``the input agent``):

* ``install``: make a virtualenv under ``$RUNNER_TEMP`` and install acp-conformance
  from the action's own checkout (``$GITHUB_ACTION_PATH``) into it; with the input
  ``install: false``, use the given Python as is (it must import ``conformance``).
  Step output ``python``: the interpreter the run step uses.
* ``run``: run the suite with the action's inputs (``INPUT_*`` environment
  variables: an agent, a client, or a proxy in front of the suite's agent double or of
  the agent), write JSON, JUnit, HTML, Markdown and the transcripts into the output
  folder, let the suite annotate each failing rule (``--github-annotations``), append
  the Markdown summary to ``$GITHUB_STEP_SUMMARY``, and set the step outputs
  ``verdict`` (pass, fail, interrupted or error), ``json``, ``junit``, ``html`` and ``markdown``.
  With the input ``certify: true`` the run also writes its submission bundle
  (``--certify``: the folder :data:`BUNDLE` and its ``.tar.gz`` in the output folder;
  step outputs ``bundle``, the archive, and ``badge``), which the action's next step
  uploads as an artifact. The step exits with the suite's exit status.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

REPORTS = {"json": "acp-conformance.json", "junit": "acp-conformance.xml",
           "html": "acp-conformance.html", "markdown": "acp-conformance.md"}
BUNDLE = "acp-conformance-certification"  # --certify's folder in the output folder
VERDICTS = {0: "pass", 1: "fail"}  # any other exit status: "error"
EXIT_USAGE = 2
SUMMARY_LIMIT = 1024 * 1024  # bytes GitHub accepts in one step summary


class ActionError(Exception):
    """An input the action cannot use: an error annotation, exit 2."""


def _input(env: Mapping[str, str], name: str, default: str = "") -> str:
    return env.get("INPUT_" + name.upper().replace("-", "_"), default).strip() or default


def _flag(env: Mapping[str, str], name: str, default: str = "false") -> bool:
    value = _input(env, name, default).lower()
    if value not in ("true", "false"):
        raise ActionError(f"input {name}: expected true or false, got {value!r}")
    return value == "true"


def set_output(env: Mapping[str, str], name: str, value: str) -> None:
    """Append ``name`` to ``$GITHUB_OUTPUT`` (the delimiter form when the value has lines)."""
    with open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as fh:
        if "\n" in value:
            delimiter = f"ACP_{uuid.uuid4().hex}"
            fh.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
        else:
            fh.write(f"{name}={value}\n")


def install(env: Mapping[str, str]) -> int:
    """Install from the action's checkout into a fresh virtualenv; step output ``python``."""
    if not _flag(env, "install", "true"):
        found = subprocess.run([sys.executable, "-I", "-c", "import conformance"],
                               check=False, capture_output=True)
        if found.returncode != 0:
            raise ActionError(f"input install is false, but {sys.executable} cannot import "
                              "acp-conformance")
        set_output(env, "python", sys.executable)
        return 0
    source = env["GITHUB_ACTION_PATH"]
    venv = Path(env.get("RUNNER_TEMP") or tempfile.gettempdir()) / "acp-conformance-venv"
    python = venv / "bin" / "python"
    steps = [[sys.executable, "-m", "venv", "--clear", str(venv)],
             [str(python), "-m", "pip", "install", "--disable-pip-version-check",
              "--no-input", source]]
    for argv in steps:
        print("$ " + shlex.join(argv), flush=True)
        done = subprocess.run(argv, check=False)
        if done.returncode != 0:
            print(f"::error title=acp-conformance::installing from {source} failed "
                  f"(exit {done.returncode})", flush=True)
            return done.returncode
    set_output(env, "python", str(python))
    return 0


def suite_arguments(env: Mapping[str, str], out: Path) -> list[str]:
    """The acp-conformance command line for the action's inputs (after the program name)."""
    agent, client = _input(env, "agent"), _input(env, "client")
    proxy, adapts = _input(env, "proxy"), _flag(env, "proxy-adapts")
    profile = _input(env, "client-profile")
    try:
        extra = shlex.split(_input(env, "args"))
    except ValueError as exc:
        raise ActionError(f"input args: {exc}") from None
    if "--no-mask" in extra:
        raise ActionError("input args: --no-mask is refused here: the action's reports and "
                          "transcripts are artifacts, and secrets stay out of them")
    _check_inputs({"agent": agent, "client": client, "proxy": proxy, "proxy-adapts": adapts,
                   "client-profile": profile, "client-adapter": "--client-adapter" in extra,
                   "protocol": _input(env, "protocol", "both"),
                   "model-server": _flag(env, "model-server")})
    if not (agent or client or proxy or "--client-adapter" in extra):
        raise ActionError("nothing to test: give the input agent (an agent command), client "
                          "(a client command with {agent}) or proxy (a proxy command with "
                          "{agent})")
    argv = ["--proxy", proxy] if proxy else []  # the agent double behind it, or agent
    argv += ["--agent", agent] if agent else ["--client", client] if client else []
    if adapts:
        argv.append("--proxy-adapts")
    if profile:
        argv += ["--client-profile", profile]
    argv += ["--protocol", _input(env, "protocol", "both")]
    for name in ("profile", "baseline", "jobs", "repeat"):  # forwarded only when given
        if _input(env, name):
            argv += [f"--{name}", _input(env, name)]
    if _flag(env, "model-server"):
        argv.append("--model-server")
    argv += extra
    argv.append("--github-annotations")  # one ::error per failing rule, from the suite
    if _flag(env, "certify"):
        argv += ["--certify", str(out / BUNDLE)]
    for option, name in REPORTS.items():  # last, so they win over the same option in args
        argv += [f"--{option}", str(out / name)]
    return [*argv, "--transcripts", str(out / "transcripts")]


def _check_inputs(values: Mapping[str, object]) -> None:
    """The option table's one check of the inputs that are run options (a value's own, the
    options that do not go together, an option of another role), in the words the command
    line and the pytest plugin use, the options spelled as inputs."""
    from conformance.roles import check_options
    from conformance.usage import UsageError

    try:
        check_options(values, "action")
    except UsageError as exc:
        raise ActionError(str(exc)) from None


_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASS|AUTH|CREDENTIAL|COOKIE|SESSION)S?"
                          r"(?![A-Za-z0-9])|PASSWD|PASSPHRASE|AUTHORIZATION", re.IGNORECASE)


def shown_arguments(argv: list[str]) -> list[str]:
    """The command line as the step log shows it: ``--mask`` values and the values of
    secret-looking ``--agent-env`` / ``--client-env`` entries as ``***`` (the suite masks
    everything else it writes; this file runs before the suite is installed, so it
    follows the same rule on names itself, roughly)."""
    shown = []
    for i, arg in enumerate(argv):
        before = argv[i - 1] if i else ""
        if before == "--mask" or arg.startswith("--mask="):
            arg = "--mask=***" if arg.startswith("--mask=") else "***"
        elif before in ("--agent-env", "--client-env") and "=" in arg:
            name = arg.split("=", 1)[0]
            if _SECRET_NAME.search(name):
                arg = f"{name}=***"
        shown.append(arg)
    return shown


def run(env: Mapping[str, str]) -> int:
    """Run the suite, write the summary and the step outputs; the suite's exit status."""
    out = Path(_input(env, "output-dir", "acp-conformance-reports")).resolve()
    try:
        argv = suite_arguments(env, out)
    except ActionError:
        _finish(env, "error", {}, "the action's inputs cannot be used; the step log says why")
        raise
    out.mkdir(parents=True, exist_ok=True)
    for path in (out / name for name in REPORTS.values()):  # no stale report of an old run
        path.unlink(missing_ok=True)
    (out / f"{BUNDLE}.tar.gz").unlink(missing_ok=True)  # nor a stale bundle
    print("$ acp-conformance " + shlex.join(shown_arguments(argv)), flush=True)
    # -I: a folder named conformance in the working directory is not the suite
    status = _run_suite([sys.executable, "-I", "-m", "conformance", *argv])
    verdict = _verdict(status)
    written = {name: out / file for name, file in REPORTS.items() if (out / file).is_file()}
    _finish(env, verdict, written, f"the suite could not run (exit {status}); the step log "
            "says why")
    if verdict in ("error", "interrupted"):  # a fail is annotated by the suite, one ::error per failing rule
        print(f"::error title=acp-conformance::verdict {verdict} (exit {status}); the step "
              "summary and the reports say why", flush=True)
    return status


def _run_suite(argv: list[str]) -> int:
    """Run the suite; a SIGINT or SIGTERM this step gets (a cancelled job) is passed on to
    it, so it grades what it has, writes its reports and exits 128+N, and the step waits
    for that instead of dying first."""
    import signal

    proc = subprocess.Popen(argv)

    def forward(signum: int, frame: object) -> None:
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = proc.wait()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return 128 - status if status < 0 else status  # killed by signal N: as a shell says it


def _verdict(status: int) -> str:
    """The ``verdict`` output of an exit status: pass, fail, interrupted (128+N: SIGINT
    or SIGTERM, the reports cover what was graded) or error."""
    if status in VERDICTS:
        return VERDICTS[status]
    return "interrupted" if status > 128 else "error"


def _finish(env: Mapping[str, str], verdict: str, written: Mapping[str, Path],
            why: str) -> None:
    """Every step output, once (a report not written is empty); the step summary."""
    for name in REPORTS:
        set_output(env, name, str(written[name]) if name in written else "")
    set_output(env, "verdict", verdict)
    bundle = next(iter(written.values()), Path(".")).parent / f"{BUNDLE}.tar.gz"
    found = bool(written) and bundle.is_file()
    set_output(env, "bundle", str(bundle) if found else "")
    set_output(env, "badge", str(bundle.with_name(BUNDLE) / "badge.svg") if found else "")
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary:
        text = (_capped(written["markdown"]) if "markdown" in written
                else f"### acp-conformance\n\n{why}\n")
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(text)


def _capped(markdown: Path) -> str:
    """The Markdown report, cut at a line to fit GitHub's 1 MiB step summary limit."""
    text = markdown.read_text(encoding="utf-8")
    if len(text.encode("utf-8")) <= SUMMARY_LIMIT:
        return text
    cut = text.encode("utf-8")[:SUMMARY_LIMIT - 200].decode("utf-8", "ignore")
    return cut[:cut.rfind("\n") + 1] + f"\n\n(cut here: the whole summary is {markdown})\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["install"], ["run"]):
        print("usage: github_action.py install|run (the steps of action.yml)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return install(os.environ) if args == ["install"] else run(os.environ)
    except ActionError as exc:
        print(f"::error title=acp-conformance::{exc}", flush=True)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
