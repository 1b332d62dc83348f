"""Transcripts edited by hand, cut or corrupted: `check` gives a verdict or one line.

A transcript is the suite's own file, but users keep them, trim them, mask them by
hand and attach them to bug reports, and another tool may write one. Whatever a
file holds, `check` ends with a verdict (exit 0 or 1) or a one-line error naming the
file and line (exit 2), never an internal error (exit 3). The edits are seeded, so a
failure names a seed that rebuilds its file: changed values anywhere in the header,
in the harness events' data and in the messages (a number where a string was, an
object for a method, a list for a role), entries dropped or doubled.

The graders meet what a target sends in the same way: a message of any shape, in
any place, grades without raising (`grade_recorded` on both versions, strict or not).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance import transcript as tmod
from conformance.checks import grade
from conformance.cli import main
from conformance.grading import grade_recorded

sys.path.insert(0, str(Path(__file__).resolve().parent))
from random_transcripts import random_entries  # noqa: E402  (a test helper beside this file)
from replay_transcripts import replay_entries  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FILES = sorted(p for p in (REPO / "fixtures").rglob("*.jsonl")
               if tmod.read_header(p).get("side") != "agent")

ATOMS: list[Any] = [None, 0, -1, 2, 2**70, 1.5, "", "x", "msg_1", "2.0", True, "\u0000",
                    "session/update", "session/prompt", "session/load", "initialize",
                    "agent_message_chunk", "user_message_chunk", "user_message", "tool_call",
                    "state_update", "idle", "end_turn", "text"]
KEYS = ["messageId", "sessionId", "id", "method", "params", "update", "sessionUpdate",
        "content", "result", "error", "jsonrpc", "protocolVersion", "_meta", "stopReason",
        "text", "type", "prompt", "state", "role", "protocol", "returncode", "signal",
        "kinds", "shown", "render", "scope", "ended", "rules", "profile", "reason"]


def value(rnd: random.Random, depth: int = 0) -> Any:
    r = rnd.random()
    if depth < 2 and r < 0.15:
        return [value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    if depth < 2 and r < 0.3:
        return {rnd.choice(KEYS): value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))}
    return rnd.choice(ATOMS)


def edit(o: Any, rnd: random.Random) -> None:
    """One change somewhere inside ``o`` (an object or array): a value replaced, a key
    added or removed."""
    if isinstance(o, dict):
        r = rnd.random()
        if not o or r < 0.2:
            o[rnd.choice(KEYS)] = value(rnd)
            return
        k = rnd.choice(list(o))
        if r < 0.45 or not isinstance(o[k], (dict, list)) or not o[k]:
            o[k] = value(rnd)
        elif r < 0.55:
            del o[k]
        else:
            edit(o[k], rnd)
    elif isinstance(o, list):
        if not o or rnd.random() < 0.2:
            o.append(value(rnd))
            return
        i = rnd.randrange(len(o))
        if isinstance(o[i], (dict, list)) and o[i] and rnd.random() < 0.6:
            edit(o[i], rnd)
        else:
            o[i] = value(rnd)


def edited_file(seed: int, folder: Path) -> Path:
    """A fixture transcript with one to four edits, written to ``folder``."""
    rnd = random.Random(seed)
    source = rnd.choice(FILES)
    rows = [json.loads(line) for line in source.read_text("utf-8").splitlines()]
    header, entries = rows[0], rows[1:]
    for _ in range(rnd.randint(1, 4)):
        r = rnd.random()
        harness = [e for e in entries if e.get("stream") == "harness"]
        if r < 0.15 and entries:  # an entry dropped or doubled, the rest renumbered
            i = rnd.randrange(len(entries))
            entries[i:i + 1] = [] if rnd.random() < 0.5 else [entries[i], dict(entries[i])]
            for n, e in enumerate(entries):
                e["seq"] = n
        elif r < 0.35:
            edit(header, rnd)
        elif r < 0.55 and harness:
            e = rnd.choice(harness)
            edit(e["data"] if isinstance(e.get("data"), dict) and rnd.random() < 0.8 else e, rnd)
        elif entries:
            e = rnd.choice(entries)
            if isinstance(e.get("msg"), (dict, list)) and rnd.random() < 0.8:
                edit(e["msg"], rnd)
                e["raw"] = json.dumps(e["msg"], separators=(",", ":"))
            else:
                edit(e, rnd)
    path = folder / f"edited-{seed}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in [header, *entries]), "utf-8")
    return path


@pytest.mark.parametrize("block", range(4))
def test_check_of_an_edited_transcript_is_a_verdict_or_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], block: int) -> None:
    errors = 0
    for seed in range(block * 100, block * 100 + 100):
        path = edited_file(seed, tmp_path)
        status = main(["check", str(path), "--json", str(tmp_path / "report.json"),
                       "--no-color"])
        out, err = capsys.readouterr()
        assert status in (0, 1, 2), f"seed {seed}: exit {status}\n{err}"
        assert "Traceback" not in err, f"seed {seed}: {err}"  # (a target's may be evidence)
        if status == 2:
            errors += 1
            assert err.startswith(f"acp-conformance: error: {path}"), f"seed {seed}: {err}"
            assert err.count("\n") == 1, f"seed {seed}: not one line: {err!r}"
        else:
            assert "verdict:" in out, f"seed {seed}: {out}"
    assert 0 < errors < 100  # the edits reach both: files read, and files refused


def _entries(rnd: random.Random, seed: int) -> tuple[dict[str, Any], list[tmod.Entry]]:
    r = rnd.random()
    if r < 0.3:
        header, entries = tmod.load(rnd.choice(FILES))
        return header, entries
    protocol = rnd.choice((1, 2))
    entries = random_entries(seed, protocol) if r < 0.65 else replay_entries(seed, protocol)
    return {"role": "agent", "protocol": protocol}, entries


@pytest.mark.parametrize("block", range(3))
def test_a_message_of_any_shape_grades_without_raising(block: int) -> None:
    """Messages changed anywhere (the framing, the method, the IDs, a whole message
    replaced by another value, another line's message in its place): every rule of the
    role still gets its row, on both versions, strict or not."""
    for seed in range(block * 100, block * 100 + 100):
        rnd = random.Random(seed)
        header, entries = _entries(rnd, seed)
        entries = [tmod.Entry(**{k: getattr(e, k) for k in e.__slots__}) for e in entries]
        lines = [i for i, e in enumerate(entries) if e.msg is not None]
        for _ in range(rnd.randint(1, 6)):
            e = entries[rnd.choice(lines)]
            msg = json.loads(json.dumps(e.msg))
            if rnd.random() < 0.1:
                msg = value(rnd)
            else:
                edit(msg, rnd)
            e.msg, e.raw = msg, json.dumps(msg, separators=(",", ":"))
        if rnd.random() < 0.2:  # another line's message in its place
            i, j = rnd.sample(lines, 2)
            entries[i].msg, entries[i].raw = entries[j].msg, entries[j].raw
        role = header.get("role", "agent")
        every = {f.requirement for f in grade([], protocol=1, role=role)}
        for protocol in (1, 2):
            for strict in (False, True):
                found = grade_recorded(header, entries, protocol=protocol, strict=strict)
                assert every <= {f.requirement for f in found}, f"seed {seed}"


def test_a_request_whose_method_is_no_string_is_no_call() -> None:
    """A client line whose method is an object or an array (what an edit found: the
    ID-addressed rule looked it up in a table and raised): no call is read from it."""
    header, entries = tmod.load(REPO / "fixtures" / "regressions"
                                / "mid-v2-06-replay-duplicate-2d2e772865.jsonl")
    entries = list(entries)
    last = entries[-1]
    for n, method in enumerate(({"name": "session/prompt"}, ["session/prompt"])):
        msg = {"jsonrpc": "2.0", "id": 900 + n, "method": method,
               "params": {"sessionId": "s", "messageId": "m"}}
        entries.append(tmod.Entry(last.seq + 1 + n, last.t, 0, "client", "stdin",
                                  json.dumps(msg), None, msg))
    found = grade_recorded(header, entries, protocol=2)
    assert {f.requirement for f in found} >= {"MID-V2-16/unknown-id", "MID-V2-16/error-code"}
    assert not [f for f in found if f.requirement.startswith("MID-V2-16")
                and f.outcome.value == "fail"]


@pytest.mark.parametrize("options", [None, 5, "allow", {"optionId": "a"}])
def test_a_permission_request_whose_options_are_no_array_grades(options: Any) -> None:
    """The client's answer to a permission request whose options are null, a number, a
    string or an object (an edited client transcript): MID-C-08 grades it as a choice of
    none of them, where it used to iterate the value and raise."""
    header, entries = tmod.load(REPO / "fixtures" / "regressions"
                                / "mid-c-02-merged-772c8e90bc.jsonl")
    entries = list(entries)
    last = entries[-1]
    ask = {"jsonrpc": "2.0", "id": "perm-1", "method": "session/request_permission",
           "params": {"sessionId": "sess-1", "options": options}}
    answer = {"jsonrpc": "2.0", "id": "perm-1",
              "result": {"outcome": {"outcome": "selected", "optionId": "a"}}}
    for n, (src, stream, msg) in enumerate((("agent", "stdout", ask),
                                           ("client", "stdin", answer))):
        entries.append(tmod.Entry(last.seq + 1 + n, last.t, 0, src, stream,
                                  json.dumps(msg), None, msg))
    found = grade_recorded(header, entries, protocol=1)
    [fault] = [f for f in found if f.requirement == "MID-C-08/answers"
               and f.outcome.value == "fail"]
    assert "neither a selected offered option nor cancelled" in fault.message


@pytest.fixture(scope="module")
def a_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The JSON report of `check` over every fixture transcript."""
    folder = tmp_path_factory.mktemp("report")
    path = folder / "r.json"
    assert main(["check", *map(str, FILES), "--json", str(path), "-q"]) in (0, 1)
    return path


def test_report_of_an_edited_json_report_is_reports_or_one_line(
        a_report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`report --from` and `report --merge` of a JSON report edited anywhere (a list for a
    name, a boolean for the protocols, rows changed or dropped): reports, or one line."""
    base = json.loads(a_report.read_text("utf-8"))
    for seed in range(60):
        rnd = random.Random(seed)
        data = json.loads(json.dumps(base))
        for _ in range(rnd.randint(1, 4)):
            edit(data, rnd)
        edited = tmp_path / f"edited-{seed}.json"
        edited.write_text(json.dumps(data), "utf-8")
        for args in (["--from", str(edited), "--junit", str(tmp_path / "r.xml")],
                     ["--merge", str(edited), str(a_report)]):
            status = main(["report", *args, "--html", str(tmp_path / "r.html"),
                           "--markdown", str(tmp_path / "r.md")])
            out, err = capsys.readouterr()
            assert status in (0, 1, 2), f"seed {seed} {args[0]}: exit {status}\n{err}"
            assert "Traceback" not in err, f"seed {seed}: {err}"
            if status == 2:
                assert err.startswith("acp-conformance: error: ") and err.count("\n") == 1, err


def test_a_merged_report_whose_protocols_are_no_list_names_none(
        a_report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(a_report.read_text("utf-8"))
    protocols = list(data["protocols"])
    data["protocols"] = True  # what an edit found: the matrix iterated it and raised
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data), "utf-8")
    merged = tmp_path / "m.json"
    assert main(["report", "--merge", str(edited), str(a_report), "--json", str(merged)]) == 1
    capsys.readouterr()
    runs = json.loads(merged.read_text("utf-8"))["runs"]
    assert [r["protocols"] for r in runs] == [[], protocols]


def test_replay_of_an_edited_regression_file_is_a_verdict_or_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`replay` of a regression file whose header is edited (the recorded steps of an
    agent, the stream of a client, the profile, the protocol): FIXED or STILL FAILING
    against the fixture it names, or one line naming the file. The edits used to reach
    the stream's player, which raised on a step it did not know."""
    monkeypatch.chdir(REPO)  # the fixtures' target commands are relative to the repository
    regressions = sorted((REPO / "fixtures" / "regressions").glob("*.jsonl"))
    refused = 0
    for seed in range(40):
        rnd = random.Random(seed)
        rows = [json.loads(line) for line in rnd.choice(regressions).read_text(
            "utf-8").splitlines()]
        header = rows[0]
        for _ in range(rnd.randint(1, 3)):
            part = header.get("steps") or header.get("stream")
            edit(part if rnd.random() < 0.6 and part else header, rnd)
        path = tmp_path / f"edited-{seed}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), "utf-8")
        status = main(["replay", str(path), "--timeout", "10", "--out", str(tmp_path / "out")])
        out, err = capsys.readouterr()
        assert status in (0, 1, 2), f"seed {seed}: exit {status}\n{err}"
        assert "Traceback" not in err, f"seed {seed}: {err}"
        if status == 2:
            refused += 1
            assert err.startswith("acp-conformance: error: ") and err.count("\n") == 1, err
    assert 0 < refused < 40


def test_an_example_database_entry_this_version_cannot_play_is_skipped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shared example database (a folder, Redis, a CI artifact) may hold counterexamples
    another version of the suite wrote: a step or a stream step this one does not know, a
    turn without steps, a protocol it has not. They are skipped; `fuzz --client` used to
    end with an internal error on such a stream."""
    from conformance.fuzz.database import KEYS, counterexamples, open_directory

    db = open_directory(tmp_path / "db")
    agent_ok = {"protocol": 1, "steps": ["start", "new_session", {"prompt": {"text": "hi"}}]}
    client_ok = {"protocol": 1, "stream": {"steps": [{"agent": "hi", "id": "m1"}]}}
    for role, value in [("agent", agent_ok), ("agent", {"protocol": 1, "steps": ["dance"]}),
                        ("agent", {"protocol": 3, "steps": ["start"]}),
                        ("client", client_ok),
                        ("client", {"protocol": 1, "stream": {"steps": [{"sing": "x"}]}}),
                        ("client", {"protocol": 1, "stream": {"prompt": "no steps"}}),
                        ("client", {"protocol": 1, "stream": {"steps": [], "history": [7]}})]:
        db.save(KEYS[role], json.dumps(value).encode())
    assert counterexamples(db, "agent") == [agent_ok]
    assert counterexamples(db, "client") == [client_ok]
    monkeypatch.chdir(REPO)
    client = (f"{sys.executable} fixtures/clients/folds_earlier_turn_ids.py "
              "--agent-cmd {agent}")
    status = main(["fuzz", "--client", client, "--client-profile",
                   "fixtures/clients/reference.yaml", "--protocol", "1", "--no-save",
                   "--out", str(tmp_path / "out"), "--hypothesis-db", str(tmp_path / "db"),
                   "--max-examples", "1", "--seed", "1"])
    out, err = capsys.readouterr()
    assert status in (0, 1) and "Traceback" not in err, err
    assert "replayed 1 counterexample(s) from the example database" in out, out


def test_a_regression_file_naming_an_unknown_profile_is_refused_before_any_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two files, the second naming a profile this version does not know: one line naming
    that file, and nothing replayed (the first file's verdict was printed, then the run
    ended on the second with exit 2 and no file named)."""
    monkeypatch.chdir(REPO)
    source = REPO / "fixtures" / "regressions" / "mid-a-09-after-cancel-3f04d29577.jsonl"
    rows = source.read_text("utf-8").splitlines()
    header = json.loads(rows[0])
    good, bad = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    good.write_text("\n".join(rows) + "\n", "utf-8")
    bad.write_text("\n".join([json.dumps({**header, "profile": "acp-1999"}), *rows[1:]])
                   + "\n", "utf-8")
    status = main(["replay", str(good), str(bad), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert status == 2, (out, err)
    assert err == f"acp-conformance: error: {bad}:1: unknown profile 'acp-1999' (known: " \
        f"{err.split('(known: ', 1)[1]}", err
    assert "FIXED" not in out and "STILL FAILING" not in out, out
