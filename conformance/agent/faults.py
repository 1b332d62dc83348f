"""How a drive of the agent role ends early: the exceptions the driver raises and the
runner, the plugin and the fuzzer catch (:mod:`conformance.lifecycle` has their bases),
and the error answer to a request the driver sent.
"""

from __future__ import annotations

from typing import Any

from conformance.lifecycle import CaseAborted, CaseCut, CaseNotPlayable
from conformance.results import Reason


class DriveAborted(CaseAborted):
    """The target hung or died: the case stops; what was recorded is still graded.

    ``fault`` names the target fault and the step it happened at ("went silent at the
    session/prompt response"), or is empty when the abort says nothing about later
    cases. The runner stops a protocol version when consecutive cases end with the
    same fault (see ``runner.Shortcut``).
    """


class DriveTimeout(DriveAborted):
    """The target went silent (or never stopped writing) past the wait's limit."""


class SameForEveryCase(DriveAborted):
    """A fault every later case of this protocol version would repeat, known from one
    case (the first handshake never answered, a v2 claim spoken in v1): the runner
    does not wait for a second case to show it."""

    every_case = True


class DriveCut(DriveAborted, CaseCut):
    """The case was cut from outside (``--deadline``, a signal, or a run that no longer
    needs it); ``reason`` says which. Not the target's fault."""


class NotTestable(CaseNotPlayable):
    """The target cannot take this case (v2 unsupported, no session/load, manual auth)."""


class NegotiationFailed(NotTestable):
    """The agent did not negotiate the version the case plays, or did not speak the one it
    answered (an error to ``initialize``; a v1 turn after answering 2; v2 updates after
    answering 1). Every case of the version would repeat it: they are not run, and the
    case's transcript shows it to ``TARGET/negotiation/agent`` (fail), once."""

    every_case = True

    def __init__(self, what: str) -> None:
        super().__init__(f"not run: {what}", Reason.NOT_RUN)


class RequestRefused(NotTestable):
    """The agent answered a request the case needs (``session/new``, ``session/prompt``,
    ``session/load``, ``session/resume``) with an error: the case is not run, and the
    error is its reason."""

    def __init__(self, method: str, error: str) -> None:
        super().__init__(f"not run: the agent refused {method} ({error})", Reason.NOT_RUN)
        self.method = method


class _RpcError(Exception):
    def __init__(self, code: Any, message: str, method: str = "") -> None:
        super().__init__(f"error {code}: {message}")
        self.code = code
        self.method = method
