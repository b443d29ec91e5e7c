"""Safe extraction of a code bundle's archive (a tar, plain or gzip-compressed) into an empty folder.

The archive is untrusted: every member is checked before a byte of it is written, and only regular files and
folders are made, by this module's own code rather than tarfile's extract, so that nothing can land outside
the folder. Refused: absolute paths, `..`, links of any kind, devices, fifos, sparse files, a path given
twice, more members than `max_files`, more file bytes than `max_unpacked_bytes`.

Sizes are read from each member's header, so a gzip bomb is refused before its bytes are inflated. Headers
themselves (pax records, GNU long names) are read by tarfile into memory whole, so the stream under tarfile
lets through at most HEADER_ALLOWANCE bytes beyond the file data it has been told of.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

GZIP_MAGIC = b"\x1f\x8b"
# More than any real header needs (a pax record with a 4 KiB path is under 5 KiB), little enough to hold.
HEADER_ALLOWANCE = 1 << 20
# The files a bundle's row lists; file_count counts them all.
FILES_LISTED = 1000
COPY_CHUNK = 1 << 20
FILE_MODE, EXEC_MODE, DIR_MODE = 0o444, 0o555, 0o555
# Errors of a path inside the archive (a file where a folder should be, a name too long), not of the disk.
_PATH_ERRNOS = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG})


class UnsafeArchive(Exception):
    """The archive was refused; the message names the member and what to change."""


@dataclass(frozen=True)
class Limits:
    max_unpacked_bytes: int
    max_files: int


@dataclass
class Manifest:
    unpacked_bytes: int = 0
    file_count: int = 0
    files: list[dict[str, int | str]] = field(default_factory=list)  # {path, size}, the first FILES_LISTED


def is_gzip(path: Path) -> bool:
    with path.open("rb") as head:
        return head.read(2) == GZIP_MAGIC


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _MeteredStream:
    """The archive's bytes as tarfile reads them, refused past `allowed`: the unpacker raises `allowed` by
    each file's size as it takes the file in, so only headers can use the rest, HEADER_ALLOWANCE at most."""

    def __init__(self, raw: _Readable) -> None:
        self.raw = raw
        self.consumed = 0
        self.allowed = HEADER_ALLOWANCE

    def read(self, size: int = -1) -> bytes:
        room = self.allowed - self.consumed + 1  # one byte past the allowance shows that it was passed
        data = self.raw.read(room if size < 0 else min(size, room))
        self.consumed += len(data)
        if self.consumed > self.allowed:
            raise UnsafeArchive(
                f"the archive holds a tar header or metadata record over {HEADER_ALLOWANCE} bytes; pack the "
                "folder with `trainyard code push DIR`, or with plain `tar` and no extended attributes"
            )
        return data


def _relative(member: tarfile.TarInfo) -> PurePosixPath:
    path = PurePosixPath(member.name)
    if path.is_absolute():
        raise UnsafeArchive(f"{member.name!r} is an absolute path; pack paths relative to the bundle's top")
    if ".." in path.parts:
        raise UnsafeArchive(f"{member.name!r} climbs out of the bundle with '..'; pack the folder itself")
    return path


def _kind(member: tarfile.TarInfo) -> str | None:
    """What a member is, when it is something a bundle may not hold; None for a file or a folder."""
    if member.issym():
        return f"a symbolic link to {member.linkname!r}"
    if member.islnk():
        return f"a hard link to {member.linkname!r}"
    if member.ischr() or member.isblk():
        return "a device file"
    if member.isfifo():
        return "a fifo"
    if member.issparse():
        return "a sparse file"
    return None if member.isreg() or member.isdir() else f"of tar type {member.type!r}"


def _write_file(source: IO[bytes], target: Path, executable: bool) -> None:
    # O_EXCL: a path the archive names twice is refused rather than overwritten; O_NOFOLLOW for good measure,
    # as no link is ever made in the folder.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(target, flags, 0o600), "wb") as out:
        shutil.copyfileobj(source, out, COPY_CHUNK)
    target.chmod(EXEC_MODE if executable else FILE_MODE)


def _take(tar: tarfile.TarFile, member: tarfile.TarInfo, into: Path, manifest: Manifest) -> None:
    path = _relative(member)
    if not path.parts:  # the archive's top folder, "./"
        return
    target = into.joinpath(*path.parts)
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    assert source is not None  # a regular file always has a reader
    _write_file(source, target, executable=bool(member.mode & 0o111))
    manifest.file_count += 1
    if len(manifest.files) < FILES_LISTED:
        manifest.files.append({"path": str(path), "size": member.size})


def _check(member: tarfile.TarInfo, size: int, members: int, manifest: Manifest, limits: Limits) -> None:
    if (kind := _kind(member)) is not None:
        raise UnsafeArchive(f"{member.name!r} is {kind}; a bundle holds only files and folders")
    if members > limits.max_files:
        raise UnsafeArchive(
            f"the archive holds more than {limits.max_files} files and folders "
            f"(TRAINYARD_CODE_MAX_FILES); leave data and outputs out with .trainyardignore"
        )
    if manifest.unpacked_bytes + size > limits.max_unpacked_bytes:
        raise UnsafeArchive(
            f"the archive unpacks to more than {limits.max_unpacked_bytes} bytes "
            f"(TRAINYARD_CODE_MAX_UNPACKED_BYTES; {member.name!r} alone is {size}); leave data and "
            "weights out with .trainyardignore and read them from TRAINYARD_DATA_DIR"
        )


def _unpack_stream(stream: _MeteredStream, into: Path, limits: Limits) -> Manifest:
    manifest = Manifest()
    # Stream mode ("r|"): tarfile reads forward only, through the metered stream and nothing else.
    with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
        for members, member in enumerate(tar, start=1):
            size = member.size if member.isreg() else 0
            _check(member, size, members, manifest, limits)
            manifest.unpacked_bytes += size
            stream.allowed = stream.consumed + tarfile.BLOCKSIZE * -(-size // tarfile.BLOCKSIZE)
            stream.allowed += HEADER_ALLOWANCE
            try:
                _take(tar, member, into, manifest)
            except OSError as exc:
                if exc.errno not in _PATH_ERRNOS:
                    raise  # the disk's own trouble (full, read-only), not the archive's
                message = f"{member.name!r} cannot be unpacked ({exc.strerror}): rename it"
                raise UnsafeArchive(message) from exc
    if manifest.file_count == 0:
        raise UnsafeArchive("the archive holds no files; push a folder with your modules in it")
    return manifest


def unpack(archive: Path, into: Path, limits: Limits) -> Manifest:
    """Unpacks `archive` into the empty folder `into`, leaving every file and folder read-only, or raises
    UnsafeArchive; what it wrote before a refusal is left for the caller to remove with `into`."""
    with archive.open("rb") as raw:
        source: _Readable = gzip.GzipFile(fileobj=raw, mode="rb") if is_gzip(archive) else raw
        try:
            manifest = _unpack_stream(_MeteredStream(source), into, limits)
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise UnsafeArchive(
                f"the body is not a readable tar or tar.gz archive ({exc}); send one made with "
                "`trainyard code push DIR` or `tar -czf`"
            ) from exc
    for folder, _, _ in os.walk(into, topdown=False):
        Path(folder).chmod(DIR_MODE)
    return manifest


def remove_tree(path: Path) -> None:
    """Removes a folder, read-only ones included: each folder is made writable again first."""
    if not path.exists():
        return
    for folder, _, _ in os.walk(path):
        Path(folder).chmod(0o755)
    shutil.rmtree(path)
