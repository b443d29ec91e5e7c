"""A run's checkpoints and logs sent where the API and other hosts can reach them, and a stored checkpoint
brought back to resume from.

With artifact_store=shared every path is already visible everywhere and nothing is copied. With s3, the job's
uploader thread (worker/uploads.py) sends each checkpoint and records it as its s3:// URI (the local file
stays, for a fast resume on this host), and sends what each log gained as a new part: an object cannot be
appended to, and sending a whole log again at every heartbeat would cost the square of the job's length.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from core.config import get_settings
from core.storage import ObjectStore, is_object_uri, locate
from trainers.events import LAUNCHER_LOG, LOG_DIR, CheckpointEvent

log = logging.getLogger(__name__)

S3_ERRORS = (BotoCoreError, ClientError)
RESUME_DIR = "resume"  # beside checkpoints/, whose step-*.pt files the trainer prunes
EVENT_TIME = "event-time"  # object metadata: which CheckpointEvent's file the object holds
MAX_PART_BYTES = 8 << 20  # a log that grew by more goes up in several parts, each read into memory alone


def upload_checkpoint(
    store: ObjectStore, job_id: int, run_dir: Path, event: CheckpointEvent, progress: Callable[[int], None]
) -> str | None:
    """Send the checkpoint's file unless its object holds it already; the URI its row records, or None when
    the trainer pruned the file before it could be sent (its checkpoint_removed event follows)."""
    key = store.run_key(job_id, event.path)
    stamp = {EVENT_TIME: repr(event.time)}
    file = run_dir / event.path
    # The event stream is re-read after every restart: an object already holding this event's file stays.
    if store.metadata(key) != stamp:
        if not file.is_file():
            return None
        store.put_file(file, key, stamp, progress)
    return store.uri(key)


class LogParts:
    """Sends the bytes each of the run's logs gained since the last call, as the next part of its object:
    every byte goes up once however long the job runs."""

    def __init__(self, store: ObjectStore, job_id: int, run_dir: Path, *, launcher_log: bool) -> None:
        self.store = store
        self.job_id = job_id
        self.run_dir = run_dir
        # Every node of a job writes a launcher.log of its own, and one object can hold only one of them.
        self.launcher_log = launcher_log
        self.sent: dict[str, int] = {}  # by path in the run directory: how many bytes are stored

    def _logs(self) -> list[tuple[str, Path]]:
        files = sorted((self.run_dir / LOG_DIR).glob("*.log"))
        return [(f"{LOG_DIR}/{f.name}", f) for f in files if self.launcher_log or f.name != LAUNCHER_LOG]

    def send(self, abandoned: threading.Event) -> None:
        for relative, path in self._logs():
            try:
                self._send(relative, path, abandoned)
            except (OSError, *S3_ERRORS):
                # Logs are for reading, not for training: a store outage must not stop the job.
                log.warning("job %s: could not upload %s", self.job_id, relative, exc_info=True)

    def _send(self, relative: str, path: Path, abandoned: threading.Event) -> None:
        key = self.store.run_key(self.job_id, relative)
        size = path.stat().st_size  # bytes written from now on go in the next part
        sent = self.sent.get(relative)
        if sent is None or size < sent:
            # Parts stored by another host, or by this one before a requeue, may hold other bytes: start over.
            self.store.delete_parts(key)
            sent = self.sent[relative] = 0
        with path.open("rb") as f:
            f.seek(sent)
            while sent < size and not abandoned.is_set():
                part = f.read(min(MAX_PART_BYTES, size - sent))
                if not part:  # cut short since its size was taken: the next call starts it over
                    return
                self.store.put_bytes(self.store.part_key(key, sent + len(part)), part)
                sent = self.sent[relative] = sent + len(part)

    def unsent(self) -> list[str]:
        """The logs with bytes not stored yet, for a report."""
        late = []
        for relative, path in self._logs():
            sent = self.sent.get(relative, 0)
            if path.stat().st_size > sent:
                late.append(f"{relative} from byte {sent}")
        return late


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
