"""The worker's own writes into a job's run directory, which the job's ranks may have written before.

A sandboxed job owns its run directory, and an earlier attempt of it may have left a symbolic link where the
worker writes next (`logs`, `spec.json`, the launcher's log). A worker running as root that followed one would
write where the link points, so every write here refuses links: a name is created fresh (O_EXCL) or opened
with O_NOFOLLOW, and a folder is opened with O_NOFOLLOW before anything is made inside it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from core.rundirs import set_aside
from jobspec.events import EVENTS_FILE, LOG_DIR, SPEC_FILE
from jobspec.plan import RunConfig
from worker.failure import ERROR_FILE

log = logging.getLogger(__name__)

_NO_LINKS = os.O_NOFOLLOW | os.O_CLOEXEC


class RunDirTampered(Exception):
    """The run directory holds a link where the worker writes; the message names it."""


def _open_folder(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NO_LINKS)
    except OSError as exc:
        raise RunDirTampered(f"{path} is not a plain folder ({exc.strerror}); delete the job") from exc


def _open_folder_at(parent: int, path: Path) -> int:
    """`path`'s last part, opened inside the folder `parent` without following a link."""
    try:
        return os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | _NO_LINKS, dir_fd=parent)
    except OSError as exc:
        raise RunDirTampered(f"{path} is not a plain folder ({exc.strerror}); delete the job") from exc


def append_no_follow(path: Path) -> int:
    """A descriptor appending to `path` (a log), created if missing, refused if it is a link."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NO_LINKS, 0o644)
    except OSError as exc:
        raise RunDirTampered(f"{path}: {exc.strerror}; delete the job") from exc


def write_fresh(run_dir: Path, folder: str, name: str, fill: Callable[[BinaryIO], object]) -> Path:
    """`run_dir/folder/name`, written whole by `fill`: the folder made, or opened, without following a link;
    the file created fresh beside its name and renamed into place, so that a link the job left there is
    replaced, never written through, and the name never holds half a file. The run directory itself is the
    service's own path, made here when this host has none yet (a resume on another host)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    top = _open_folder(run_dir)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o755, dir_fd=top)
        inner = _open_folder_at(top, run_dir / folder)
    finally:
        os.close(top)
    staged = f".{name}.{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged, dir_fd=inner)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINKS, 0o644, dir_fd=inner)
        with os.fdopen(fd, "wb") as file:
            fill(file)
        os.replace(staged, name, src_dir_fd=inner, dst_dir_fd=inner)
    finally:
        os.close(inner)
    return run_dir / folder / name


def set_aside_stale(run_dir: Path, job_id: int) -> None:
    """Before a job's first launch: a run directory that already holds events is another job's (from before
    ids were never reused, on a host the deletion did not reach, or kept from a database restored from a
    backup), and reading them would record its metrics and checkpoints as this job's. It is moved aside
    rather than refused: its files stay whole for an admin, and the job runs, as its owner can neither remove
    them nor have done anything wrong."""
    if os.path.lexists(run_dir / EVENTS_FILE):
        moved = set_aside(run_dir)
        log.warning("job %s: its run directory held another job's events; moved it to %s", job_id, moved)


def prepare_run_dir(run_dir: Path, config: RunConfig, owner: int | None = None) -> None:
    """Write the attempt's spec.json, clear the last attempt's error and check that `logs` is a folder;
    `owner`: the job's uid, which the run directory and its logs folder are handed to, so that the ranks can
    write there (and nowhere else: the sandbox shows them no other writable place)."""
    (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
    folder = _open_folder(run_dir)
    try:
        logs = _open_folder(run_dir / LOG_DIR)
        if owner is not None:
            os.chown(logs, owner, owner)
            os.chown(folder, owner, owner)
        os.close(logs)
        # Replaced whole: on a shared disk the other nodes' ranks may be reading it right now.
        staged = f".{SPEC_FILE}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged, dir_fd=folder)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINKS, 0o644, dir_fd=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(config.model_dump_json(indent=2))
        os.replace(staged, SPEC_FILE, src_dir_fd=folder, dst_dir_fd=folder)
        # A previous attempt's root cause must not be reported as this one's.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ERROR_FILE, dir_fd=folder)
    finally:
        os.close(folder)
