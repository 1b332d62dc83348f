"""How a report heads its target and says its notes: the name and version a vendor gives
(``--target-name``, ``--target-version``) over what ``initialize`` reported, a command
without the machine's folders, and one note per wording with a count."""

from __future__ import annotations

import re

from conformance.results import Outcome, Reason, RunResult

NOT_RUN = "not run: "


def grouped_notes(result: RunResult) -> list[str]:
    """Each case's note, once per wording: "case: note" for one case, and "22 v2 cases not
    run: why" (or "3 v1 cases: note") where several cases say the same."""
    groups: dict[tuple[int, str, bool], list[str]] = {}
    for c in result.cases:
        if c.note:
            skipped = c.reason in (Reason.NOT_RUN, Reason.VERSION_UNSUPPORTED) \
                and c.outcome is not Outcome.FAIL
            groups.setdefault((c.protocol, c.shown_note, skipped), []).append(c.case)
    return sorted({f"{cases[0]}: {note}" if len(cases) == 1 else
                   f"{len(cases)} v{p} cases{' not run' if skipped else ''}: "
                   + (note.removeprefix(NOT_RUN) if skipped else note)
                   for (p, note, skipped), cases in groups.items()})


def with_label(result: RunResult, name: str | None, version: str | None) -> None:
    """``--target-name`` / ``--target-version``: the name and version every report heads
    with, in place of what ``initialize`` reported, which is kept as ``reported``."""
    if not name and not version:
        return
    info = dict(result.target_info or {})
    reported = info.get("reported") if isinstance(info.get("reported"), dict) else {
        "name": info.get("name"), "version": info.get("version")}
    info.update(reported=reported, name=name or info.get("name"),
                version=version or info.get("version"))
    result.target_info = info


def shown_command(command: str) -> str:
    """The command as a report heads it: a word that is an absolute path shows its last
    part only (``/home/ci/build/bin/agent --acp`` is ``agent --acp``), so no report names
    the machine's folders."""
    return re.sub(r"(?<![\w.~-])/(?:[^\s/'\"]+/)+([^\s/'\"]+)", r"\1", command)


__all__ = ["grouped_notes", "shown_command", "with_label"]
