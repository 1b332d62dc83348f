"""The agent role's step player: :class:`StepDriver`, the client driver plus the whole step
vocabulary of :mod:`conformance.agent.steps` (``$defs/agentStep`` of the case schema). The
case runner, the proxy role and the fuzzer (its ``FuzzDriver`` subclass) all play steps
with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.agent.driver import ClientDriver
from conformance.agent.faults import RequestRefused, _RpcError
from conformance.agent.steps import Step, StepError, split

INVALID_PARAMS = -32602
MAX_KEY = 255  # the longest valid idempotencyKey (catalogue K.4)


class StepDriver(ClientDriver):
    """The client driver plus the whole step vocabulary (``$defs/agentStep`` of the case
    schema): prompts of any content blocks, a cancel after a chosen number of updates,
    and switching between the sessions it created. The case runner plays agent cases
    with it, the fuzzer with :class:`FuzzDriver`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._blocks: list[Any] | None = None
        # The one session book of the agent role: every session created, in order (what
        # switch names), and those open on the current connection (by index).
        self.sessions: list[str] = []
        self.open: set[int] = set()
        self.keys_refused = False  # a valid idempotencyKey was refused: none is sent since

    @property
    def current(self) -> int | None:
        """The index of the current session among those created (None: none yet)."""
        return self.sessions.index(self.session) if self.session in self.sessions else None

    def current_open(self) -> bool:
        return self.current is not None and self.current in self.open

    def new_session(self) -> str:
        sid = super().new_session()
        self.sessions.append(sid)
        self.open.add(len(self.sessions) - 1)
        return sid

    def switch(self, index: Any) -> None:
        if not isinstance(index, int) or not 0 <= index < len(self.sessions):
            raise StepError(f"switch to session #{index}, but only {len(self.sessions)} exist")
        self.session = self.sessions[index]

    def prompt_spec(self, spec: Mapping[str, Any]) -> Any:
        """Play one ``prompt`` step; the error the agent answered it with, or None."""
        if spec.get("retry"):
            if self.keys_refused:  # a retry without its key would be a new prompt
                self.note("retry not sent: the agent refused idempotencyKey", {})
                return None
            return self.retry_prompt()
        self._blocks = list(spec["blocks"]) if spec.get("blocks") else None
        cancel_after = spec.get("cancel_after")
        invalid_key = spec.get("invalid_key")

        def send() -> Any:
            return self.prompt(str(spec.get("text", "")),
                               legacy_message_id=spec.get("legacy_message_id"),
                               meta_message_id=spec.get("meta_message_id"),
                               cancel=bool(spec.get("cancel")),
                               cancel_after=cancel_after if isinstance(cancel_after, int)
                               else None,
                               in_flight=bool(spec.get("in_flight")),
                               invalid_key=str(invalid_key) if invalid_key else None)

        try:
            error = send()
            if error is not None and invalid_key is None and self._key_refused(error):
                # Was it the key? The same prompt once more, without one (catalogue K.4): if
                # it is accepted, the refusal is the finding (MID-V2-15/rejected-key) and the
                # rest of the case is played without keys, so it is still measured.
                self.idempotency_keys = False
                if send() is None:
                    self.keys_refused = True
                    self.note("the agent refused idempotencyKey and took the prompt without "
                              "it: the rest of the case sends no key", {})
                    return None
                self.idempotency_keys = True
            return error
        finally:
            self._blocks = None

    def _key_refused(self, error: Any) -> bool:
        """An invalid-params error to a prompt that carried a valid idempotencyKey."""
        key = (self.last_prompt or {}).get("idempotencyKey")
        return (self.idempotency_keys and isinstance(key, str) and 1 <= len(key) <= MAX_KEY
                and isinstance(error, dict) and error.get("code") == INVALID_PARAMS)

    def _send_request(self, method: str, params: Any, *, fuzz: bool = False) -> int:
        if method == "session/prompt" and self._blocks is not None:
            params = {**params, "prompt": self._blocks}
        return super()._send_request(method, params, fuzz=fuzz)

def perform(driver: StepDriver, step: Step, *, strict: bool = True) -> None:
    """Play one step of the vocabulary (:mod:`conformance.agent.steps`): the one player of
    cases, the proxy role's agent-side cases and the fuzzer.

    ``strict`` (a case): a step that cannot be played is a bad case (ValueError), and an
    error answer to a request the case needs ends it as not run (RequestRefused). Not
    strict (the fuzzer): a step that cannot be played raises StepError, and an error answer
    is noted in the transcript while the run goes on. DriveAborted and NotTestable pass
    through either way."""
    name = str(step)
    try:
        name, args = split(step)
        if name not in ("load", "prompt"):
            driver.finish_flight_v1()  # (a load waits for it after its own response)
        if name in ("start", "restart"):
            if name == "restart":
                driver.stop()
            driver.open.clear()
            driver.start()
        elif name == "new_session":
            driver.new_session()
        elif name == "switch":
            driver.switch(args.get("session"))
        elif name == "prompt":
            _need_session(driver, name)
            error = driver.prompt_spec(args)
            # the turn the case needs was refused (an invalid key may be: its answer is data)
            if error is not None and strict and not args.get("invalid_key"):
                err = error if isinstance(error, dict) else {}
                raise RequestRefused("session/prompt",
                                     f"error {err.get('code')}: {err.get('message')}")
        elif name in ("load", "resume"):
            index = _need_session(driver, name)
            if name == "load":
                driver.load()
            else:
                replay = args.get("replay", "none")
                driver.resume(None if replay == "none" else str(replay),
                              while_streaming=bool(args.get("while_streaming")))
            driver.open.add(index)
        elif name == "address_unknown_ids":
            _need_session(driver, name)
            driver.address_unknown_ids()
        elif name == "close_session":
            driver.open.discard(_need_session(driver, name))
            driver.close_session()
        else:
            raise StepError(f"unknown step {step!r}")
    except StepError as exc:
        if strict:  # the case schema makes this a bad case, not a target fault
            raise ValueError(f"bad case step: {exc}") from None
        raise
    except _RpcError as exc:
        if strict:
            raise RequestRefused(exc.method, str(exc)) from None
        driver.note("step answered with an error", {"step": name, "error": str(exc)})


def _need_session(driver: StepDriver, name: str) -> int:
    index = driver.current
    if index is None:
        raise StepError(f"{name} needs a session, but no new_session came before it")
    return index
