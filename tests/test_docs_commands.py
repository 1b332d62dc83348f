"""Every command in the docs runs: each fenced ``sh`` block of README.md and docs/*.md.

A block runs command by command (a line ending in ``\\`` continues on the next) in a
temporary folder that has the repository's ``fixtures/`` beside it, against the bundled
targets: the placeholders a reader replaces with their own target are declared once
below and substituted. A command must exit 0, or 1 where its comment says "exits 1".

Two kinds of line are not run, each declared here: installing the package (the tests
run where it is installed) and the project's own test command (this is one of its
tests). A block that cannot run here (it downloads a real agent from npm) is preceded
by the comment ``<!-- not run by the docs test: why -->``, and the test says so.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, cli_env

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
NOT_RUN_MARK = re.compile(r"<!-- not run by the docs test: (.+?) -->")
REFERENCE_CLIENT = "python3 -m conformance.client.reference --agent-cmd {agent}"
REFERENCE_PROFILE = "fixtures/clients/reference.yaml"

#: The placeholders of the docs and the bundled targets they stand for here, longest first.
PLACEHOLDERS = {
    "my-editor --headless --agent-cmd {agent}": REFERENCE_CLIENT,
    "my-editor --agent-cmd {agent}": REFERENCE_CLIENT,
    "my-cli {agent}": REFERENCE_CLIENT,
    "my-bridge --upstream {agent}": "python3 fixtures/proxies/transparent.py {agent}",
    "my-agent --acp": "python3 -m conformance.reference.agent",
    "mypkg.testing:make_client": "conformance.client.reference:make_client",
    "my-editor.yaml": REFERENCE_PROFILE,
    "p.yaml": REFERENCE_PROFILE,
}
#: Files the docs' commands name as the reader's own, made in the folder they run in.
READER_FILES = {
    "ci/acp-baseline.yaml": "expected_failures: []\n",
    "known.yaml": "expected_failures: []\n",
}
#: Prefixes that make a fresh environment and install the package: done where tests run.
INSTALLED = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install . && ",
    "pip install ",
)
OWN_TESTS = "python -m pytest -n 6 --maxschedchunk 1 -p no:cacheprovider"  # the project's test command


def sh_blocks() -> list[tuple[str, str, str | None]]:
    """(where, block text, why it is not run or None) for every ```sh block."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^```sh\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
            line = text.count("\n", 0, m.start()) + 1
            before = text[:m.start()].rstrip().rsplit("\n", 1)[-1]
            skip = NOT_RUN_MARK.search(before)
            found.append((f"{path.relative_to(REPO_ROOT)}:{line}", m.group(1),
                          skip.group(1) if skip else None))
    return found


def commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined, placeholders substituted."""
    out: list[str] = []
    pending = ""
    for line in block.splitlines():
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if not command or command.startswith("#"):
            continue
        for old, new in PLACEHOLDERS.items():
            command = command.replace(old, new)
        out.append(command)
    return out


def expected_status(command: str) -> int:
    return 1 if "exits 1" in command.split("#", 1)[-1] and "#" in command else 0


BLOCKS = sh_blocks()


def test_the_docs_have_sh_blocks() -> None:
    where = {w.split(":", 1)[0] for w, _, _ in BLOCKS}
    assert "README.md" in where and len(BLOCKS) >= 8


def test_the_readme_starts_with_the_two_fresh_machine_commands() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    first = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert readme.index("```sh") < 30 and len(first) == 2
    run, tests = first
    assert run.startswith(INSTALLED[0]) and run.endswith("acp-conformance demo")
    assert tests.endswith(f"pip install '.[test]' && {OWN_TESTS}")
    assert "virtual environment" in " ".join(readme.split("##", 1)[0].split())
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"\n{OWN_TESTS}\n" in ci and "install --quiet '.[test]'" in ci  # what CI runs


@pytest.mark.slow
@pytest.mark.parametrize("where,block,not_run", BLOCKS, ids=[w for w, _, _ in BLOCKS])
def test_every_sh_block_runs(where: str, block: str, not_run: str | None,
                             tmp_path: Path) -> None:
    if not_run:
        pytest.skip(f"{where}: {not_run}")
    (tmp_path / "fixtures").symlink_to(REPO_ROOT / "fixtures")
    for name, text in READER_FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = cli_env()
    env.update(PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
               CI="1", GITHUB_STEP_SUMMARY=str(tmp_path / "step-summary.md"),
               ACP_REFERENCE_STATE_DIR=str(tmp_path / "agent-state"))
    for command in commands(block):
        if OWN_TESTS in command:
            continue  # this test is one of them
        for prefix in INSTALLED:
            if command.startswith(prefix):
                command = command[len(prefix):] if prefix.endswith("&& ") else ""
        if not command:
            continue
        proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, text=True,
                              capture_output=True, timeout=600, check=False)
        assert proc.returncode == expected_status(command), (
            f"{where}: {command}\nexit {proc.returncode}\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}")


# -- excerpts: the console text the docs show is what the command prints ---------------

#: The line before a fenced block that shows a command's output: the command, run here
#: in a fresh folder as a reader runs it; "..." lines in the block stand for left-out lines.
EXCERPT_MARK = re.compile(r"<!-- output of: (.+?) -->")
#: What differs from run to run and is made equal before comparing.
VOLATILE = [(re.compile(r"sess_[0-9a-f]{32}"), "sess_ID")]


def excerpts() -> list[tuple[str, str, str]]:
    """(where, command, block text) for every block marked as a command's output."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"^```[a-z]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
            before = text[:m.start()].rstrip().rsplit("\n", 1)[-1]
            mark = EXCERPT_MARK.fullmatch(before.strip())
            if mark:
                line = text.count("\n", 0, m.start()) + 1
                found.append((f"{path.relative_to(REPO_ROOT)}:{line}", mark.group(1),
                              m.group(1)))
    return found


def stable(text: str) -> str:
    for pattern, replacement in VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def drift(excerpt: str, output: str) -> str | None:
    """None when every run of lines between "..." lines is in ``output``, whole lines, in
    order; else the first run that is not."""
    lines = [line.rstrip() for line in stable(output).splitlines()]
    chunks: list[list[str]] = [[]]
    for line in stable(excerpt).splitlines():
        if line.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(line.rstrip())
    at = 0
    for chunk in (c for c in chunks if c):
        n = len(chunk)
        starts = [i for i in range(at, len(lines) - n + 1) if lines[i:i + n] == chunk]
        if not starts:
            return "\n".join(chunk)
        at = starts[0] + n
    return None


EXCERPTS = excerpts()


def test_drift_is_found() -> None:
    output = "a\nb\nc\nd\n"
    assert drift("a\nb\n...\nd\n", output) is None
    assert drift("b\nc\n", output) is None
    assert drift("a\nc\n", output) == "a\nc"  # not next to each other
    assert drift("c\n...\nb\n", output) == "b"  # out of order
    assert drift("a\n...\ne\n", output) == "e"


def test_the_readme_and_the_manual_show_the_demo_as_it_prints() -> None:
    shown = {(where.split(":", 1)[0], command) for where, command, _ in EXCERPTS}
    assert ("README.md", "acp-conformance demo --broken") in shown
    assert ("docs/reports.md", "acp-conformance demo --broken") in shown
    assert any("acp-conformance show " in command for _, command in shown)


def by_command() -> dict[str, list[tuple[str, str]]]:
    """Each command whose output the docs show, with every excerpt of it: (where, text)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for where, command, excerpt in EXCERPTS:
        out.setdefault(command, []).append((where, excerpt))
    return out


BY_COMMAND = by_command()


@pytest.mark.slow
@pytest.mark.parametrize("command", list(BY_COMMAND),
                         ids=[" ".join(w for w, _ in shown) for shown in BY_COMMAND.values()])
def test_every_excerpt_is_what_its_command_prints(command: str, tmp_path: Path) -> None:
    """The command runs once for all the excerpts of it, wherever they are."""
    def output() -> str:
        work = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}"
        work.mkdir()
        (work / "fixtures").symlink_to(REPO_ROOT / "fixtures")
        env = cli_env()
        env.update(PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                         env.get("PATH", "")]), CI="1",
                   ACP_REFERENCE_STATE_DIR=str(work / "agent-state"))
        proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, text=True,
                              capture_output=True, timeout=600, check=False)
        return proc.stdout

    printed = output()
    for where, excerpt in BY_COMMAND[command]:
        missing = drift(excerpt, printed)
        if missing is not None:
            # A live run against a real process races it: the demo's broken agent may get
            # one chunk more out before it reads a cancel, or interleave two in-flight
            # turns, on a loaded machine (a count of the summary moves by one). The excerpt
            # stands when a second run prints it; a real drift fails both.
            printed = output()
            missing = drift(excerpt, printed)
        assert missing is None, (
            f"{where}: the excerpt of '{command}' is not what it prints; these lines are "
            f"not in its output (in this order):\n{missing}\n--- its output:\n{printed}")
