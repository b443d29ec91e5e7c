"""The run directory the worker fills (runs/<job>/): paths, reading logs, removing it."""

from __future__ import annotations

import shutil
from pathlib import Path

from app.core.config import Settings
from app.models import Job
from app.schemas import LogChunk
from app.states import JobStatus
from trainers.events import LAUNCHER_LOG, LOG_DIR, rank_log_name


def run_dir(settings: Settings, job_id: int | str) -> Path:
    return settings.runs_dir / str(job_id)


def remove_run_dir(settings: Settings, job_id: int) -> None:
    shutil.rmtree(run_dir(settings, job_id), ignore_errors=True)


def log_path(settings: Settings, job_id: int, rank: int | None) -> Path:
    name = LAUNCHER_LOG if rank is None else rank_log_name(rank)
    return run_dir(settings, job_id) / LOG_DIR / name


def _utf8_boundary(data: bytes) -> int:
    """Length of `data` without a trailing, incomplete UTF-8 character, so a chunk never splits one."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead byte
            continue
        needed = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
        return len(data) - back if needed > back else len(data)
    return len(data)


def read_log(settings: Settings, job: Job, rank: int | None, offset: int, limit_bytes: int) -> LogChunk:
    """A missing file is a log not written yet, not an error. The status is read before the file, so
    `eof` is only claimed once the job had finished before these bytes were read."""
    finished = JobStatus(job.status).is_terminal
    try:
        with log_path(settings, job.id, rank).open("rb") as f:
            f.seek(offset)
            data = f.read(limit_bytes)
            more = bool(f.read(1))
    except FileNotFoundError:
        data, more = b"", False
    if more or not finished:
        # A writer may be mid-character; leave the partial bytes for the next read unless that stalls.
        data = data[: _utf8_boundary(data) or len(data)]
    next_offset = offset + len(data)
    return LogChunk(
        rank=rank,
        offset=offset,
        next_offset=next_offset,
        text=data.decode("utf-8", errors="replace"),
        eof=finished and not more,
    )
