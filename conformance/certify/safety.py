"""Opening a bundle someone sent: a folder or a ``.tar.gz``, read without trusting it.

A tar is read member by member and only regular files and folders are written, each
under the target folder by a name checked first: no absolute name, no ``..``, no link
of either kind, no device or FIFO, no name twice, no file past :data:`MAX_FILE` and no
archive past :data:`MAX_TOTAL` or :data:`MAX_MEMBERS`. A folder is read the same way: a
link or a special file in it is refused. Each refusal is a :class:`BundleError` (one
line, exit 2) and nothing is written outside the folder given.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zlib
from pathlib import Path, PurePosixPath

from conformance.certify.bundle import BundleError

MAX_FILE = 256 * 1024 * 1024  # one transcript of a long run is a few MiB
MAX_TOTAL = 1024 * 1024 * 1024
MAX_MEMBERS = 100_000
_KINDS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link",
          tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
          tarfile.FIFOTYPE: "a FIFO", tarfile.CONTTYPE: "a contiguous file"}


def member_path(name: str, where: str) -> PurePosixPath:
    """A member's name as a relative path inside the bundle, or a BundleError."""
    if not name or "\x00" in name:
        raise BundleError(f"{where}: a member with an empty name")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise BundleError(f"{where}: member {name!r} has an absolute path")
    path = PurePosixPath(name.replace("\\", "/"))
    if ".." in path.parts:
        raise BundleError(f"{where}: member {name!r} climbs out of the bundle (..)")
    return path


def extract(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` (a tar, gzip-compressed or not) into the empty folder ``dest``."""
    total = members = 0
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for m in tar:
                members += 1
                if members > MAX_MEMBERS:
                    raise BundleError(f"{archive}: more than {MAX_MEMBERS} members")
                rel = member_path(m.name, str(archive))
                if not (m.isreg() or m.isdir()):
                    kind = _KINDS.get(m.type, f"a member of type {m.type!r}")
                    raise BundleError(f"{archive}: member {m.name!r} is {kind}; a bundle holds "
                                      "only files and folders")
                target = dest.joinpath(*rel.parts) if rel.parts and rel.parts != (".",) \
                    else dest
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if m.size > MAX_FILE:
                    raise BundleError(f"{archive}: member {m.name!r} is {m.size} bytes, over "
                                      f"the {MAX_FILE} a bundle file may have")
                total += m.size
                if total > MAX_TOTAL:
                    raise BundleError(f"{archive}: more than {MAX_TOTAL} bytes unpacked")
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.resolve().is_relative_to(dest.resolve()):
                    raise BundleError(f"{archive}: member {m.name!r} lands outside the bundle")
                src = tar.extractfile(m)
                if src is None:
                    raise BundleError(f"{archive}: member {m.name!r} cannot be read")
                try:
                    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                                 | getattr(os, "O_NOFOLLOW", 0), 0o644)
                except FileExistsError:
                    raise BundleError(f"{archive}: member {m.name!r} appears twice") from None
                with os.fdopen(fd, "wb") as out:
                    while block := src.read(1 << 20):
                        out.write(block)
    except BundleError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise BundleError(f"{archive}: not a readable bundle archive (truncated or not a "
                          f".tar.gz: {why})") from None


def check_tree(folder: Path) -> None:
    """A bundle folder holds regular files and folders only, each within the limits."""
    total = 0
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(root) / name
            st = os.lstat(path)
            rel = path.relative_to(folder)
            if stat.S_ISLNK(st.st_mode):
                raise BundleError(f"{folder}: {rel} is a symbolic link; a bundle holds only "
                                  "files and folders")
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise BundleError(f"{folder}: {rel} is not a regular file")
            if st.st_size > MAX_FILE:
                raise BundleError(f"{folder}: {rel} is {st.st_size} bytes, over the {MAX_FILE} "
                                  "a bundle file may have")
            total += st.st_size
            if total > MAX_TOTAL:
                raise BundleError(f"{folder}: more than {MAX_TOTAL} bytes")


def bundle_root(folder: Path, manifest: str) -> Path:
    """The folder holding the manifest: ``folder`` itself or its one top folder."""
    if (folder / manifest).is_file():
        return folder
    inner = [p for p in folder.iterdir()]
    if len(inner) == 1 and inner[0].is_dir() and (inner[0] / manifest).is_file():
        return inner[0]
    raise BundleError(f"not an acp-conformance bundle: no {manifest}")
