"""The worker's side of artifact_store=s3: checkpoints uploaded as their events are applied and deleted when
pruned, logs uploaded when they grow, and a stored checkpoint brought back to resume from."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select

from core.db import session_scope
from core.models import Checkpoint
from core.storage import ObjectStore
from trainers.events import CheckpointEvent, CheckpointRemovedEvent
from worker.publish import RESUME_DIR, LogPublisher, checkpoint_exists, local_resume_path
from worker.tail import apply_events

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures", "tests.unit.s3_fixtures"]


def recorded_paths() -> list[str]:
    with session_scope() as session:
        return list(session.scalars(select(Checkpoint.path).order_by(Checkpoint.step)))


def apply(job_id: int, run_dir: Path, *events: CheckpointEvent | CheckpointRemovedEvent) -> None:
    with session_scope() as session:
        apply_events(session, job_id, run_dir, list(events))


def saved(run_dir: Path, step: int, content: bytes) -> CheckpointEvent:
    relative = f"checkpoints/step-{step}.pt"
    (run_dir / relative).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / relative).write_bytes(content)
    return CheckpointEvent(step=step, epoch=0, path=relative, size_bytes=len(content))


def test_checkpoints_are_uploaded_once_and_deleted_when_pruned(
    database: WorkerDb, s3_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = database.add_job()
    run_dir = database.runs_dir / str(job_id)
    first, second = saved(run_dir, 10, b"ten"), saved(run_dir, 20, b"twenty")
    apply(job_id, run_dir, first, second)
    keys = [s3_store.run_key(job_id, event.path) for event in (first, second)]
    assert recorded_paths() == [s3_store.uri(key) for key in keys]
    assert s3_store.read_range(keys[1], 0, 100) == b"twenty"

    uploads: list[str] = []
    monkeypatch.setattr(ObjectStore, "put_file", lambda self, path, key, metadata=None: uploads.append(key))
    apply(job_id, run_dir, first, second)  # the stream read again after a restart
    assert uploads == [] and len(recorded_paths()) == 2

    (run_dir / first.path).unlink()
    apply(job_id, run_dir, CheckpointRemovedEvent(path=first.path))
    assert recorded_paths() == [s3_store.uri(keys[1])]
    assert not s3_store.exists(keys[0])


def test_shared_runs_dir_records_the_file_and_uploads_nothing(database: WorkerDb) -> None:
    job_id = database.add_job()
    run_dir = database.runs_dir / str(job_id)
    apply(job_id, run_dir, saved(run_dir, 10, b"ten"))
    assert recorded_paths() == [str(run_dir / "checkpoints/step-10.pt")]
    assert checkpoint_exists(recorded_paths()[0])
    assert local_resume_path(recorded_paths()[0], run_dir) == recorded_paths()[0]


def test_logs_are_uploaded_when_they_grow(database: WorkerDb, s3_store: ObjectStore, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    rank0 = run_dir / "logs" / "rank0.log"
    rank0.write_text("step 1\n")
    (run_dir / "logs" / "launcher.log").write_text("launching\n")
    publisher = LogPublisher(5, run_dir)
    publisher.publish()
    assert s3_store.read_range(s3_store.run_key(5, "logs/rank0.log"), 0, 100) == b"step 1\n"
    assert s3_store.read_range(s3_store.run_key(5, "logs/launcher.log"), 0, 100) == b"launching\n"

    s3_store.delete(s3_store.run_key(5, "logs/launcher.log"))  # unchanged files are not sent again
    with rank0.open("a") as f:
        f.write("step 2\n")
    publisher.publish()
    assert s3_store.read_range(s3_store.run_key(5, "logs/rank0.log"), 0, 100) == b"step 1\nstep 2\n"
    assert not s3_store.exists(s3_store.run_key(5, "logs/launcher.log"))


def test_resume_uses_this_hosts_file_or_downloads_the_object(
    database: WorkerDb, s3_store: ObjectStore
) -> None:
    job_id = database.add_job()
    run_dir = database.runs_dir / str(job_id)
    apply(job_id, run_dir, saved(run_dir, 10, b"weights"))
    uri = recorded_paths()[0]
    assert checkpoint_exists(uri)
    assert local_resume_path(uri, run_dir) == str(run_dir / "checkpoints/step-10.pt"), (
        "the host that wrote it"
    )

    shutil.rmtree(run_dir)  # another host: only the object is left
    fresh = database.runs_dir / "99"
    assert checkpoint_exists(uri)
    local = local_resume_path(uri, fresh)
    assert local == str(fresh / RESUME_DIR / "step-10.pt")
    assert Path(local).read_bytes() == b"weights"

    s3_store.delete(s3_store.run_key(job_id, "checkpoints/step-10.pt"))
    assert not checkpoint_exists(uri), "a requeued attempt skips it for an older checkpoint"
    assert local_resume_path(None, fresh) is None
    with pytest.raises(ValueError, match="TRAINYARD_S3_BUCKET"):
        local_resume_path(f"s3://elsewhere/{s3_store.run_key(job_id, 'checkpoints/step-10.pt')}", fresh)
