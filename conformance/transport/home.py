"""Each case's own home and state folders, so cases played at once cannot make the target
race itself.

A real agent may rewrite a file under its home when it starts (its config, a cache, a
lock): two cases started at the same time (``--jobs``) then find it half-written and
one exits, a ``TARGET/exit`` fail the target did not earn. A case therefore gives its
target its own copies of the folders the user gave it:

* ``HOME`` and each XDG base folder (``XDG_CONFIG_HOME``, ``XDG_STATE_HOME``,
  ``XDG_CACHE_HOME``, ``XDG_DATA_HOME``) the user sets with ``--agent-env`` is copied
  into the case's scratch folder, and the target gets the copy;
* with ``HOME`` given, an XDG folder the user did not give is pointed under the copied
  home (where the XDG spec puts it by default), so one set in the suite's own
  environment (as CI runners do) is not shared between cases either;
* ``TMPDIR`` is a fresh folder of the case's, always.

The copy is made for every case, whatever ``--jobs`` says: each case then starts from
the folders the user gave, so a serial run and a concurrent one give the same reports.
The user's own home (``HOME`` not given) is neither copied nor replaced: it holds the
user's credentials, and an agent started without ``HOME`` is meant to use them; such an
agent shares it between concurrent cases, as it would between two editors (give
``--agent-env HOME=DIR`` for a home of its own per case, or ``-j 1``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

__all__ = ["XDG", "case_env"]

#: The XDG base folders and where they are under a home, by default.
XDG = {"XDG_CONFIG_HOME": ".config", "XDG_STATE_HOME": ".local/state",
       "XDG_CACHE_HOME": ".cache", "XDG_DATA_HOME": ".local/share"}


def _copy(source: str, dest: Path) -> str:
    """A copy of the folder ``source`` at ``dest`` (links kept as links; a missing or
    unreadable source gives an empty folder: the target meets what it would have met)."""
    try:
        shutil.copytree(source, dest, symlinks=True, ignore_dangling_symlinks=True)
    except (OSError, shutil.Error):
        dest.mkdir(parents=True, exist_ok=True)
    return str(dest)


def case_env(env: Mapping[str, str], scratch: str | os.PathLike[str]) -> dict[str, str]:
    """``env`` (the user's ``--agent-env``) with the case's own HOME, XDG folders and TMPDIR,
    made under ``scratch`` (the case's temporary folder, removed with it)."""
    out = dict(env)
    root = Path(scratch)
    if out.get("HOME"):
        out["HOME"] = _copy(out["HOME"], root / "home")
    home = Path(env["HOME"]) if env.get("HOME") else None
    for name, under in XDG.items():
        given = Path(out[name]) if out.get(name) else None
        if given is not None and home is not None and given.is_relative_to(home):
            out[name] = str(Path(out["HOME"]) / given.relative_to(home))  # within the copy
        elif given is not None:
            out[name] = _copy(str(given), root / name.lower())
        elif home is not None:
            out[name] = str(Path(out["HOME"]) / under)
    tmp = root / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    out["TMPDIR"] = str(tmp)
    return out
