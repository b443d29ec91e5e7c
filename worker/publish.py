"""A run's checkpoints and logs, published where the API and other hosts can reach them, and a stored
checkpoint brought back to resume from.

With artifact_store=shared every path is already visible everywhere and nothing is copied. With s3, each
checkpoint is uploaded as its event is applied and recorded as its s3:// URI (the local file stays, for a fast
resume on this host), and log files are uploaded whole whenever they grew: an object cannot be appended to.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from core.config import get_settings
from core.storage import ObjectStore, is_object_uri, locate, object_store
from trainers.events import LOG_DIR, CheckpointEvent, Event

log = logging.getLogger(__name__)

S3_ERRORS = (BotoCoreError, ClientError)
RESUME_DIR = "resume"  # beside checkpoints/, whose step-*.pt files the trainer prunes
EVENT_TIME = "event-time"  # object metadata: which CheckpointEvent's file the object holds


def recorded_path(store: ObjectStore | None, job_id: int, run_dir: Path, relative: str) -> str:
    """What a Checkpoint row's `path` holds for a file of the run directory."""
    return str(run_dir / relative) if store is None else store.uri(store.run_key(job_id, relative))


def publish_checkpoints(job_id: int, run_dir: Path, events: Sequence[Event]) -> dict[str, str]:
    """The recorded path of each checkpoint in `events`, by its path in the run directory. Uploads happen
    here, before the caller writes SQL, so no transaction stays open while a large file travels."""
    store = object_store(get_settings())
    return {
        event.path: _publish(store, job_id, run_dir, event)
        for event in events
        if isinstance(event, CheckpointEvent)
    }


def _publish(store: ObjectStore | None, job_id: int, run_dir: Path, event: CheckpointEvent) -> str:
    if store is None:
        return recorded_path(store, job_id, run_dir, event.path)
    key = store.run_key(job_id, event.path)
    stamp = {EVENT_TIME: repr(event.time)}
    file = run_dir / event.path
    try:
        # The event stream is re-read after every restart: an object already holding this event's file stays.
        # A file pruned since is simply not there; its checkpoint_removed event follows in the stream.
        if file.is_file() and store.metadata(key) != stamp:
            store.put_file(file, key, stamp)
    except S3_ERRORS:
        log.exception("job %s: could not upload %s; only this host can read it", job_id, event.path)
        return str(file)
    return store.uri(key)


def unpublish_checkpoint(job_id: int, run_dir: Path, relative: str) -> str:
    """Delete a pruned checkpoint's object; the recorded path its row is found by."""
    store = object_store(get_settings())
    if store is not None:
        try:
            store.delete(store.run_key(job_id, relative))
        except S3_ERRORS:
            log.exception("job %s: could not delete %s's object; deleting the job will", job_id, relative)
    return recorded_path(store, job_id, run_dir, relative)


class LogPublisher:
    """Uploads the run's log files that changed size since the last call (artifact_store=s3 only)."""

    def __init__(self, job_id: int, run_dir: Path) -> None:
        self.job_id = job_id
        self.run_dir = run_dir
        self.store = object_store(get_settings())
        self.sizes: dict[str, int] = {}

    def publish(self) -> None:
        if self.store is None:
            return
        for path in sorted((self.run_dir / LOG_DIR).glob("*.log")):
            relative = f"{LOG_DIR}/{path.name}"
            try:
                # The size before the upload: bytes written meanwhile are sent next time.
                size = path.stat().st_size
                if self.sizes.get(relative) != size:
                    self.store.put_file(path, self.store.run_key(self.job_id, relative))
                    self.sizes[relative] = size
            except (OSError, *S3_ERRORS):
                # Logs are for reading, not for training: a store outage must not stop the job.
                log.warning("job %s: could not upload %s", self.job_id, relative, exc_info=True)


def checkpoint_exists(path: str) -> bool:
    """Whether a recorded checkpoint can still be resumed from on this host."""
    if not is_object_uri(path):
        return Path(path).is_file()
    found = locate(get_settings(), path)
    return found is not None and (_local_twin(*found).is_file() or found[0].exists(found[1]))


def local_resume_path(path: str | None, run_dir: Path) -> str | None:
    """A file this host can load for a recorded checkpoint path: a local path as it is; an s3:// URI as the
    file this host wrote for it, when it has it, or else downloaded into the run directory."""
    if path is None or not is_object_uri(path):
        return path
    found = locate(get_settings(), path)
    if found is None:
        raise ValueError(
            f"checkpoint {path} is not in this worker's object store; set TRAINYARD_ARTIFACT_STORE=s3 and "
            "TRAINYARD_S3_BUCKET/TRAINYARD_S3_PREFIX to the ones the job that saved it used"
        )
    store, key = found
    twin = _local_twin(store, key)
    if twin.is_file():
        return str(twin)
    target = run_dir / RESUME_DIR / twin.name
    store.download(key, target)
    return str(target)


def _local_twin(store: ObjectStore, key: str) -> Path:
    """Where the worker that uploaded `key` wrote its file, which exists if that worker ran on this host."""
    return get_settings().runs_dir / store.run_path(key)
