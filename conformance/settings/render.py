"""The option table rendered where it is not code: the GitHub Action's inputs
(``action.yml``) and the table section of ``docs/options.md``.

``python -m conformance.settings.render action.yml`` rewrites the inputs of
``action.yml`` that are run options from the table (the others, the Action's own,
are left as written); ``python -m conformance.cli.options_doc > docs/options.md``
writes the documentation, this table included. ``tests/test_option_table.py`` fails
when either file, the command line or the pytest plugin drifts from the table.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from conformance.settings.table import GROUPS, OPTIONS, Option, for_shell, help_for

__all__ = ["action_default", "action_description", "action_yml", "markdown_table"]


def action_description(row: Option) -> str:
    """The Action input's description: the row's help as the Action reads it."""
    text = help_for(row, "action")
    if row.kind == "flag":
        return f"true or false: {text}."
    if not text[1].isdigit():
        text = text[0].upper() + text[1:]
    if row.kind == "text" and row.name not in ("agent", "client", "proxy"):
        text += "; empty for the suite's default"
    return text + "."


def action_default(row: Option) -> str:
    """The Action input's default: a flag is "false"; a choice its default; any other
    input is empty, and an empty input is not passed (the suite's default holds)."""
    if row.kind == "flag":
        return "false"
    if row.kind == "choice":
        return str(row.default)
    return ""


def _input_block(row: Option) -> str:
    return (f"  {row.name}:\n    description: {json.dumps(action_description(row))}\n"
            f"    required: false\n    default: {json.dumps(action_default(row))}\n")


_BLOCK = re.compile(r"^  (?P<name>[\w-]+):\n(?:^    .*\n)+", re.MULTILINE)


def action_yml(text: str) -> str:
    """``action.yml`` with the inputs that are run options rendered from the table; an
    option the table gives the Action that action.yml lacks is added at the end of its
    inputs."""
    start = text.index("\ninputs:\n") + len("\ninputs:\n")
    end = text.index("\noutputs:", start)
    inputs = text[start:end]
    rows = {o.name: o for o in for_shell("action")}
    seen: set[str] = set()

    def one(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in rows:
            return m.group(0)
        seen.add(name)
        return _input_block(rows[name])

    inputs = _BLOCK.sub(one, inputs)
    missing = [rows[n] for n in rows if n not in seen]
    inputs = inputs.rstrip("\n") + "\n" + "".join(_input_block(r) for r in missing)
    return text[:start] + inputs + text[end:]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(fill: Mapping[str, str] | None = None) -> list[str]:
    """The run options, one row each: how every shell spells it, its roles and default
    (``fill``: the blanks of the helps, as the shell that fills them gives them)."""
    lines = ["## Run options, one table", "",
             "Every run option once: how the command line (the suite run, or only its `fuzz` "
             "subcommand), the pytest plugin and the GitHub Action spell it, the roles it "
             "applies to (given with another role, it is refused), its default and its "
             "meaning. Every shell checks it the same way, with the same message. Generated "
             "from `conformance/settings/table.py`.", "",
             "| option | pytest plugin | Action input | roles | default | meaning |",
             "|---|---|---|---|---|---|"]
    for row in OPTIONS:
        cli = ", ".join(f"`{f}`" for f in row.flags("cli")) if "cli" in row.shells else \
            f"`{row.flags('fuzz')[0]}` (fuzz)" if "fuzz" in row.shells else "-"
        plugin = f"`{row.flags('plugin')[0]}`" if "plugin" in row.shells else "-"
        action = f"`{row.name}`" if "action" in row.shells else "-"
        roles = "all" if row.roles is None else ", ".join(sorted(row.roles))
        default = "" if row.default in (None, False, []) else f"`{row.default}`"
        shell = next(s for s in ("cli", "plugin", "fuzz") if s in row.shells)
        meaning = help_for(row, shell, fill) + (f" ({GROUPS[row.group]})"
                                                if row.group == "fuzz" else "")
        lines.append(f"| {cli} | {plugin} | {action} | {roles} | {default} | "
                     f"{_cell(meaning)} |")
    return lines + [""]


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "action.yml")
    path.write_text(action_yml(path.read_text(encoding="utf-8")), encoding="utf-8")
