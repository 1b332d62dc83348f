"""Wiring the scripted model server into a run: which script each case plays,
and ``{model_url}`` in the agent command, its environment and config templates.

Kept here so the runner and the CLI only call in: ``prepare_run`` before the
run, ``use_case_script`` before each case.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.modelserver.script import ModelScript, ScriptError, default_script, load_script

if TYPE_CHECKING:
    from conformance.masking import Masker
    from conformance.modelserver.server import ModelServer

PLACEHOLDER = "{model_url}"
_cache: dict[Path, ModelScript] = {}


def case_script_path(case: Any) -> Path | None:
    """``cases/model/<name>.yaml`` beside the case's own file, if the case names a script."""
    name = getattr(case, "model", None)
    if not name:
        return None
    case_file = Path(str(case.source).rsplit(":", 1)[0])
    return case_file.parent / "model" / f"{name}.yaml"


def script_for(case: Any, override: Path | None) -> ModelScript:
    path = override if override is not None else case_script_path(case)
    if path is None:
        return default_script()
    path = Path(path)
    if path not in _cache:
        if not path.is_file():
            where = f"{case.source}: model script {case.model!r}" if override is None \
                else "--model-script"
            raise ScriptError(f"{where}: no such file {path}")
        _cache[path] = load_script(path)
    return _cache[path]


def use_case_script(server: ModelServer, case: Any, label: str, override: Path | None,
                    header: dict[str, Any]) -> str:
    """Make ``server`` play the case's script; note the script's name in the header.

    Returns the case's own base URL (a route of the server: cases that run at
    the same time each get their own script state and request log). The default
    route plays the same script, for an agent that reaches the model through a
    config file written once for the run.
    """
    script = script_for(case, override)
    server.take_log()  # a straggler of the previous case must not land in this one
    server.use(script, label)
    url = server.route_url(label, script, label)
    header["model_script"] = script.name
    header["model_url"] = url
    return url


def end_case(server: ModelServer, label: str, *, shared: bool) -> list[dict[str, Any]]:
    """The model requests of the case ``label`` (its route's, and with ``shared`` also those
    that reached the default route), oldest first; its route ends."""
    return server.take_log(label) + (server.take_log() if shared else [])


def fill(text: str, url: str | None) -> str:
    if PLACEHOLDER not in text:
        return text
    if url is None:
        raise ScriptError(f"{PLACEHOLDER} is used but no model server runs (add --model-server)")
    return text.replace(PLACEHOLDER, url)


def prepare_run(command: str | Sequence[str], env: Mapping[str, str], cases: Iterable[Any],
                *, enabled: bool, script: Path | None,
                configs: Sequence[tuple[Path, Path]] = (), masker: Masker | None = None
                ) -> tuple[ModelServer | None, str | list[str], dict[str, str]]:
    """Start the server (if enabled) and fill ``{model_url}`` everywhere.

    Every case's script is loaded first, so a bad script stops the run before
    any target starts. ``configs`` are (template, destination) pairs written
    with ``{model_url}`` filled in. Returns the server (the caller stops it),
    the command and the agent environment: the server's variables first, the
    user's ``--agent-env`` on top.
    """
    server: ModelServer | None = None
    if enabled or script is not None:
        from conformance.modelserver.server import ModelServer

        for case in cases:
            script_for(case, script)
        server = ModelServer(masker=masker).start()
    url = server.url if server else None
    try:
        if isinstance(command, str):
            command = fill(command, url)
        else:
            command = [fill(a, url) for a in command]
        out = dict(server.env()) if server else {}
        out.update({k: fill(v, url) for k, v in env.items()})
        for template, dest in configs:
            write_config(template, dest, url)
    except BaseException:
        if server:
            server.stop()
        raise
    return server, command, out


def write_config(template: Path, dest: Path, url: str | None) -> None:
    """Write ``template`` to ``dest`` with ``{model_url}`` filled in."""
    try:
        text = Path(template).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{template}: cannot read config template: {exc.strerror}") from None
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(fill(text, url), encoding="utf-8")


def bundled_scripts() -> dict[str, Path]:
    """{name: file} of the model scripts shipped with the cases (``cases/model/*.yaml``)."""
    from conformance.cases import default_cases_dir

    folder = default_cases_dir() / "model"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def find_script(value: str) -> Path:
    """``--model-script``: a file, else the name of a bundled script (``repeat-ids``)."""
    path = Path(value)
    if path.is_file():
        return path
    bundled = bundled_scripts().get(value.removesuffix(".yaml"))
    if bundled is not None and (os.sep not in value):
        return bundled
    raise ScriptError(f"--model-script {value}: no such file, and no bundled script of that "
                      f"name (bundled: {', '.join(bundled_scripts()) or 'none'})")
