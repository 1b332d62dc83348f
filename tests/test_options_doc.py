"""docs/options.md is generated from the argparse definitions: it cannot drift from --help.

After changing an option: python -m conformance.cli.options_doc > docs/options.md
"""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO_ROOT, cli_env

from conformance.cli.options_doc import parsers, render

OPTIONS_MD = REPO_ROOT / "docs" / "options.md"


def test_options_reference_is_not_stale() -> None:
    assert OPTIONS_MD.read_text(encoding="utf-8") == render(), (
        "docs/options.md is stale: run python -m conformance.cli.options_doc > docs/options.md")


def test_the_generator_writes_what_the_test_compares() -> None:
    proc = subprocess.run([sys.executable, "-m", "conformance.cli.options_doc"], cwd=REPO_ROOT,
                          env=dict(cli_env(), COLUMNS="40"), capture_output=True, text=True,
                          check=True, timeout=60)
    assert proc.stdout == render()  # the terminal's width changes nothing


def test_every_option_of_every_help_is_in_the_reference() -> None:
    text = render()
    for command, parser in parsers():
        assert f"## `{command}`" in text
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in text, (command, option)
