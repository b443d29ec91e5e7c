"""What a job's trainer wrote for inspection tools under runs/<job>/: the profiler's summary and Chrome trace
(profile/), and TensorBoard's event files (tensorboard/), served as a tar streamed file by file."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.orm import Session

from app.services.errors import ProfileNotFound, TensorBoardNotFound
from app.services.jobs import get_job
from app.services.runs import run_dir
from core.config import Settings
from core.models import Job
from trainers.events import TENSORBOARD_DIR
from trainers.files import open_inside
from trainers.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE, ProfileSummary
from trainers.spec import JobSpec

READ_CHUNK = 1 << 20


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


def _profile_file(session: Session, settings: Settings, job_id: int, name: str) -> Path:
    job = get_job(session, job_id)
    path = run_dir(settings, job.id) / PROFILE_DIR / name
    if not path.is_file():
        raise _missing(job)
    return path


def profile_summary(session: Session, settings: Settings, job_id: int) -> ProfileSummary:
    path = _profile_file(session, settings, job_id, SUMMARY_FILE)
    return ProfileSummary.model_validate_json(path.read_text(encoding="utf-8"))


def profile_trace(session: Session, settings: Settings, job_id: int) -> Path:
    return _profile_file(session, settings, job_id, TRACE_FILE)


def _event_files(folder: Path) -> list[Path]:
    """Files under `folder`; links are left out (os.walk does not descend into linked folders either)."""
    paths = (Path(parent, name) for parent, _, names in os.walk(folder) for name in names)
    return sorted(path for path in paths if path.is_file() and not path.is_symlink())


def tensorboard_tar(session: Session, settings: Settings, job_id: int) -> Iterator[bytes]:
    """The job's TensorBoard event files as one tar, members named job<id>/... so that several jobs' tars
    unpack side by side as runs of one `tensorboard --logdir`. Refusals come before the first byte."""
    job = get_job(session, job_id)
    metrics = JobSpec.model_validate(job.spec).metrics
    if not metrics.tensorboard:
        raise TensorBoardNotFound(
            f"job {job.id} writes no TensorBoard events: it was submitted without them; submit it again with "
            '"metrics": {"tensorboard": true}'
        )
    root = run_dir(settings, job.id)
    files = _event_files(root / TENSORBOARD_DIR)
    if not files:
        raise TensorBoardNotFound(
            f"job {job.id} has written no TensorBoard events yet: rank 0 writes them from its first report "
            f"(metrics.every_n_steps={metrics.every_n_steps}); ask again later"
        )
    return _tar_stream(root, files, f"job{job.id}")


def _tar_stream(root: Path, files: list[Path], prefix: str) -> Iterator[bytes]:
    """A tar written as it is sent: each member's size is taken when it is opened, and exactly that many
    bytes follow, so an event file that grows meanwhile (the job runs on) still makes a valid archive."""
    folder = root / TENSORBOARD_DIR
    for path in files:
        try:
            fd = open_inside(path, root)
        except OSError:
            continue  # gone since it was listed, or a link: never followed
        with os.fdopen(fd, "rb") as f:
            status = os.fstat(f.fileno())
            info = tarfile.TarInfo(f"{prefix}/{path.relative_to(folder).as_posix()}")
            info.size, info.mtime, info.mode = status.st_size, int(status.st_mtime), 0o644
            yield info.tobuf(format=tarfile.PAX_FORMAT)
            left = info.size
            while left > 0:
                # A file cut short meanwhile is padded with zeros: the header already promised its size.
                chunk = f.read(min(READ_CHUNK, left)) or bytes(min(READ_CHUNK, left))
                left -= len(chunk)
                yield chunk
        yield bytes(-info.size % tarfile.BLOCKSIZE)
    yield bytes(2 * tarfile.BLOCKSIZE)
