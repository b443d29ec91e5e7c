"""What a job's trainer wrote for inspection tools under runs/<job>/: the profiler's summary and Chrome trace
(profile/), and TensorBoard's event files (tensorboard/), served as a tar streamed file by file. Each is
opened through the confined opener (jobspec/files.py): the job's own processes write these folders."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.services.errors import ProfileNotFound, ProfileUnreadable, TensorBoardNotFound
from app.services.jobs import get_job
from app.services.runs import run_dir
from core.config import Settings
from core.models import Job
from jobspec.events import TENSORBOARD_DIR
from jobspec.files import (
    READ_CHUNK,
    JobFile,
    JobFileMissing,
    JobFileTooLarge,
    job_files,
    largest_job_file,
    open_job_file,
)
from jobspec.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE, ProfileSummary
from jobspec.spec import JobSpec

# The trainer's summary lists a few dozen ops: a few kB. Parsed whole in the API's memory, so bounded.
SUMMARY_MAX_BYTES = 4 << 20
# ui.perfetto.dev and chrome://tracing load a JSON trace in the browser's memory and give up on one of more
# than a few hundred MB; a profile of a handful of steps writes far less.
TRACE_MAX_BYTES = 512 << 20
# TensorBoard writes one event file per writer (a run, a restart): thousands mean the job made them.
MAX_EVENT_FILES = 1024


def _missing(job: Job) -> ProfileNotFound:
    profile = JobSpec.model_validate(job.spec).profile
    if profile.steps == 0:
        return ProfileNotFound(
            f"job {job.id} has no profile: it was submitted without profiling; submit it again with "
            '"profile": {"steps": 10} (and optionally "skip_first") to profile 10 steps'
        )
    return ProfileNotFound(
        f"job {job.id} has no profile yet: it is written after step {profile.skip_first + profile.steps} "
        f"(profile.skip_first={profile.skip_first} + profile.steps={profile.steps}); ask again later"
    )


def _profile_file(session: Session, settings: Settings, job_id: int, name: str, max_bytes: int) -> JobFile:
    job = get_job(session, job_id)
    try:
        return open_job_file(run_dir(settings, job.id), f"{PROFILE_DIR}/{name}", max_bytes)
    except JobFileMissing:
        raise _missing(job) from None


def profile_summary(session: Session, settings: Settings, job_id: int) -> ProfileSummary:
    with _profile_file(session, settings, job_id, SUMMARY_FILE, SUMMARY_MAX_BYTES) as summary:
        text = b"".join(summary.chunks())
    try:
        return ProfileSummary.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        raise ProfileUnreadable(
            f"job {job_id}'s {PROFILE_DIR}/{SUMMARY_FILE} is not a profile summary ({where}: "
            f"{first['msg']}); the job's own processes overwrote what the profiler wrote: run it again"
        ) from None


def profile_trace(session: Session, settings: Settings, job_id: int) -> JobFile:
    """Opened, for the response to stream: the caller closes it."""
    return _profile_file(session, settings, job_id, TRACE_FILE, TRACE_MAX_BYTES)


def tensorboard_tar(session: Session, settings: Settings, job_id: int) -> Iterator[bytes]:
    """The job's TensorBoard event files as one tar, members named job<id>/... so that several jobs' tars
    unpack side by side as runs of one `tensorboard --logdir`. Every file is opened, and refused, before the
    first byte; links and other things that are not regular files are left out."""
    job = get_job(session, job_id)
    metrics = JobSpec.model_validate(job.spec).metrics
    if not metrics.tensorboard:
        raise TensorBoardNotFound(
            f"job {job.id} writes no TensorBoard events: it was submitted without them; submit it again with "
            '"metrics": {"tensorboard": true}'
        )
    opened = _event_files(run_dir(settings, job.id), settings)
    if not opened:
        raise TensorBoardNotFound(
            f"job {job.id} has written no TensorBoard events yet: rank 0 writes them from its first report "
            f"(metrics.every_n_steps={metrics.every_n_steps}); ask again later"
        )
    return _tar_stream(opened, f"job{job.id}")


def _event_files(root: Path, settings: Settings) -> dict[str, JobFile]:
    """The regular files under tensorboard/, opened, by their name in it."""
    try:
        names = job_files(root, TENSORBOARD_DIR)
    except JobFileMissing:
        return {}
    if len(names) > MAX_EVENT_FILES:
        raise JobFileTooLarge(TENSORBOARD_DIR, len(names), MAX_EVENT_FILES)
    max_bytes = largest_job_file(settings.job_max_file_gb)
    opened: dict[str, JobFile] = {}
    with ExitStack() as stack:  # those opened are closed again when one is refused
        for name in names:
            opened[name.removeprefix(f"{TENSORBOARD_DIR}/")] = stack.enter_context(
                open_job_file(root, name, max_bytes)
            )
        stack.pop_all()
    return opened


def _tar_stream(opened: dict[str, JobFile], prefix: str) -> Iterator[bytes]:
    """A tar written as it is sent: each member's size is the one taken when it was opened, and exactly that
    many bytes follow, so an event file that grows meanwhile (the job runs on) still makes a valid archive."""
    try:
        for name, event_file in opened.items():
            info = tarfile.TarInfo(f"{prefix}/{name}")
            info.size, info.mode = event_file.size, 0o644
            info.mtime = int(os.fstat(event_file.file.fileno()).st_mtime)
            yield info.tobuf(format=tarfile.PAX_FORMAT)
            yield from _padded(event_file)
            yield bytes(-info.size % tarfile.BLOCKSIZE)
        yield bytes(2 * tarfile.BLOCKSIZE)
    finally:
        for event_file in opened.values():
            event_file.file.close()


def _padded(event_file: JobFile) -> Iterator[bytes]:
    """Its `size` bytes; a file cut short meanwhile is padded with zeros: the header promised that size."""
    left = event_file.size
    for chunk in event_file.chunks():
        left -= len(chunk)
        yield chunk
    while left > 0:
        yield bytes(min(READ_CHUNK, left))
        left -= READ_CHUNK
