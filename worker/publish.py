"""A run's checkpoints and logs sent where the API and other hosts can reach them, and a stored checkpoint
brought back to resume from.

With artifact_store=shared every path is already visible everywhere and nothing is copied. With s3, the job's
uploader thread (worker/uploads.py) sends each checkpoint and records it as its s3:// URI (the local file
stays, for a fast resume on this host), and sends what each log gained as a new part: an object cannot be
appended to, and sending a whole log again at every heartbeat would cost the square of the job's length.

A checkpoint is resumed from only while its bytes hash to the sha256 recorded with it, and a file is sent
only from inside its run directory: any rank can write there, links included.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from core.config import get_settings
from core.storage import ObjectStore, is_object_uri, locate
from jobspec.events import LAUNCHER_LOG, LOG_DIR, CheckpointEvent
from jobspec.files import (
    JobFileError,
    JobFileMissing,
    job_files,
    largest_job_file,
    mismatch,
    open_job_file,
    open_under,
)
from worker.rundir import RunDirTampered, write_fresh

log = logging.getLogger(__name__)

S3_ERRORS = (BotoCoreError, ClientError)
RESUME_DIR = "resume"  # beside checkpoints/, whose step-*.pt files the trainer prunes
EVENT_TIME = "event-time"  # object metadata: which CheckpointEvent's file the object holds
SHA256 = "sha256"  # object metadata: the digest the trainer took of the file
MAX_PART_BYTES = 8 << 20  # a log that grew by more goes up in several parts, each read into memory alone


def upload_checkpoint(
    store: ObjectStore, job_id: int, run_dir: Path, event: CheckpointEvent, progress: Callable[[int], None]
) -> str | None:
    """Send the checkpoint's file unless its object holds it already; the URI its row records, or None when
    the trainer pruned the file before it could be sent (its checkpoint_removed event follows), or a link
    leads it out of the run directory (never sent: the worker may read what the job may not)."""
    key = store.run_key(job_id, event.path)
    stamp = {EVENT_TIME: repr(event.time)} | ({SHA256: event.sha256} if event.sha256 else {})
    # The event stream is re-read after every restart: an object already holding this event's file stays.
    if store.metadata(key) != stamp:
        try:
            opened = open_job_file(run_dir, event.path, largest_job_file(get_settings().job_max_file_gb))
        except JobFileMissing:
            return None
        except JobFileError as exc:
            log.warning("job %s: not storing checkpoint %s: %s", job_id, event.path, exc)
            return None
        with opened:
            # The opened file itself, whatever its name has been made into since: boto3 takes a path.
            store.put_file(Path(f"/proc/self/fd/{opened.file.fileno()}"), key, stamp, progress)
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

    def _logs(self) -> list[str]:
        """The logs' names in the run directory: the regular files right in logs/ (a link is not listed)."""
        try:
            names = job_files(self.run_dir, LOG_DIR, deep=False)
        except JobFileError:  # no logs folder yet, or the ranks made it a link
            return []
        skipped = () if self.launcher_log else (f"{LOG_DIR}/{LAUNCHER_LOG}",)
        return [n for n in names if n.endswith(".log") and n not in skipped]

    def send(self, abandoned: threading.Event) -> None:
        for relative in self._logs():
            try:
                self._send(relative, abandoned)
            except (OSError, JobFileError, *S3_ERRORS):
                # Logs are for reading, not for training: a store outage must not stop the job.
                log.warning("job %s: could not upload %s", self.job_id, relative, exc_info=True)

    def _send(self, relative: str, abandoned: threading.Event) -> None:
        key = self.store.run_key(self.job_id, relative)
        with open_job_file(self.run_dir, relative, None) as opened:
            f, size = opened.file, opened.size  # bytes written from now on go in the next part
            sent = self.sent.get(relative)
            if sent is None or size < sent:
                # Parts stored by another host, or by this one before a requeue, may hold other bytes.
                self.store.delete_parts(key)
                sent = self.sent[relative] = 0
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
        for relative in self._logs():
            sent = self.sent.get(relative, 0)
            try:
                with open_job_file(self.run_dir, relative, None) as opened:
                    if opened.size > sent:
                        late.append(f"{relative} from byte {sent}")
            except JobFileError:  # gone or swapped for a link since it was listed: nothing to send
                continue
        return late


class UnusableCheckpoint(Exception):
    """A recorded checkpoint this host cannot resume from; the message says why."""


def _sound(file: Path, sha256: str | None) -> Path:
    """The file, when it is there under the runs directory with the bytes recorded (sha256 None: recorded
    before checksums). It lies in a job's run directory, so it is read through the confined opener."""
    settings = get_settings()
    try:
        with open_under(settings.runs_dir, file, largest_job_file(settings.job_max_file_gb)) as opened:
            why = None if sha256 is None else mismatch(opened.sha256(), sha256)
    except JobFileMissing:
        raise UnusableCheckpoint("its file is gone") from None
    except JobFileError as exc:
        raise UnusableCheckpoint(str(exc)) from None
    if why is not None:
        raise UnusableCheckpoint(why)
    return file


def resume_file(path: str, sha256: str | None, run_dir: Path) -> str:
    """A file this host can load for a recorded checkpoint, its bytes checked against the sha256 recorded
    with it: a local path as it is; an s3:// URI as the file this host wrote for it while that one is sound,
    or else the object downloaded into the run directory. Raises UnusableCheckpoint."""
    if not is_object_uri(path):
        return str(_sound(Path(path), sha256))
    found = locate(get_settings(), path)
    if found is None:
        raise UnusableCheckpoint(
            "it is not in this worker's object store; set TRAINYARD_ARTIFACT_STORE=s3 and "
            "TRAINYARD_S3_BUCKET/TRAINYARD_S3_PREFIX to the ones the job that saved it used"
        )
    store, key = found
    twin = _local_twin(store, key)
    with contextlib.suppress(UnusableCheckpoint):
        return str(_sound(twin, sha256))
    if not store.exists(key):
        raise UnusableCheckpoint("its object is gone")
    try:
        target = write_fresh(run_dir, RESUME_DIR, twin.name, lambda file: store.download_to(key, file))
    except RunDirTampered as exc:
        raise UnusableCheckpoint(f"it cannot be fetched into the run directory: {exc}") from exc
    return str(_sound(target, sha256))


def _local_twin(store: ObjectStore, key: str) -> Path:
    """Where the worker that uploaded `key` wrote its file, which exists if that worker ran on this host."""
    return get_settings().runs_dir / store.run_path(key)
