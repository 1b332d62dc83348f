# long: the file format, its fast reader and its writer belong together: one format
"""Transcripts: the versioned JSONL record of every line on the wire.

Line 1 is a header object; every further line is one entry::

    {"format": "acp-conformance-transcript", "version": 1, "tool": "...",
     "role": "agent", "protocol": 1, "profile": "...", "target": "...", "case": "..."}
    {"seq": 0, "t": 0.0012, "conn": 0, "src": "client", "stream": "stdin",
     "raw": "{...}", "msg": {...}}

``src`` is who wrote the line: ``client``, ``agent`` or ``harness`` (events
such as a process start or exit, written by the suite). ``stream`` is the pipe
it travelled on. ``raw`` is the line exactly as received (decoded as UTF-8;
invalid bytes are kept as ``raw_b64`` instead). ``msg`` is the parsed JSON, or
``error`` says why it did not parse. ``fuzz: true`` marks what the suite sent
on purpose out of spec; ``truncated`` gives the original byte length of a line
that was capped. ``t`` is seconds since the transcript began (monotonic).

A transcript built with a :class:`~conformance.masking.Masker` masks every line
and harness event as it is recorded (before anything parses it, so the suite
acts on and grades exactly what the file holds) and its header as it is
written; the header's ``masking`` says so, with the number of values masked.

Checkers read entries only; they never see processes.

Over 400 lines, kept whole on purpose: this module is the file format, and
the entry, the header, the writer's escaping and the two readers (the plain one
and the fast path for message lines, which must give the same entries) have to
agree on every field; in one module a change to the format is one change.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from conformance import TOOL_NAME, __version__
from conformance.masking import NO_MASK, Masker
from conformance.model import json_type, with_article

FORMAT = "acp-conformance-transcript"
FORMAT_VERSION = 1

MAX_FILE_LINE = 256 * 1024 * 1024  # a 16 MiB wire line stays far below this once escaped
SOURCES = ("client", "agent", "harness")
STREAMS = ("stdin", "stdout", "stderr", "harness")


class TranscriptError(Exception):
    """A transcript file that cannot be read: carries a one-line reason with file:line."""


@dataclass(slots=True)
class Entry:
    seq: int
    t: float
    conn: int
    src: str
    stream: str
    raw: str | None = None
    raw_b64: str | None = None
    msg: Any = None
    error: str | None = None
    fuzz: bool = False
    truncated: int | None = None
    event: str | None = None  # harness events: "start", "exit", "timeout", "note", "probe"
    data: Any = None  # harness event payload

    @property
    def is_message(self) -> bool:
        return self.stream in ("stdin", "stdout") and self.error is None and self.raw is not None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"seq": self.seq, "t": round(self.t, 6), "conn": self.conn,
                             "src": self.src, "stream": self.stream}
        if self.event is not None:
            d["event"] = self.event
        if self.data is not None:
            d["data"] = self.data
        if self.raw is not None:
            d["raw"] = self.raw
        if self.raw_b64 is not None:
            d["raw_b64"] = self.raw_b64
        if self.is_message:
            d["msg"] = self.msg
        if self.error is not None:
            d["error"] = self.error
        if self.fuzz:
            d["fuzz"] = True
        if self.truncated is not None:
            d["truncated"] = self.truncated
        return d

    @classmethod
    def from_json(cls, d: Any, where: str) -> Entry:
        if not isinstance(d, dict):
            raise TranscriptError(f"{where}: entry is not a JSON object")
        try:
            seq, t, conn, src, stream = d["seq"], d["t"], d["conn"], d["src"], d["stream"]
        except KeyError as exc:
            raise TranscriptError(f"{where}: entry lacks required key {exc.args[0]!r}") from None
        if not isinstance(seq, int) or not isinstance(conn, int) or not isinstance(t, (int, float)):
            raise TranscriptError(f"{where}: seq, conn must be integers and t a number")
        if src not in SOURCES or stream not in STREAMS:
            raise TranscriptError(f"{where}: unknown src {src!r} or stream {stream!r}")
        for key in ("raw", "raw_b64", "error", "event"):
            if not isinstance(d.get(key, ""), str):
                raise TranscriptError(f"{where}: {key!r} must be a string")
        if not isinstance(d.get("truncated", 0), int) or not isinstance(d.get("fuzz", False),
                                                                         bool):
            raise TranscriptError(f"{where}: 'truncated' must be an integer and 'fuzz' a boolean")
        data = d.get("data")
        if data is not None:
            problem = _data_problem(data)
            if problem:
                raise TranscriptError(f"{where}: harness event data {problem} (is the file "
                                      "edited?)")
        return cls(seq=seq, t=float(t), conn=conn, src=src, stream=stream,
                   raw=d.get("raw"), raw_b64=d.get("raw_b64"), msg=d.get("msg"),
                   error=d.get("error"), fuzz=bool(d.get("fuzz", False)),
                   truncated=d.get("truncated"), event=d.get("event"), data=d.get("data"))


# The fields of a harness event's data that the checkers take as they are (the rest they
# read with care): each, when present and not null, of this type; a list's items strings
# where the field is in LIST_OF_STRINGS.
HARNESS_DATA_TYPES: dict[str, type] = {
    "protocol": int, "returncode": int, "kinds": list, "shown": list,
}  # ("signal" is a number or a name, and read as either)
LIST_OF_STRINGS = frozenset({"kinds"})


def _data_problem(data: Any) -> str | None:
    """What is wrong with a harness event's ``data`` (see HARNESS_DATA_TYPES), or None."""
    if type(data) is not dict:
        return f"must be an object, not {with_article(json_type(data))}"
    for key, kind in HARNESS_DATA_TYPES.items():
        value = data.get(key)
        if value is None:
            continue
        if type(value) is not kind:
            return f"{key!r} {_must_be(kind, value)}"
        if key in LIST_OF_STRINGS and isinstance(value, list) and not all(
                type(v) is str for v in value):
            return f"{key!r} must be an array of strings"
    return None


def _must_be(kind: type, value: Any) -> str:
    """What a reader says of a field of the wrong type: 'must be an integer, not a string'."""
    wanted = {int: "an integer", str: "a string", list: "an array"}[kind]
    return f"must be {wanted}, not {with_article(json_type(value))}"


def decode_line(raw: bytes) -> tuple[str | None, str | None, Any, str | None]:
    """Bytes of one line (without the newline) -> (raw, raw_b64, msg, error).

    Never unescapes before parsing (MID-S-06): the JSON text is parsed as is.
    """
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        lo = max(0, exc.start - 16)
        around = raw[lo:exc.start + 16]
        return (None, base64.b64encode(raw).decode("ascii"), None,
                f"invalid UTF-8 at byte {exc.start} (bytes {lo}..{lo + len(around)}: {around!r})")
    try:
        return text, None, json.loads(text), None
    except json.JSONDecodeError as exc:
        return text, None, None, f"not JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return text, None, None, "not JSON: nesting too deep"


class Transcript:
    """An in-memory transcript that the transport appends to from several threads."""

    def __init__(self, header: dict[str, Any] | None = None, *,
                 masker: Masker | None = None) -> None:
        self.header: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION,
                                       "tool": f"{TOOL_NAME} {__version__}"}
        if masker is not None:
            self.header["masking"] = masker.header()
        if header:
            self.header.update(header)
        self.masker = masker or NO_MASK
        self.entries: list[Entry] = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()

    def _next(self) -> tuple[int, float]:
        return len(self.entries), time.monotonic() - self._t0

    def add(self, conn: int, src: str, stream: str, line: bytes | None = None, *,
            fuzz: bool = False, truncated: int | None = None, event: str | None = None,
            data: Any = None, record: bool = True) -> Entry:
        """Decode ``line`` and append it as the next entry.

        ``record=False`` decodes without appending (seq -1): the transport uses it
        for lines read after its recording budget is spent, so the driver still
        sees them while memory stays bounded.
        """
        raw = raw_b64 = msg = error = None
        if self.masker:
            line = None if line is None else self.masker.bytes(line)
            data = self.masker.data(data)
        if line is not None:
            if stream == "stderr":
                raw = line.decode("utf-8", errors="replace")
            else:
                raw, raw_b64, msg, error = decode_line(line)
        if not record:
            return Entry(-1, time.monotonic() - self._t0, conn, src, stream, raw, raw_b64, msg,
                         error, fuzz, truncated, event, data)
        with self._lock:
            seq, t = self._next()
            entry = Entry(seq, t, conn, src, stream, raw, raw_b64, msg, error, fuzz,
                          truncated, event, data)
            self.entries.append(entry)
        return entry

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self.entries))

    def __len__(self) -> int:
        return len(self.entries)

    def save(self, path: Path) -> None:
        write_atomic(path, self.dumps())

    def dumps(self) -> str:
        lines = [json.dumps(self.masker.data(self.header), ensure_ascii=False)]
        with self._lock:
            entries = list(self.entries)
        lines.extend(json.dumps(e.to_json(), ensure_ascii=False) for e in entries)
        # Characters some line splitters take for a line end (str.splitlines does) are
        # written as escapes, so one entry is always one line of the file.
        return "\n".join(lines).translate(_LINE_BREAKS) + "\n"


_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def write_atomic(path: Path, text: str) -> None:
    """Write a file so a crash leaves the old file or the complete new one, never a torn one.

    The file is always valid UTF-8: a lone surrogate (a target may send ``"\\ud800"``
    in a JSON string) is written as the escape ``\\ud800``, which is what it was on
    the wire, so JSON and JSONL files stay valid and load back the same.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # the new file keeps the old one's mode, or gets what the umask gives a new file
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        mask = os.umask(0o22)
        os.umask(mask)
        mode = 0o666 & ~mask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def jsonl_files(paths: Iterable[Path], missing: Callable[[Path], Exception]) -> list[Path]:
    """The files named, and the ``*.jsonl`` files of the folders named (sorted); a path
    that does not exist raises ``missing(path)``."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.glob("*.jsonl")))
        elif p.exists():
            out.append(p)
        else:
            raise missing(p)
    return out


def read_header(path: Path) -> dict[str, Any]:
    with open_transcript(path) as fh:
        first = _text(fh.readline(MAX_FILE_LINE), path, 1)
    return _parse_header(first, path)


def _parse_header(first: str, path: Path) -> dict[str, Any]:
    if not first.strip():
        raise TranscriptError(f"{path}:1: empty file, expected a transcript header")
    try:
        header = json.loads(first)
    except json.JSONDecodeError as exc:
        raise TranscriptError(f"{path}:1: header is not JSON ({exc.msg})") from None
    except RecursionError:
        raise TranscriptError(f"{path}:1: header is nested too deeply") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TranscriptError(f"{path}:1: not an {FORMAT} file (header 'format' missing)")
    if header.get("version") != FORMAT_VERSION:
        raise TranscriptError(
            f"{path}:1: transcript format version {header.get('version')!r} is not supported "
            f"(this tool reads version {FORMAT_VERSION})")
    for key, (kind, nullable) in HEADER_TYPES.items():
        value = header.get(key)
        if key in header and type(value) is not kind and not (nullable and value is None):
            raise TranscriptError(
                f"{path}:1: header {key!r} {_must_be(kind, value)} (is the header edited?)")
    return header


# The header's fields that the readers take as they are (the rest they read with care):
# each, when present, of this type (an integer is no boolean), or null where allowed.
HEADER_TYPES: dict[str, tuple[type, bool]] = {
    "role": (str, False), "protocol": (int, False), "agent_protocol": (int, True),
    "side": (str, True), "agent_side": (str, True), "client_side": (str, True),
    "requirements": (list, True),
}


READ_BUFFER = 1 << 20  # bytes read at a time: the default 8 KB costs a read call every dozen lines


def open_transcript(path: Path) -> Any:
    """The file in binary mode: each line is decoded on its own, so errors name their line."""
    try:
        return open(path, "rb", buffering=READ_BUFFER)
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read transcript: {exc.strerror}") from None


def _text(line: bytes, path: Path, lineno: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{path}:{lineno}: not UTF-8 (byte {exc.start} of the line); "
                              "is this a transcript?") from None


def iter_entries(path: Path) -> tuple[dict[str, Any], Iterator[Entry]]:
    """Stream a transcript file: the header now, entries lazily (memory stays flat)."""
    fh = open_transcript(path)
    try:
        header = _parse_header(_text(fh.readline(MAX_FILE_LINE), path, 1), path)
    except BaseException:
        fh.close()
        raise

    def gen() -> Iterator[Entry]:
        readline = fh.readline
        _message_entry = _message_reader()
        with fh:
            lineno = 1
            expect = 0
            while raw := readline(MAX_FILE_LINE + 1):
                lineno += 1
                if len(raw) > MAX_FILE_LINE:
                    raise TranscriptError(f"{path}:{lineno}: line longer than {MAX_FILE_LINE} "
                                          "bytes; not a transcript this tool wrote")
                # Hot path: a one-line message entry as this tool writes it, built without
                # the general validation; anything else takes the general path below.
                entry = _message_entry(raw)
                if entry is not None and entry.seq == expect:
                    expect += 1
                    yield entry
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    line = _text(raw, path, lineno)  # raises with the line and byte
                if not line.strip():
                    continue
                if not line.endswith("\n"):
                    raise TranscriptError(f"{path}:{lineno}: truncated last line")
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TranscriptError(
                        f"{path}:{lineno}: entry is not JSON ({exc.msg})") from None
                except RecursionError:
                    raise TranscriptError(f"{path}:{lineno}: entry is nested too deeply") from None
                entry = Entry.from_json(d, f"{path}:{lineno}")
                if entry.seq != expect:
                    raise TranscriptError(
                        f"{path}:{lineno}: sequence number {entry.seq}, expected {expect}")
                expect += 1
                yield entry

    return header, gen()


class EntryFile(Sequence[Entry]):
    """A transcript file's entries, read from the file again on each pass: grading streams
    them, so no entry outlives its line (a million updates held as entries take gigabytes).
    Indexing or ``len`` (what few readers need, e.g. to fold a fault's consequences) reads
    them into a list once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._list: list[Entry] | None = None

    def __iter__(self) -> Iterator[Entry]:
        if self._list is not None:
            return iter(self._list)
        return iter_entries(self.path)[1]

    def _all(self) -> list[Entry]:
        if self._list is None:
            self._list = list(iter_entries(self.path)[1])
        return self._list

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]


_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # json.loads minus its wrapper calls; untyped in typeshed
_SOURCE_SET = frozenset(SOURCES)
_MESSAGE_STREAMS = frozenset(("stdin", "stdout"))


def _message_reader() -> Callable[[bytes], Entry | None]:
    """The entry of a plain message line (seq, t, conn, src, stream, raw, msg), or None.

    Takes the line's bytes, newline included. Gives exactly what ``json.loads`` and
    :meth:`Entry.from_json` give for such a line; None sends any other line (or a
    doubtful one) to the general path. It parses with msgspec's C JSON decoder when
    that is installed (about three times as fast as ``json.loads``), which gives what
    ``json.loads`` gives (integers of any size too) or refuses: NaN, infinities and
    lone surrogates, which ``json.loads`` takes, are refused, so such a line takes
    the general path. It reads the bytes as they are (a line that is not UTF-8 is
    refused too: JSON allows other bytes only in strings, and msgspec checks those),
    so a message line is not decoded to a string first.
    """
    try:
        fast = _fast_decoder()
    except ImportError:  # the dependency is optional at run time: the standard scanner
        fast = None
    if fast is not None:
        def typed_entry(line: bytes) -> Entry | None:
            if line[:1] != b"{" or line[-1:] != b"\n":
                return None
            try:  # the field types and the src and stream values are checked in C
                d = fast(line)
            except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
                return None
            # (one string per ID: the timeline shares them, on the lines it reads whole)
            return Entry(d.seq, d.t, d.conn, d.src, d.stream, d.raw, None, d.msg)

        return typed_entry
    decode = _scan_whole
    sources, streams = _SOURCE_SET, _MESSAGE_STREAMS

    def message_entry(raw: bytes) -> Entry | None:
        if raw[:1] != b"{" or raw[-1:] != b"\n":
            return None
        try:
            d = decode(raw.decode("utf-8"))
        except (ValueError, RecursionError, StopIteration):  # UnicodeDecodeError too
            return None
        if type(d) is not dict or len(d) != 7:
            return None
        try:
            seq, t, conn, src, stream = d["seq"], d["t"], d["conn"], d["src"], d["stream"]
            line, msg = d["raw"], d["msg"]
        except KeyError:
            return None
        if (type(seq) is not int or type(conn) is not int or type(t) is not float
                or type(line) is not str or type(src) is not str or src not in sources
                or type(stream) is not str or stream not in streams):
            return None
        return Entry(seq, t, conn, src, stream, line, None, msg)

    return message_entry


@functools.cache
def _fast_decoder() -> Callable[[bytes], Any]:
    """msgspec's decoder of exactly a plain message line: these seven keys, no other, each
    of its type (an integer ``t`` is read as a float, as Entry.from_json does)."""
    import msgspec

    class Line(msgspec.Struct, forbid_unknown_fields=True):
        seq: int
        t: float
        conn: int
        src: Literal["client", "agent", "harness"]
        stream: Literal["stdin", "stdout"]
        raw: str
        msg: Any

    return msgspec.json.Decoder(Line).decode


def _scan_whole(line: str) -> Any:
    """``json.loads`` of a line ending in a newline, minus its wrapper calls."""
    d, end = _scan(line, 0)
    if end != len(line) - 1:
        raise ValueError("more after the JSON value")
    return d


def load(path: Path) -> tuple[dict[str, Any], list[Entry]]:
    header, entries = iter_entries(path)
    return header, list(entries)


def from_entries(header: dict[str, Any], entries: Iterable[Entry]) -> Transcript:
    t = Transcript(header)
    t.entries = list(entries)
    return t
