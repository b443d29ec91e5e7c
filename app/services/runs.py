"""The run directory the worker fills (runs/<job>/): paths, reading logs, removing it, along with its copy
in the object store when there is one (artifact_store=s3)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from app.schemas import LogChunk
from app.services.errors import RunDirStuck
from core.config import Settings
from core.log_mask import masked_read
from core.models import Job
from core.rundirs import set_aside
from core.states import JobStatus
from core.storage import object_store
from jobspec.events import LAUNCHER_LOG, LOG_DIR, rank_log_name
from jobspec.files import JobFileMissing, open_job_file

log = logging.getLogger(__name__)


def run_dir(settings: Settings, job_id: int | str) -> Path:
    return settings.runs_dir / str(job_id)


def set_run_dir_aside(settings: Settings, job_id: int) -> Path | None:
    """Move the job's run directory away from runs/<id>/ before its rows go, so that no later job can find its
    files there; returns where it went, for `discard_run_dir`. When it cannot be moved, the job must stay."""
    try:
        return set_aside(run_dir(settings, job_id))
    except OSError as exc:
        raise RunDirStuck(job_id, exc.strerror or str(exc)) from exc


def put_run_dir_back(settings: Settings, job_id: int, moved: Path | None) -> None:
    """Undo `set_run_dir_aside` for a job whose rows stayed after all."""
    if moved is not None:
        moved.rename(run_dir(settings, job_id))


def discard_run_dir(settings: Settings, job_id: int, moved: Path | None) -> None:
    """Remove the files of a deleted job: the run directory `set_run_dir_aside` moved, and its objects."""
    if moved is not None:
        try:
            shutil.rmtree(moved)
        except OSError:
            # No job can take this name; what is left only takes space until an admin removes it.
            log.exception("job %s: could not remove its files set aside at %s", job_id, moved)
    if (store := object_store(settings)) is not None:
        try:
            store.delete_run(job_id)
        except (BotoCoreError, ClientError):
            # Ids are never reused, so what is left is found by no job; failing now would hide the deletion.
            log.exception("job %s: could not delete its objects under %s", job_id, store.run_key(job_id, ""))


def log_name(rank: int | None) -> str:
    """The log's path inside the run directory, which is also its key's tail in the object store."""
    return f"{LOG_DIR}/{LAUNCHER_LOG if rank is None else rank_log_name(rank)}"


def log_path(settings: Settings, job_id: int, rank: int | None) -> Path:
    return run_dir(settings, job_id) / log_name(rank)


def _read_log_bytes(settings: Settings, job_id: int, rank: int | None, offset: int, length: int) -> bytes:
    """From the file when this host has it (a shared runs directory, or the worker's own host), else from
    the parts the worker uploads of it; a log not written yet reads as empty. A log the job's ranks replaced
    with a link, a FIFO or a folder is refused (JobFileRefused): never followed. Reads are ranges, so a log
    of any size is read."""
    try:
        opened = open_job_file(run_dir(settings, job_id), log_name(rank), None)
    except JobFileMissing:
        if (store := object_store(settings)) is None:
            return b""
        return store.read_parts(store.run_key(job_id, log_name(rank)), offset, length)
    with opened:
        # Past the end there is nothing yet; and a seek beyond the filesystem's largest file size (ext4:
        # 16 TiB) fails with EINVAL rather than reading nothing.
        if offset >= opened.size:
            return b""
        opened.file.seek(offset)
        return opened.file.read(length)


def _utf8_boundary(data: bytes) -> int:
    """Length of `data` without a trailing, incomplete UTF-8 character, so a chunk never splits one."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead byte
            continue
        needed = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
        return len(data) - back if needed > back else len(data)
    return len(data)


def read_log(
    settings: Settings, job: Job, rank: int | None, offset: int, limit_bytes: int, secrets: Sequence[str] = ()
) -> LogChunk:
    """A missing file is a log not written yet, not an error. The status is read before the file, so
    `eof` is only claimed once the job had finished before these bytes were read. The values of the job's
    `secrets` are masked (app/services/log_mask.py)."""
    finished = JobStatus(job.status).is_terminal
    data, length, more = masked_read(
        lambda start, size: _read_log_bytes(settings, job.id, rank, start, size),
        offset,
        limit_bytes,
        secrets,
        _utf8_boundary,
        live=not finished,
    )
    return LogChunk(
        rank=rank,
        offset=offset,
        next_offset=offset + length,
        text=data.decode("utf-8", errors="replace"),
        eof=finished and not more,
    )
