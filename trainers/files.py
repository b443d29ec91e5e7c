"""Checks on the files a run leaves behind, shared by the trainer, the worker and the API; no torch import.

Any rank can write its run directory, so neither a path an event names nor a checkpoint's bytes are taken on
faith: a path must stay under the directory it belongs to with every link followed, and a checkpoint's bytes
must hash to the sha256 the trainer recorded when it wrote them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path


def inside(path: Path, root: Path) -> Path | None:
    """`path` with every symlink followed, when that lies inside `root`; None when it leads out."""
    real = path.resolve()
    return real if real.is_relative_to(root.resolve()) else None


def open_inside(path: Path, root: Path) -> int:
    """A read-only descriptor for `path` if what it opens is a regular file inside `root`. The job's own
    processes write there and may swap a file or folder for a link at any moment, so the file actually
    opened is checked, not the name. FileNotFoundError when there is none; PermissionError when it is a
    link, not a regular file, or lies outside `root`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer for a link
            raise PermissionError(f"{path} is a link") from exc
        raise
    opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
    if stat.S_ISREG(os.fstat(fd).st_mode) and inside(opened, root):
        return fd
    os.close(fd)
    raise PermissionError(f"{path} is not a regular file inside {root}")


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
