"""Safe extraction of a code bundle's archive (a tar, plain or gzip-compressed) into an empty folder.

The archive is untrusted: every member is checked before a byte of it is written, and only regular files and
folders are made, by this module's own code rather than tarfile's extract, so that nothing can land outside
the folder. Refused: absolute paths, `..`, links of any kind, devices, fifos, sparse files, a path given
twice, paths deeper than `max_depth` or longer than MAX_PATH_CHARS, more files and folders than `max_files`
(the folders a path implies count as if listed), more bytes on disk than `max_unpacked_bytes` (see
`disk_bytes`) or than the owner's quota leaves (`room`). `check` applies the same rules to the headers alone,
so that a refused archive is refused before anything is written.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

GZIP_MAGIC = b"\x1f\x8b"
# More than any real header needs (a pax record with a 4 KiB path is under 5 KiB), little enough to hold.
HEADER_ALLOWANCE = 1 << 20
# The files a bundle's row lists; file_count counts them all.
FILES_LISTED = 1000
COPY_CHUNK = 1 << 20
# What a file system allocates: a file takes whole blocks, a folder one. Charging it keeps a bundle of
# empty folders or files (a few bytes of archive each) from filling the disk inside its caps.
BLOCK = 4096
# The deepest TRAINYARD_CODE_MAX_DEPTH may allow: deep enough for any source tree; shallow enough that no walk
# of the folder (os.walk, rmtree, both recursive) nears Python's recursion limit.
MAX_DEPTH = 64
MAX_PATH_CHARS = 1024
SHOWN_CHARS = 200
FILE_MODE, EXEC_MODE, DIR_MODE = 0o444, 0o555, 0o555
# Errors of a path inside the archive (a file where a folder should be, a name too long), not of the disk.
_PATH_ERRNOS = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG})


class UnsafeArchive(Exception):
    """The archive was refused; the message names the member and what to change."""


class QuotaPassed(Exception):
    """The bundle takes more than its owner's quota leaves (`Limits.room`); the caller says whose and how."""

    def __init__(self, charged: int) -> None:
        super().__init__(f"the bundle unpacks to {charged} bytes or more, past what the quota leaves")
        self.charged = charged


@dataclass(frozen=True)
class Limits:
    max_unpacked_bytes: int
    max_files: int
    max_depth: int  # levels of a path, its file included; MAX_DEPTH at most
    room: int | None = None  # bytes the owner's quota leaves for the files; None: none counted (a worker)


@dataclass
class Manifest:
    unpacked_bytes: int = 0  # what the files and folders take on disk, as disk_bytes counts them
    file_count: int = 0
    entries: int = 0  # files and folders made, those a path implies included: what max_files caps
    files: list[dict[str, int | str]] = field(default_factory=list)  # {path, size}, the first FILES_LISTED


def disk_bytes(size: int) -> int:
    """A file's `size` bytes in whole blocks, one at least: an empty file's entry is charged a block too."""
    return BLOCK * max(1, -(-size // BLOCK))


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


def _shown(name: str) -> str:
    """A member's name for a message: a name may be up to HEADER_ALLOWANCE long."""
    return repr(name if len(name) <= SHOWN_CHARS else f"{name[:SHOWN_CHARS]}...")


def _path(member: tarfile.TarInfo, max_depth: int) -> PurePosixPath:
    """The member's path inside the bundle, or UnsafeArchive for what a bundle may not hold."""
    if (kind := _kind(member)) is not None:
        raise UnsafeArchive(f"{_shown(member.name)} is {kind}; a bundle holds only files and folders")
    path = PurePosixPath(member.name)
    if path.is_absolute():
        raise UnsafeArchive(
            f"{_shown(member.name)} is an absolute path; pack paths relative to the bundle's top"
        )
    if ".." in path.parts:
        raise UnsafeArchive(
            f"{_shown(member.name)} climbs out of the bundle with '..'; pack the folder itself"
        )
    if len(path.parts) > max_depth:
        raise UnsafeArchive(
            f"{_shown(member.name)} is {len(path.parts)} levels deep, over the {max_depth} a bundle's paths "
            "may have (TRAINYARD_CODE_MAX_DEPTH); move it nearer the bundle's top"
        )
    if len(member.name) > MAX_PATH_CHARS:
        raise UnsafeArchive(
            f"{_shown(member.name)} is a path of {len(member.name)} characters, over the {MAX_PATH_CHARS} a "
            "bundle's paths may have; shorten its folders' names"
        )
    return path


def _write_file(source: IO[bytes], target: Path, executable: bool) -> None:
    # O_EXCL: a path the archive names twice is refused rather than overwritten; O_NOFOLLOW for good measure,
    # as no link is ever made in the folder.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(target, flags, 0o600), "wb") as out:
        shutil.copyfileobj(source, out, COPY_CHUNK)
    target.chmod(EXEC_MODE if executable else FILE_MODE)


def _allow_data(stream: _MeteredStream, member: tarfile.TarInfo) -> None:
    """The member's data may pass through tarfile now, and no more than it (and the next header)."""
    size = member.size if member.isreg() else 0
    stream.allowed = stream.consumed + tarfile.BLOCKSIZE * -(-size // tarfile.BLOCKSIZE) + HEADER_ALLOWANCE


class _Ledger:
    """An archive's members, each checked, counted and charged from its header alone. The folders a path
    implies (`a/b/` of a member `a/b/f.py` that the archive never lists) are a set of prefixes, so that they
    count and cost like listed ones, each once; the set stops growing at the cap on files and folders."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.manifest = Manifest()
        self.folders: set[PurePosixPath] = set()

    def take(self, member: tarfile.TarInfo) -> tuple[PurePosixPath, list[PurePosixPath]]:
        """The member's path and the folders it adds, the topmost first; UnsafeArchive or QuotaPassed past a
        rule or a cap."""
        path = _path(member, self.limits.max_depth)
        if not path.parts:  # the archive's top folder, "./"
            return path, []
        folders = self._new_folders(path if member.isdir() else path.parent)
        size = member.size if member.isreg() else 0
        files = 0 if member.isdir() else 1
        self._charge(member, size, len(folders) + files, BLOCK * len(folders) + files * disk_bytes(size))
        self.folders.update(folders)
        if files:
            self.manifest.file_count += 1
            if len(self.manifest.files) < FILES_LISTED:
                self.manifest.files.append({"path": str(path), "size": member.size})
        return path, folders

    def _new_folders(self, folder: PurePosixPath) -> list[PurePosixPath]:
        new: list[PurePosixPath] = []
        while folder.parts and folder not in self.folders:
            new.append(folder)
            folder = folder.parent
        return new[::-1]

    def _charge(self, member: tarfile.TarInfo, size: int, entries: int, charge: int) -> None:
        manifest, limits = self.manifest, self.limits
        if manifest.entries + entries > limits.max_files:
            raise UnsafeArchive(
                f"the archive holds more than {limits.max_files} files and folders "
                "(TRAINYARD_CODE_MAX_FILES, which counts the folders a path implies too, as those of "
                f"{_shown(member.name)}); leave data and outputs out with .trainyardignore, and keep the "
                "bundle's folders few and shallow"
            )
        if manifest.unpacked_bytes + charge > limits.max_unpacked_bytes:
            raise UnsafeArchive(
                f"the archive unpacks to more than {limits.max_unpacked_bytes} bytes "
                f"(TRAINYARD_CODE_MAX_UNPACKED_BYTES; {_shown(member.name)} alone is {size}); leave data and "
                "weights out with .trainyardignore and read them from TRAINYARD_DATA_DIR"
            )
        if limits.room is not None and manifest.unpacked_bytes + charge > limits.room:
            raise QuotaPassed(manifest.unpacked_bytes + charge)
        manifest.entries += entries
        manifest.unpacked_bytes += charge


class _Maker:
    """What the ledger admitted, made under `into`: folders, then the file."""

    def __init__(self, into: Path) -> None:
        self.into = into
        self.folders: list[PurePosixPath] = []

    def make(
        self, tar: tarfile.TarFile, member: tarfile.TarInfo, path: PurePosixPath, folders: list[PurePosixPath]
    ) -> None:
        for folder in folders:
            self.into.joinpath(*folder.parts).mkdir()
            self.folders.append(folder)
        if path.parts and not member.isdir():
            source = tar.extractfile(member)
            assert source is not None  # a regular file always has a reader
            _write_file(source, self.into.joinpath(*path.parts), executable=bool(member.mode & 0o111))

    def seal(self) -> None:
        """Every folder made read-only, as the files already are, the top one too (a mkdtemp's 0700 would
        keep the sandboxed ranks, another uid, out of their own bundle)."""
        for folder in (*self.folders, PurePosixPath()):
            self.into.joinpath(*folder.parts).chmod(DIR_MODE)


_Make = Callable[[tarfile.TarFile, tarfile.TarInfo, PurePosixPath, list[PurePosixPath]], None]


def _read_stream(stream: _MeteredStream, limits: Limits, make: _Make | None) -> Manifest:
    # Stream mode ("r|"): tarfile reads forward only, through the metered stream and nothing else.
    ledger = _Ledger(limits)
    with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
        for member in tar:
            path, folders = ledger.take(member)
            _allow_data(stream, member)
            if make is None:
                continue
            try:
                make(tar, member, path, folders)
            except OSError as exc:
                if exc.errno not in _PATH_ERRNOS:
                    raise  # the disk's own trouble (full, read-only), not the archive's
                message = f"{_shown(member.name)} cannot be unpacked ({exc.strerror}): rename it"
                raise UnsafeArchive(message) from exc
    if ledger.manifest.file_count == 0:
        raise UnsafeArchive("the archive holds no files; push a folder with your modules in it")
    return ledger.manifest


def _read(archive: Path, limits: Limits, make: _Make | None) -> Manifest:
    with archive.open("rb") as raw:
        source: _Readable = gzip.GzipFile(fileobj=raw, mode="rb") if is_gzip(archive) else raw
        try:
            return _read_stream(_MeteredStream(source), limits, make)
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise UnsafeArchive(
                f"the body is not a readable tar or tar.gz archive ({exc}); send one made with "
                "`trainyard code push DIR` or `tar -czf`"
            ) from exc


def check(archive: Path, limits: Limits) -> Manifest:
    """What `unpack` would make of `archive`, or its refusal (UnsafeArchive, QuotaPassed), from the headers
    alone: nothing is written, and the file data is read past, not kept. A few KiB of names that imply more
    folders than the cap are refused here in milliseconds, rather than after thousands of folders made and
    removed again."""
    return _read(archive, limits, None)


def unpack(archive: Path, into: Path, limits: Limits) -> Manifest:
    """Unpacks `archive` into the empty folder `into`, leaving every file and folder read-only, or raises
    UnsafeArchive (or QuotaPassed); what it wrote before a refusal is left for the caller to remove. Each
    member is checked before anything of it is made, whether or not `check` ran first."""
    maker = _Maker(into)
    manifest = _read(archive, limits, maker.make)
    maker.seal()
    return manifest


def remove_tree(path: Path) -> None:
    """Removes a folder, read-only ones included: each folder is made writable again first."""
    if not path.exists():
        return
    for folder, _, _ in os.walk(path):
        Path(folder).chmod(0o755)
    shutil.rmtree(path)
