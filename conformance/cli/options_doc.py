"""``docs/options.md``, generated from the argparse definitions, so ``--help`` and the
documentation cannot drift: ``python -m conformance.cli.options_doc > docs/options.md``
(``tests/test_options_doc.py`` fails when the file is stale).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

HEADER = """# Options

Every option of every subcommand, as `acp-conformance [SUBCOMMAND] --help` prints
it, and at the end the run options as the command line, the pytest plugin and the
GitHub Action spell them. This file is generated from the option table
(`python -m conformance.cli.options_doc > docs/options.md`); a test fails when it
is stale, so edit the help texts in `conformance/settings/table.py` (the run
options) or `conformance/cli/` (a subcommand's own), not this file.
"""


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """(command line, parser) of the suite run and of every subcommand, in --help order."""
    from conformance.cli.check import build_check_parser
    from conformance.cli.fuzz import build_fuzz_parser
    from conformance.cli.listing import build_list_parser
    from conformance.cli.options import SUBCOMMANDS
    from conformance.cli.replay import build_replay_parser
    from conformance.cli.report import build_report_parser
    from conformance.cli.run import build_parser
    from conformance.cli.show import build_show_parser
    from conformance.cli.verify import build_verify_parser

    builders: dict[str, Callable[[], argparse.ArgumentParser]] = {
        "demo": lambda: build_parser("demo"), "check": build_check_parser,
        "list": build_list_parser, "lint-cases": build_lint_parser,
        "report": build_report_parser, "fuzz": build_fuzz_parser,
        "replay": build_replay_parser, "show": build_show_parser,
        "verify": build_verify_parser}
    assert set(builders) == set(SUBCOMMANDS), "a subcommand without its options section"
    return [("acp-conformance", build_parser())] + [
        (f"acp-conformance {name}", builders[name]()) for name in SUBCOMMANDS]


def build_lint_parser() -> argparse.ArgumentParser:
    from conformance.cli.lint_cases import build_lint_parser as build

    return build()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    metavar = ""
    if action.nargs != 0:
        metavar = action.metavar if isinstance(action.metavar, str) else (
            "{" + ",".join(map(str, action.choices)) + "}" if action.choices
            else action.dest.upper())
    return ", ".join(f"`{o}{' ' + metavar if metavar else ''}`" for o in action.option_strings)


def section(command: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `{command}`", ""]
    if parser.description:
        lines += [_cell(parser.description.split("\n\n", 1)[0]), ""]
    for group in parser._action_groups:  # the groups --help prints, in its order
        actions = [a for a in group._group_actions
                   if a.help is not argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        title = group.title or "options"
        lines += [f"**{title}**" + (f": {_cell(group.description)}" if group.description else ""),
                  "", "| option | meaning |", "|---|---|"]
        formatter = parser._get_formatter()
        for a in actions:
            help_text = formatter._expand_help(a) if a.help else ""
            lines.append(f"| {_invocation(a)} | {_cell(help_text)} |")
        lines.append("")
    if parser.epilog:
        lines += [_cell(parser.epilog), ""]
    return lines


def render() -> str:
    from conformance.cli.fuzz import blanks
    from conformance.settings.render import markdown_table

    lines = [HEADER]
    for command, parser in parsers():
        lines += section(command, parser)
    lines += markdown_table(blanks())  # the run options, as every shell spells them
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
