"""The reference agent's sessions: the stored conversation and its history, the store of
one JSON file per session (so a fresh process can load it), and the turn in progress."""

from __future__ import annotations

import os

from conformance.reference.wire import (
    JsonObject,
    RequestId,
    decode,
    encode,
    joined_text,
    now_iso,
    random_hex,
)


class Session:
    """A conversation and its full history, in the order the client saw it.

    History entries are plain JSON objects:
    ``{"type": "message", "kind": "user|agent|thought", "messageId": str,
    "content": [ContentBlock, ...]}`` and ``{"type": "tool_call",
    "toolCallId": str, "title": str, "kind": str, "status": str,
    "rawInput": {...}, "content": [ToolCallContent, ...]}``.
    """

    def __init__(self, session_id: str, cwd: str, protocol_version: int,
                 history: list[JsonObject] | None = None, title: str | None = None,
                 updated_at: str = "", prompt_keys: dict[str, str] | None = None) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.protocol_version = protocol_version
        self.history: list[JsonObject] = [] if history is None else history
        self.title = title
        self.updated_at = updated_at
        # v2 session/prompt idempotencyKey -> the ID of the user message it inserted
        self.prompt_keys: dict[str, str] = {} if prompt_keys is None else prompt_keys

    def to_json(self) -> JsonObject:
        return {
            "sessionId": self.session_id,
            "cwd": self.cwd,
            "protocolVersion": self.protocol_version,
            "title": self.title,
            "updatedAt": self.updated_at,
            "history": self.history,
            "promptKeys": self.prompt_keys,
        }

    @classmethod
    def from_json(cls, data: JsonObject) -> Session:
        return cls(
            session_id=data["sessionId"],
            cwd=data["cwd"],
            protocol_version=int(data.get("protocolVersion", 1)),
            history=list(data.get("history", [])),
            title=data.get("title"),
            updated_at=data.get("updatedAt", ""),
            prompt_keys=dict(data.get("promptKeys") or {}),
        )


def temp_dir() -> str:
    """The temporary folder as ``tempfile.gettempdir()`` finds it on POSIX, without
    importing tempfile (a good part of the agent's start-up)."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        configured = os.environ.get(name)
        if configured and os.path.isdir(configured):
            return configured
    return "/tmp"


HEX = "0123456789abcdef"  # a session ID is sess_ and 32 of these


class SessionStore:
    """One JSON file per session, replaced atomically after every change but the most
    frequent one: a block added to the message the session streams last (a chunk) is
    appended to the session's journal instead (``<id>.journal``, a JSON line per block:
    one write, where a replacement of the file costs a file made and renamed over the
    old one for every chunk). The next replacement takes the journal in and removes it.
    Loading reads the file, then the journal's whole lines; a line says where its block
    goes (the record and the block's place in it), so a line the file already holds (the
    agent ended between the two) is not added twice, and a cut last line is left out."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or self.default_directory()
        os.makedirs(self.directory, mode=0o700, exist_ok=True)

    @staticmethod
    def default_directory() -> str:
        configured = os.environ.get("ACP_REFERENCE_STATE_DIR")
        if configured:
            return configured
        try:
            owner = str(os.getuid())
        except AttributeError:  # not POSIX
            import getpass

            owner = getpass.getuser()
        return os.path.join(temp_dir(), f"acp-reference-agent-{owner}")

    def path(self, session_id: str) -> str | None:
        # Session IDs come from the client: never let one name a path.
        if not (isinstance(session_id, str) and len(session_id) == 37
                and session_id.startswith("sess_") and not session_id[5:].strip(HEX)):
            return None
        return os.path.join(self.directory, session_id + ".json")

    def journal(self, path: str) -> str:
        """The journal beside the session file ``path``."""
        return path[:-len(".json")] + ".journal"

    def load(self, session_id: str) -> Session | None:
        path = self.path(session_id)
        if path is None or not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            session = Session.from_json(decode(f.read()))
        try:
            with open(self.journal(path), "rb") as f:
                journal = f.read()
        except FileNotFoundError:
            return session
        for line in journal.splitlines():
            try:
                op = decode(line.decode("utf-8"))
                content = session.history[op["record"]]["content"]
                if len(content) == op["block"]:
                    content.append(op["content"])
                    session.updated_at = op["updatedAt"]
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                continue  # a line cut short by an agent that ended while writing it
        return session

    def save_block(self, session: Session, record: JsonObject) -> None:
        """``record`` (a message of ``session``) has a block more, its last: journal it
        when the record is the history's last, else save the whole session."""
        history = session.history
        path = self.path(session.session_id)
        if not history or history[-1] is not record or path is None:
            self.save(session)
            return
        session.updated_at = now_iso()
        content = record["content"]
        line = encode({"record": len(history) - 1, "block": len(content) - 1,
                       "content": content[-1], "updatedAt": session.updated_at})
        fd = os.open(self.journal(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (line + "\n").encode("ascii"))  # ASCII escapes: always encodable
        finally:
            os.close(fd)

    def save(self, session: Session) -> None:
        path = self.path(session.session_id)
        assert path is not None, "the agent only creates well-formed session IDs"
        session.updated_at = now_iso()
        tmp = os.path.join(self.directory, f".tmp-{random_hex()}.json")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(encode(session.to_json()))  # ASCII escapes: always encodable
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        try:
            os.unlink(self.journal(path))  # the file holds its blocks now
        except FileNotFoundError:
            pass

    def all(self) -> list[Session]:
        sessions = []
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".json") and not name.startswith("."):
                session = self.load(name[: -len(".json")])
                if session is not None:
                    sessions.append(session)
        return sessions


class Turn:
    """One prompt being worked on (v1: until the response; v2: until idle)."""

    def __init__(self, session: Session, request_id: RequestId, prompt: list[JsonObject],
                 user_message_id: str = "", cancelled: bool = False) -> None:
        self.session = session
        self.request_id = request_id
        self.prompt = prompt
        self.user_message_id = user_message_id
        self.cancelled = cancelled
        # (kind, messageId) -> the history entry being filled by this turn.
        self.records: dict[tuple[str, str], JsonObject] = {}
        self.last_message_id: dict[str, str] = {}

    @property
    def text(self) -> str:
        return joined_text(self.prompt)
