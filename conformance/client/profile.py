"""Client profiles: how to drive a person-facing client through a pty and read what it shows.

A profile is a small YAML file::

    ready: '^> $'                  # regex: the client waits for input (searched in the
                                   #   ANSI-stripped output; ^ and $ match at line ends)
    submit: "{prompt}\\r"           # what to type to send a prompt ({prompt} is replaced)
    message: '^(?P<role>user|agent|thought): (?P<text>.*)$'
                                   # regex applied to each output line (ANSI stripped);
                                   #   named groups `role` and `text`
    render: cumulative             # cumulative: each render shows the whole session;
                                   #   incremental: only what is new
    quit: "/quit\\r"                # optional: what to type to leave
    roles: {You: user, Claude: agent, Thinking: thought}
                                   # optional: the client's role labels -> user/agent/thought
    show: [user, agent]            # optional: the kinds the client shows (default all three)
    send_delay: 0.05               # optional: seconds between seeing ready and typing, for a
                                   #   client that shows its prompt before it reads (default 0)
    load: "/resume {session}\r"     # optional: what to type to reload a session (MID-C-07);
                                   #   for a one-shot client, the command line that resumes
                                   #   one: 'my-cli --agent {agent} --resume {session} {prompt}'

One-shot clients (``{prompt}`` in the client command) need only ``message``
(``ready`` and ``submit`` are not used). Errors name the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.cases import CaseError, compose_with_lines

ROLES = ("user", "agent", "thought")
RENDERS = ("cumulative", "incremental")
KEYS = ("ready", "submit", "message", "render", "quit", "roles", "show", "send_delay", "load")
MAX_SEND_DELAY = 5.0


class ProfileError(Exception):
    """A client profile that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class Profile:
    message: re.Pattern[str]
    render: str = "cumulative"
    ready: re.Pattern[str] | None = None
    submit: str | None = None
    quit: str | None = None
    roles: dict[str, str] = field(default_factory=dict)
    show: tuple[str, ...] = ROLES
    source: str = "(profile)"
    send_delay: float = 0.0
    load: str | None = None  # how to reload a session, with {session}

    def role_of(self, label: str) -> str:
        label = label.strip()
        return self.roles.get(label, label.lower() if label.lower() in ROLES else label)

    def require_interactive(self) -> None:
        missing = [k for k in ("ready", "submit") if getattr(self, k) is None]
        if missing:
            raise ProfileError(f"{self.source}: missing key {missing[0]!r}, needed to drive an "
                               "interactive client (only one-shot clients, with {prompt} in the "
                               "client command, can do without it)")


def load(path: Path) -> Profile:
    from conformance.cases import read_input

    return loads(read_input(path, "client profile", ProfileError), str(path))


def loads(text: str, name: str = "(profile)") -> Profile:
    try:
        data, lines = compose_with_lines(text, name)
    except CaseError as exc:
        raise ProfileError(str(exc)) from None

    def at(*path: Any) -> str:
        p = tuple(path)
        while p and p not in lines:
            p = p[:-1]
        return f"{name}:{lines.get(p, 1)}"

    if not isinstance(data, dict):
        raise ProfileError(f"{name}:1: a client profile is a mapping of keys "
                           f"({', '.join(KEYS)})")
    for key in data:
        if key not in KEYS:
            raise ProfileError(f"{at(key)}: unknown key {key!r} (known: {', '.join(KEYS)})")
    if "message" not in data:
        raise ProfileError(f"{name}:1: missing key 'message' (a regex with named groups "
                           "role and text)")

    def string(key: str) -> str | None:
        if key not in data:
            return None
        value = data[key]
        if not isinstance(value, str) or not value:
            raise ProfileError(f"{at(key)}: {key} must be a non-empty string")
        return value

    def regex(key: str) -> re.Pattern[str] | None:
        value = string(key)
        if value is None:
            return None
        try:
            return re.compile(value, re.MULTILINE)
        except re.error as exc:
            raise ProfileError(f"{at(key)}: {key} is not a valid regex: {exc}") from None

    message = regex("message")
    assert message is not None
    for group in ("role", "text"):
        if group not in message.groupindex:
            raise ProfileError(f"{at('message')}: message needs a named group (?P<{group}>...)")
    render = string("render") or "cumulative"
    if render not in RENDERS:
        raise ProfileError(f"{at('render')}: render must be cumulative or incremental, "
                           f"not {render!r}")
    submit = string("submit")
    if submit is not None and "{prompt}" not in submit:
        raise ProfileError(f"{at('submit')}: submit must contain the placeholder {{prompt}}")
    load = string("load")
    if load is not None and "{session}" not in load:
        raise ProfileError(f"{at('load')}: load must contain the placeholder {{session}} "
                           "(the session to reload)")
    roles: dict[str, str] = {}
    if "roles" in data:
        if not isinstance(data["roles"], dict):
            raise ProfileError(f"{at('roles')}: roles maps the client's labels to "
                               "user, agent or thought")
        for label, role in data["roles"].items():
            if role not in ROLES:
                raise ProfileError(f"{at('roles', label)}: role of {label!r} must be user, "
                                   f"agent or thought, not {role!r}")
            roles[str(label)] = role
    show = ROLES
    if "show" in data:
        value = data["show"]
        if not isinstance(value, list) or not value or any(v not in ROLES for v in value):
            raise ProfileError(f"{at('show')}: show lists the kinds the client shows "
                               "(user, agent, thought)")
        show = tuple(value)
    send_delay = data.get("send_delay", 0.0)
    if (isinstance(send_delay, bool) or not isinstance(send_delay, (int, float))
            or not 0 <= send_delay <= MAX_SEND_DELAY):
        raise ProfileError(f"{at('send_delay')}: send_delay is a number of seconds from 0 "
                           f"to {MAX_SEND_DELAY:g}")
    return Profile(message=message, render=render, ready=regex("ready"), submit=submit,
                   quit=string("quit"), roles=roles, show=show, source=name,
                   send_delay=float(send_delay), load=load)


ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


CLEAR = re.compile(r"\x1b\[[23]J|\x1bc")


def screen_lines(raw: str, *, last_screen: bool = True) -> list[str]:
    """Output as a person sees it line by line: ANSI stripped, each line as it ends
    after carriage returns (a rewritten line); with ``last_screen``, only what
    follows the last screen clear."""
    text = CLEAR.split(raw)[-1] if last_screen else raw
    text = strip_ansi(text).replace("\r\n", "\n")
    lines = []
    for line in text.split("\n"):
        if "\r" in line:
            line = [p for p in line.split("\r") if p][-1] if line.strip("\r") else ""
        lines.append(line)
    return lines


def parse_messages(profile: Profile, lines: list[str]) -> list[dict[str, Any]]:
    """The messages a render shows: one per line that matches ``message``."""
    out = []
    for line in lines:
        m = profile.message.search(line)
        if m:
            out.append({"role": profile.role_of(m.group("role") or ""),
                        "text": m.group("text") or ""})
    return out
