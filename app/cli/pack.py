"""A folder packed into a code bundle's archive the same way every time, so that the same tree gives the
same id: files in sorted order, mtime 0, uid and gid 0 without owner names, modes 0o755 (executable) or 0o644,
gzip with mtime 0 and no file name.

A `.trainyardignore` at the folder's top leaves paths out, in gitignore syntax (read by pathspec: `*.pt`,
`data/`, `/notes.md`, `!keep.pt`); as in git, a file inside a folder left out cannot be put back. `.git`,
`__pycache__` and `.venv` are always left out. Links and special files are refused: the server takes only
files and folders, and a link followed here could pack what lies outside the folder.
"""

from __future__ import annotations

import gzip
import os
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from pathspec import GitIgnoreSpec

IGNORE_FILE = ".trainyardignore"
ALWAYS_SKIPPED = frozenset({".git", "__pycache__", ".venv"})


class PackError(Exception):
    """The folder cannot be packed as it is; the message names the path and the fix."""


def _ignore_spec(root: Path) -> GitIgnoreSpec:
    rules = root / IGNORE_FILE
    return GitIgnoreSpec.from_lines(rules.read_text().splitlines() if rules.is_file() else [])


def _refuse_special(path: Path, relative: str) -> None:
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        raise PackError(
            f"{relative} is a symbolic link; a bundle holds only files and folders: copy what it points to "
            f"into the folder, or list it in {IGNORE_FILE}"
        )
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise PackError(f"{relative} is not a regular file or folder; list it in {IGNORE_FILE}")


def bundle_files(root: Path) -> list[PurePosixPath]:
    """The files that go in, relative to `root`, sorted."""
    ignored = _ignore_spec(root)
    files: list[PurePosixPath] = []
    for folder, subfolders, names in os.walk(root):
        here = PurePosixPath(Path(folder).relative_to(root).as_posix())
        kept = []
        for name in subfolders:
            relative = here / name
            if name in ALWAYS_SKIPPED or ignored.match_file(f"{relative}/"):
                continue  # not walked: nothing under it goes in
            _refuse_special(Path(folder, name), str(relative))
            kept.append(name)
        subfolders[:] = kept
        for name in names:
            relative = here / name
            if not ignored.match_file(str(relative)):
                _refuse_special(Path(folder, name), str(relative))
                files.append(relative)
    return sorted(files)


def _entry(root: Path, relative: PurePosixPath) -> tarfile.TarInfo:
    info = tarfile.TarInfo(str(relative))
    status = (root / relative).stat()
    info.size = status.st_size
    info.mode = 0o755 if status.st_mode & stat.S_IXUSR else 0o644
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def pack(root: Path, out: IO[bytes]) -> int:
    """Writes the folder's archive (tar.gz) to `out`; returns how many files went in."""
    files = bundle_files(root)
    if not files:
        raise PackError(f"{root} has no files to push (after {IGNORE_FILE}); push the folder of your modules")
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for relative in files:
            with (root / relative).open("rb") as source:
                tar.addfile(_entry(root, relative), source)
    return len(files)
