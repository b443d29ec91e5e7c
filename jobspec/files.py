"""Checks on the files a run leaves behind, shared by the trainer, the worker and the API; no torch import.

Any rank can write its run directory, links and FIFOs included, so nothing there is taken on faith. The
service (API and worker, which may read what the job may not) opens a job's files only through
`open_job_file`: a relative name walked folder by folder from a descriptor of the run directory without
following any link, a regular file at the end, no larger than its reader takes. A checkpoint's bytes must
also hash to the sha256 the trainer recorded when it wrote them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

READ_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, which the job controls.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# What the job can make a name into; any other error (EMFILE, EIO) is the service's and propagates.
_REFUSED_ERRNOS = (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.EACCES, errno.EPERM)
_REFUSED_FIX = (
    "the service reads only regular files inside the job's run directory and never follows a link; have "
    "the job write the file itself there (not a link, FIFO or folder), or run it again"
)


def largest_job_file(max_file_gb: float) -> int:
    """TRAINYARD_JOB_MAX_FILE_GB in bytes: the largest file a sandboxed job may write (its RLIMIT_FSIZE), so
    the bound on what the service reads of a checkpoint, an export or an event file of any job."""
    return int(max_file_gb * (1 << 30))


class JobFileError(Exception):
    """A job's file that is not read; the message names it (relative to its run directory) and the fix."""

    def __init__(self, name: str, why: str, fix: str) -> None:
        super().__init__(f"{name} {why}; {fix}")
        self.name = name


class JobFileMissing(JobFileError):
    def __init__(self, name: str) -> None:
        super().__init__(name, "does not exist in the job's run directory", "the job has not written it yet")


class JobFileRefused(JobFileError):
    """A link (at any folder on the way), a FIFO, a socket, a folder; a name leading out of the run dir."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(name, why, _REFUSED_FIX)


class JobFileTooLarge(JobFileError):
    def __init__(self, name: str, size: int, max_bytes: int) -> None:
        super().__init__(
            name,
            f"is {size} bytes, more than the {max_bytes} bytes the service reads of it",
            "have the job write a smaller one",
        )


@dataclass(frozen=True)
class JobFile:
    """A job's file, opened; `size` is what was checked against the bound, so it is what a reader takes
    and what a response promises, however the file changes while it is read."""

    file: BinaryIO
    size: int

    def __enter__(self) -> JobFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.file.close()

    def chunks(self) -> Iterator[bytes]:
        """The first `size` bytes, from the start; fewer when the job cut the file short meanwhile."""
        self.file.seek(0)
        left = self.size
        while left > 0 and (chunk := self.file.read(min(READ_CHUNK, left))):
            left -= len(chunk)
            yield chunk

    def served(self) -> Iterator[bytes]:
        """`chunks()` for a response, the file closed once they are sent or the client is gone."""
        with self:
            yield from self.chunks()

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks():
            digest.update(chunk)
        return digest.hexdigest()


def _parts(name: str) -> list[str]:
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):  # "" also catches an absolute name
        raise JobFileRefused(name, "is not a plain name inside the job's run directory (no leading /, no ..)")
    return parts


def _what(folder: int, part: str) -> str:
    """What the job made of a name that could not be opened, for the message only: the refusal stands."""
    try:
        mode = os.stat(part, dir_fd=folder, follow_symlinks=False).st_mode
    except OSError as exc:
        return f"cannot be opened ({exc.strerror})"
    return _kind(mode)


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISLNK: "a symbolic link",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISSOCK: "a socket",
        stat.S_ISDIR: "a folder",
        stat.S_ISREG: "a regular file",
    }
    return next((f"is {kind}" for test, kind in kinds.items() if test(mode)), "is a device")


def _open_at(folder: int, parts: list[str], at: int, flags: int) -> int:
    """Opens parts[at] inside `folder` (the descriptor of parts[:at]) with `flags`, its failure typed."""
    name = "/".join(parts)
    try:
        return os.open(parts[at], flags, dir_fd=folder)
    except FileNotFoundError:
        raise JobFileMissing(name) from None
    except OSError as exc:
        if exc.errno not in _REFUSED_ERRNOS:
            raise
        what = _what(folder, parts[at]) + ("" if at == len(parts) - 1 else ", not a folder")
        raise JobFileRefused(name, f"is refused: {'/'.join(parts[: at + 1])} {what}") from None


def _open_folder(root: Path, parts: list[str], at: int) -> int:
    """A descriptor of root/parts[0]/.../parts[at - 1], each folder after `root` opened without following
    a link. `root` is the service's own path (a run directory), which the job cannot rename."""
    try:
        folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise JobFileMissing("/".join(parts)) from None
    for step in range(at):
        try:
            inner = _open_at(folder, parts, step, _DIR_FLAGS)
        finally:
            os.close(folder)
        folder = inner
    return folder


def open_job_file(root: Path, name: str, max_bytes: int | None) -> JobFile:
    """`name` (relative, '/'-separated) inside the run directory `root`, opened for reading: refused when
    any part of it is a link, when it is not a regular file, or larger than `max_bytes` (None: the reader
    takes bounded ranges of any size itself). Raises JobFileMissing, JobFileRefused, JobFileTooLarge."""
    parts = _parts(name)
    folder = _open_folder(root, parts, len(parts) - 1)
    try:
        fd = _open_at(folder, parts, len(parts) - 1, _FILE_FLAGS)
    finally:
        os.close(folder)
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        raise JobFileRefused(name, f"is refused: it {_kind(status.st_mode)}, not a regular file")
    if max_bytes is not None and status.st_size > max_bytes:
        os.close(fd)
        raise JobFileTooLarge(name, status.st_size, max_bytes)
    return JobFile(os.fdopen(fd, "rb"), status.st_size)


def open_under(root: Path, path: Path, max_bytes: int | None) -> JobFile:
    """The file at `path`, which a record names in full, opened as `open_job_file` opens its name relative to
    `root` (the runs directory): a path that leads out of `root` is refused like a '..'."""
    return open_job_file(root, os.path.relpath(path, root), max_bytes)


# What one listing looks at, names and folders alike: the service lists folders a job fills (logs/, stacks/,
# tensorboard/), the worker some of them on its loop, and a job may make millions of names or a folder nested
# thousands deep there.
LISTING_MAX_NAMES = 10_000
LISTING_MAX_DEPTH = 16


def job_files(root: Path, folder: str, *, deep: bool = True, most: int = LISTING_MAX_NAMES) -> list[str]:
    """The names (relative to `root`, sorted) of the regular files in `folder`, and with `deep` in its
    folders down to LISTING_MAX_DEPTH; links are neither listed nor descended into. The walk looks at `most`
    names at most, in the order the filesystem gives them, so a folder holding more is listed in part.
    Raises JobFileMissing or JobFileRefused for `folder` itself."""
    parts = _parts(folder)
    top = _open_folder(root, parts, len(parts))
    walk = _walk(top, f"{'/'.join(parts)}/", LISTING_MAX_DEPTH if deep else 0)
    try:
        return sorted(name for name in islice(walk, most) if name is not None)
    finally:
        walk.close()  # closes the folders inside that a listing cut short left open
        os.close(top)


def _walk(folder: int, prefix: str, depth: int) -> Generator[str | None]:
    """Each name the walk looks at, lazily (a folder is read as far as the walk goes): a regular file's name
    with `prefix`, None for anything else. `folder` stays the caller's; the folders inside are its own."""
    with os.scandir(folder) as entries:  # reads a copy of the descriptor, which it closes
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                yield prefix + entry.name
                continue
            yield None
            if depth and entry.is_dir(follow_symlinks=False):
                try:
                    inner = os.open(entry.name, _DIR_FLAGS, dir_fd=folder)
                except OSError:  # replaced by a link or removed since it was listed
                    continue
                try:
                    yield from _walk(inner, f"{prefix}{entry.name}/", depth - 1)
                finally:
                    os.close(inner)


def inside(path: Path, root: Path) -> Path | None:
    """`path` with every symlink followed, when that lies inside `root`; None when it leads out."""
    real = path.resolve()
    return real if real.is_relative_to(root.resolve()) else None


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def mismatch(actual: str, expected: str) -> str | None:
    """Why bytes of sha256 `actual` are not the checkpoint recorded with `expected`; None when they are."""
    if actual == expected:
        return None
    return f"its sha256 is {actual}, not the {expected} recorded when it was written"


def corruption(path: Path, expected: str) -> str | None:
    """Why the file at `path` is not the checkpoint recorded with sha256 `expected`; None when it is."""
    return mismatch(file_sha256(path), expected)
