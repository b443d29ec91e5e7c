"""A job's uploads, on a thread of their own: the supervisor's loop and the job's heartbeat never wait for the
object store, however large a checkpoint or slow the link.

Work is done in the order it was queued, so a pruned checkpoint's object is deleted only after it was sent.
A checkpoint's row is written once its object is stored, so the API lists only what it can serve. Between
checkpoints the thread sends what the logs gained, every heartbeat_s. With artifact_store=shared no thread
runs: the file already lies where the API reads it, and its row is written at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from sqlalchemy import delete
from sqlalchemy.orm import Session

from core.config import get_settings
from core.db import session_scope
from core.models import Checkpoint, utcnow
from core.storage import object_store
from core.upsert import insert_or_update
from jobspec.events import CheckpointEvent, CheckpointRemovedEvent
from worker.publish import S3_ERRORS, LogParts, upload_checkpoint

log = logging.getLogger(__name__)

STOP_WAIT_S = 5.0  # for an abandoned upload to notice, at its next chunk


class Abandoned(Exception):
    """Raised inside an upload that the job's end stopped waiting for."""


@dataclass(frozen=True)
class Save:
    event: CheckpointEvent


@dataclass(frozen=True)
class Remove:
    event: CheckpointRemovedEvent


@dataclass(frozen=True)
class Flush:
    """Send the logs now; `done` is set once this and everything queued before it is through."""

    done: threading.Event = field(default_factory=threading.Event)


Work = Save | Remove | Flush


class Uploads:
    def __init__(self, job_id: int, run_dir: Path, *, launcher_log: bool) -> None:
        settings = get_settings()
        self.job_id = job_id
        self.run_dir = run_dir
        self.store = object_store(settings)
        self.logs = (
            None if self.store is None else LogParts(self.store, job_id, run_dir, launcher_log=launcher_log)
        )
        self.every_s = settings.heartbeat_s
        # The head stays until done, so what is in flight counts as not stored.
        self.todo: deque[Work] = deque()
        self.failed: list[str] = []
        self.changed = threading.Condition()
        self.closing = False
        self.abandoned = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"uploads-job-{job_id}", daemon=True)

    def __enter__(self) -> Uploads:
        if self.store is not None:
            self.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Left on an error, stop at once; otherwise what is queued may still serve the job's next attempt.
        self.close(get_settings().upload_drain_s if exc is None else 0.0)

    def checkpoint_saved(self, session: Session, event: CheckpointEvent) -> None:
        if self.store is None:
            _record(session, self.job_id, event, str(self.run_dir / event.path))
        else:
            self._queue(Save(event))

    def checkpoint_removed(self, session: Session, event: CheckpointRemovedEvent) -> None:
        if self.store is None:
            _forget(session, self.job_id, [str(self.run_dir / event.path)])
        else:
            self._queue(Remove(event))

    def settle(self, wait_s: float) -> list[str]:
        """Wait up to `wait_s` for everything queued to be stored and the logs sent as they are now; what is
        still not stored."""
        if self.store is None or self.closing:
            return self.not_stored()
        flush = Flush()
        self._queue(flush)
        flush.done.wait(wait_s)
        return self.not_stored()

    def close(self, wait_s: float = 0.0) -> list[str]:
        """Settle for up to `wait_s`, then stop the thread, abandoning what it still sends; what was not
        stored. Closing again returns the same."""
        if self.store is None or self.closing:
            return self.not_stored()
        if wait_s:
            self.settle(wait_s)
        with self.changed:
            self.closing = True
            self.changed.notify()
        self.abandoned.set()
        self.thread.join(STOP_WAIT_S)
        return self.not_stored()

    def not_stored(self) -> list[str]:
        with self.changed:
            queued = [work.event.path for work in self.todo if isinstance(work, Save)]
        return self.failed + queued + (self.logs.unsent() if self.logs else [])

    def _queue(self, work: Work) -> None:
        with self.changed:
            self.todo.append(work)
            self.changed.notify()

    def _run(self) -> None:
        logs_due = time.monotonic() + self.every_s
        while True:
            with self.changed:
                self.changed.wait_for(
                    lambda: self.todo or self.closing, timeout=max(0.0, logs_due - time.monotonic())
                )
                if self.closing:
                    return
                work = self.todo[0] if self.todo else None
            try:
                if isinstance(work, Save):
                    self._save(work.event)
                elif isinstance(work, Remove):
                    self._remove(work.event)
                else:  # a Flush, or the logs' turn
                    assert self.logs is not None
                    self.logs.send(self.abandoned)
                    logs_due = time.monotonic() + self.every_s
            except Abandoned:
                return
            except Exception:  # a bad item (a database away) must not stop the uploads that follow
                log.exception("job %s: upload failed: %s", self.job_id, work)
                if isinstance(work, Save):
                    self.failed.append(f"{work.event.path} (failed: see the worker's log)")
            with self.changed:
                if work is not None:
                    self.todo.popleft()
            if isinstance(work, Flush):
                work.done.set()

    def _save(self, event: CheckpointEvent) -> None:
        assert self.store is not None
        try:
            path = upload_checkpoint(self.store, self.job_id, self.run_dir, event, self._check_abandoned)
        except S3_ERRORS:
            log.exception("job %s: could not upload %s; only this host can read it", self.job_id, event.path)
            self.failed.append(f"{event.path} (upload failed; kept on this host)")
            path = str(self.run_dir / event.path)  # still what a restart on this host resumes from
        self._check_abandoned(0)  # once the job's end reports it as not stored, it gets no row
        if path is not None:
            with session_scope() as session:
                _record(session, self.job_id, event, path)

    def _remove(self, event: CheckpointRemovedEvent) -> None:
        """The row first, so the API never lists a checkpoint whose object is gone."""
        assert self.store is not None
        key = self.store.run_key(self.job_id, event.path)
        with session_scope() as session:
            _forget(session, self.job_id, [self.store.uri(key), str(self.run_dir / event.path)])
        try:
            self.store.delete(key)
        except S3_ERRORS:
            log.exception("job %s: could not delete %s's object; deleting the job will", self.job_id, key)

    def _check_abandoned(self, _sent: int) -> None:
        if self.abandoned.is_set():
            raise Abandoned(f"job {self.job_id}: its end stopped waiting for this upload")


def _record(session: Session, job_id: int, event: CheckpointEvent, path: str) -> None:
    row = {
        "job_id": job_id,
        "step": event.step,
        "epoch": event.epoch,
        "path": path,
        "size_bytes": event.size_bytes,
        "sha256": event.sha256,
        "created_at": utcnow(),
    }
    # A restart that saves the same step again replaces its file: the row takes the new file's sha256.
    insert_or_update(session, Checkpoint, row, ["job_id", "path"])


def _forget(session: Session, job_id: int, paths: list[str]) -> None:
    session.execute(delete(Checkpoint).where(Checkpoint.job_id == job_id, Checkpoint.path.in_(paths)))
