"""The handshake of the driver that plays the client: ``initialize`` (v1 or v2 as the
case asks) and, where the agent needs it, automatic authentication; what the agent
told about itself is kept in :class:`AgentInfo`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance import TOOL_NAME, __version__, model
from conformance.agent.connection import Connection
from conformance.agent.faults import (
    DriveAborted,
    DriveTimeout,
    NegotiationFailed,
    NotTestable,
    SameForEveryCase,
    _RpcError,
)
from conformance.results import Reason
from conformance.transport import DEFAULT_GRACE, TargetProcess


@dataclass
class AgentInfo:
    protocol: int | None = None
    name: str | None = None
    version: str | None = None
    load_session: bool = False
    resume: bool = False
    auth_methods: list[Any] = field(default_factory=list)
    no_session: bool = False  # v2: capabilities without the session marker
    addressed: list[str] = field(default_factory=list)  # v2: drafted ID-addressed methods


class Handshake(Connection):
    """The connection plus its handshake: ``start`` spawns the agent and initializes it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.info = AgentInfo()

    # -- process ---------------------------------------------------------
    def start(self) -> None:
        self.conn += 1
        self.exit_seen = False
        self.proc = TargetProcess(self.argv, self.transcript, conn=self.conn, src="agent",
                                  env=self.env, grace=min(DEFAULT_GRACE, self.timeout),
                                  write_timeout=self.timeout)
        self.initialize()

    # -- handshake -------------------------------------------------------
    def initialize(self) -> None:
        if self.protocol >= 2:
            params: dict[str, Any] = {
                "protocolVersion": 2, "info": {"name": TOOL_NAME, "version": __version__},
                "capabilities": {}}
        else:
            params = {"protocolVersion": 1,
                      "clientCapabilities": {"fs": {"readTextFile": False,
                                                    "writeTextFile": False},
                                             "terminal": False},
                      "clientInfo": {"name": TOOL_NAME, "version": __version__}}
        try:
            result = self.request("initialize", params, waiting_for="the initialize response")
        except _RpcError as err:  # the spec answers an unsupported version with the latest
            raise NegotiationFailed(f"the agent answered the v{self.protocol} initialize with "
                                    f"an error ({err})") from None
        except DriveTimeout as exc:
            if self.conn != 0:
                raise
            raise SameForEveryCase(
                f"the agent never answered initialize ({exc})",
                f"the agent did not answer the v{self.protocol} initialize") from None
        if not isinstance(result, dict):
            raise DriveAborted("initialize failed")
        pv = result.get("protocolVersion")
        self.info.protocol = pv if isinstance(pv, int) else None
        if self.protocol >= 2 and pv != 2:
            self.note("v2 unsupported", {"answered_protocolVersion": pv})
            raise NotTestable(f"v2 unsupported: the agent answered protocolVersion {pv!r}",
                              Reason.VERSION_UNSUPPORTED)
        if self.protocol < 2 and pv != 1:
            raise NotTestable(f"v1 unsupported: the agent answered protocolVersion {pv!r}",
                              Reason.VERSION_UNSUPPORTED)
        info = result.get("info") or result.get("agentInfo") or {}
        if isinstance(info, dict):
            self.info.name, self.info.version = info.get("name"), info.get("version")
        caps = result.get("capabilities") or result.get("agentCapabilities") or {}
        if not isinstance(caps, dict):
            caps = {}
        if self.protocol >= 2:
            session_caps = caps.get("session")
            self.info.load_session = False
            self.info.resume = isinstance(session_caps, dict)
            # A v2-shaped result (its capabilities object) without the session marker: the
            # agent made no session promise (catalogue Appendix I). A result without that
            # object is no v2 result at all: driven as it is, its faults reported.
            self.info.no_session = (isinstance(result.get("capabilities"), dict)
                                    and not isinstance(session_caps, dict))
            self.info.addressed = model.addressed_methods(caps)
        else:
            self.info.load_session = caps.get("loadSession") is True
            scaps = caps.get("sessionCapabilities") or {}
            self.info.resume = isinstance(scaps, dict) and scaps.get("resume") is not None
        methods = result.get("authMethods")
        self.info.auth_methods = methods if isinstance(methods, list) else []

    def authenticate(self) -> None:
        """Agents with an ``agent`` method get it; others need a person."""
        for m in self.info.auth_methods:
            if isinstance(m, dict) and m.get("type", "agent") == "agent":
                mid = m.get("id") or m.get("methodId")
                method = "auth/login" if self.protocol >= 2 else "authenticate"
                self.request(method, {"methodId": mid}, waiting_for=f"the {method} response")
                return
        raise NotTestable("needs manual auth: the agent offers no automatic auth method")
