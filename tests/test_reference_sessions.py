"""The reference agent's session store: what a fresh process loads is what the last one
streamed. A chunk's block goes to the session's journal (one appended line), every other
change replaces the session's file and takes the journal in (conformance/reference/sessions.py)."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.reference.sessions import Session, SessionStore

SID = "sess_" + "0" * 32


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def streamed(store: SessionStore, blocks: int) -> Session:
    """A session whose last message got ``blocks`` chunks after its first, as the agent
    stores them: the message saved whole, then each further block journaled."""
    session = Session(SID, "/work", 1)
    session.history.append({"type": "message", "kind": "user", "messageId": "u1",
                            "content": [text("hi")]})
    record = {"type": "message", "kind": "agent", "messageId": "m1", "content": [text("0")]}
    session.history.append(record)
    store.save(session)
    for i in range(1, blocks + 1):
        record["content"].append(text(str(i)))
        store.save_block(session, record)
    return session


def test_a_fresh_store_loads_every_journaled_block(tmp_path: Path) -> None:
    session = streamed(SessionStore(str(tmp_path)), 5)
    journal = tmp_path / f"{SID}.journal"
    assert len(journal.read_bytes().splitlines()) == 5  # the file was not replaced per chunk
    loaded = SessionStore(str(tmp_path)).load(SID)
    assert loaded is not None
    assert loaded.history == session.history
    assert loaded.updated_at == session.updated_at


def test_a_whole_save_takes_the_journal_in(tmp_path: Path) -> None:
    store = SessionStore(str(tmp_path))
    session = streamed(store, 3)
    session.history.append({"type": "message", "kind": "user", "messageId": "u2",
                            "content": [text("again")]})
    store.save(session)
    assert not (tmp_path / f"{SID}.journal").exists()
    on_disk = json.loads((tmp_path / f"{SID}.json").read_text(encoding="utf-8"))
    assert on_disk["history"] == session.history
    assert [s.session_id for s in store.all()] == [SID]  # the journal is no session


def test_a_block_not_in_the_last_record_saves_the_whole_session(tmp_path: Path) -> None:
    store = SessionStore(str(tmp_path))
    session = streamed(store, 1)
    first = session.history[0]
    first["content"].append(text("late"))
    store.save_block(session, first)
    assert not (tmp_path / f"{SID}.journal").exists()
    loaded = store.load(SID)
    assert loaded is not None and loaded.history == session.history


def test_a_journal_line_the_file_holds_is_not_added_twice(tmp_path: Path) -> None:
    """The agent ended between replacing the file and removing the journal: the file has
    the journal's blocks already, and loading adds none of them again."""
    store = SessionStore(str(tmp_path))
    session = streamed(store, 2)
    journal = (tmp_path / f"{SID}.journal").read_bytes()
    store.save(session)
    (tmp_path / f"{SID}.journal").write_bytes(journal)
    loaded = store.load(SID)
    assert loaded is not None and loaded.history == session.history


def test_a_line_cut_short_is_left_out(tmp_path: Path) -> None:
    store = SessionStore(str(tmp_path))
    session = streamed(store, 3)
    journal = tmp_path / f"{SID}.journal"
    journal.write_bytes(journal.read_bytes()[:-10])  # the last line, cut mid-write
    loaded = store.load(SID)
    assert loaded is not None
    assert [b["text"] for b in loaded.history[-1]["content"]] == ["0", "1", "2"]
    assert session.history[-1]["content"][-1] == text("3")
