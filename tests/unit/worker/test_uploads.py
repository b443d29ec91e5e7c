"""Uploads on their own thread, the heartbeat on another: a job whose checkpoint takes longer to upload than
the lease lasts is not reaped, its row appears once the object is stored, and a job's end that stops
waiting says what it left behind. Real threads, a real fake trainer process and the real reaper on SQLite;
the object store is moto's, with an upload made to block."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select

from core.clock import as_utc
from core.config import get_settings
from core.db import session_scope
from core.models import Checkpoint, utcnow
from core.states import JobStatus
from core.storage import ObjectStore
from worker import uploads
from worker.executors.local.reaper import Rings, reap
from worker.executors.local.runner import run_job

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures", "tests.unit.s3_fixtures"]

LEASE_S = 1.5


@dataclass(frozen=True)
class SlowStore(ObjectStore):
    """moto's store, whose checkpoint uploads hold until released, reporting progress meanwhile as boto3
    does for each chunk sent (which is where an abandoned upload stops)."""

    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def put_file(
        self,
        path: Path,
        key: str,
        metadata: dict[str, str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.started.set()
        while not self.release.wait(0.05):
            if progress is not None:
                progress(0)
        super().put_file(path, key, metadata, progress)


@pytest.fixture
def slow_store(
    database: WorkerDb, s3_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SlowStore]:
    monkeypatch.setenv("TRAINYARD_LEASE_TIMEOUT_S", str(LEASE_S))
    monkeypatch.setenv("TRAINYARD_HEARTBEAT_S", "0.1")
    get_settings.cache_clear()
    store = SlowStore(s3_store.client, s3_store.bucket, s3_store.prefix)
    monkeypatch.setattr(uploads, "object_store", lambda settings: store)
    yield store
    store.release.set()


def recorded_paths() -> list[str]:
    with session_scope() as session:
        return list(session.scalars(select(Checkpoint.path)))


def threads_of(job_id: int) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.endswith(f"-job-{job_id}")]


def test_an_upload_longer_than_the_lease_does_not_get_the_job_reaped(
    database: WorkerDb,
    doorbell: Doorbell,
    fake_trainer: Callable[[str], None],
    slow_store: SlowStore,
) -> None:
    fake_trainer("checkpoint")
    job_id = database.add_job()
    supervising = threading.Thread(target=run_job, args=(job_id,))
    supervising.start()
    assert slow_store.started.wait(30), "the checkpoint's upload never began"

    blocked_until = time.monotonic() + 3 * LEASE_S
    while time.monotonic() < blocked_until:
        assert reap(Rings()).requeued == [], "reaped while its upload was in flight"
        assert recorded_paths() == [], "listed before its object was stored"
        time.sleep(0.1)
    job = database.job(job_id)
    # The events after the checkpoint were applied: the loop did not wait for the upload; the end does.
    assert (job.status, job.progress_step) == (JobStatus.RUNNING, 10)
    assert job.heartbeat_at is not None
    assert utcnow() - as_utc(job.heartbeat_at) < timedelta(seconds=LEASE_S)

    slow_store.release.set()
    supervising.join(30)
    job = database.job(job_id)
    assert (job.status, job.message) == (JobStatus.SUCCEEDED, "training finished")
    assert recorded_paths() == [slow_store.uri(slow_store.run_key(job_id, "checkpoints/step-10.pt"))]
    assert slow_store.read_parts(slow_store.run_key(job_id, "logs/launcher.log"), 0, 100).startswith(
        b"=== attempt 1 node 0"
    )
    assert threads_of(job_id) == []


def test_an_end_that_stops_waiting_says_what_was_not_stored(
    database: WorkerDb,
    doorbell: Doorbell,
    fake_trainer: Callable[[str], None],
    slow_store: SlowStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINYARD_UPLOAD_DRAIN_S", "0.5")
    get_settings.cache_clear()
    fake_trainer("checkpoint")
    job_id = database.add_job()

    run_job(job_id)

    job = database.job(job_id)
    assert job.status == JobStatus.SUCCEEDED
    # The logs may have gone up at their own pace before the checkpoint was queued, or not.
    assert (job.message or "").startswith(
        "training finished; not in the object store when it ended: checkpoints/step-10.pt"
    )
    assert (job.message or "").endswith("(uploads wait up to TRAINYARD_UPLOAD_DRAIN_S=0.5 s)")
    assert recorded_paths() == []
    assert not slow_store.exists(slow_store.run_key(job_id, "checkpoints/step-10.pt"))
    assert threads_of(job_id) == [], "the abandoned upload stopped at its next chunk"
