"""The worker's side of artifact_store=s3: checkpoints stored before their rows are written and deleted when
pruned, logs sent in appended parts, and a stored checkpoint brought back to resume from."""

from __future__ import annotations

import hashlib
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select

from core.db import session_scope
from core.models import Checkpoint
from core.storage import ObjectStore
from jobspec.events import CheckpointEvent, CheckpointRemovedEvent
from worker import publish
from worker.publish import RESUME_DIR, LogParts, UnusableCheckpoint, resume_file
from worker.tail import apply_events
from worker.uploads import Uploads

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures", "tests.unit.s3_fixtures"]

SHA256_OF_WEIGHTS = hashlib.sha256(b"weights").hexdigest()


def recorded_paths() -> list[str]:
    with session_scope() as session:
        return list(session.scalars(select(Checkpoint.path).order_by(Checkpoint.step)))


def apply(job_id: int, run_dir: Path, *events: CheckpointEvent | CheckpointRemovedEvent) -> None:
    """The events as the supervisor applies them, and their uploads waited for, as at a job's end."""
    with Uploads(job_id, run_dir, launcher_log=True) as uploads:
        with session_scope() as session:
            apply_events(session, job_id, list(events), uploads)
        assert uploads.close(wait_s=10) == []


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
    monkeypatch.setattr(ObjectStore, "put_file", lambda self, path, key, *_: uploads.append(key))
    apply(job_id, run_dir, first, second)  # the stream read again after a restart
    assert uploads == [] and len(recorded_paths()) == 2

    (run_dir / first.path).unlink()
    apply(job_id, run_dir, CheckpointRemovedEvent(path=first.path))
    assert recorded_paths() == [s3_store.uri(keys[1])]
    assert not s3_store.exists(keys[0])

    pruned_unsent = saved(run_dir, 30, b"thirty")
    (run_dir / pruned_unsent.path).unlink()  # the trainer pruned it before the uploader reached it
    apply(job_id, run_dir, pruned_unsent)
    assert recorded_paths() == [s3_store.uri(keys[1])], "no row for a checkpoint that was never stored"


def test_shared_runs_dir_records_the_file_and_uploads_nothing(database: WorkerDb) -> None:
    job_id = database.add_job()
    run_dir = database.runs_dir / str(job_id)
    apply(job_id, run_dir, saved(run_dir, 10, b"ten"))
    assert recorded_paths() == [str(run_dir / "checkpoints/step-10.pt")]
    assert resume_file(recorded_paths()[0], None, run_dir) == recorded_paths()[0]


@dataclass(frozen=True)
class CountingStore(ObjectStore):
    """The real (moto) store, counting the bytes each log part sends."""

    sent: list[int] = field(default_factory=list)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.sent.append(len(data))
        super().put_bytes(key, data)


def test_logs_go_up_in_appended_parts_each_byte_once(
    s3_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CountingStore(s3_store.client, s3_store.bucket, s3_store.prefix)
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    (logs / "launcher.log").write_text("node 1's own launcher log\n")
    rank0, key = logs / "rank0.log", store.run_key(5, "logs/rank0.log")
    parts = LogParts(store, 5, tmp_path / "run", launcher_log=False)
    text = b""
    for beat in range(40):  # a heartbeat's worth of output, then the heartbeat's send
        line = f"step {beat}: ünïcode\n".encode()
        with rank0.open("ab") as f:
            f.write(line)
        text += line
        parts.send(threading.Event())
    parts.send(threading.Event())  # nothing new: nothing sent
    assert sum(store.sent) == len(text), "every byte once, however many heartbeats"
    assert len(store.sent) == 40
    assert store.read_parts(key, 0, 10 * len(text)) == text
    assert store.read_parts(key, 5, 100) == text[5:105], "a range across parts"
    assert store.read_parts(key, len(text), 10) == b""
    assert store.read_parts(store.run_key(5, "logs/launcher.log"), 0, 10) == b"", "node 0's alone"
    assert parts.unsent() == []

    # A large gain goes up in bounded parts; a missing part cuts a read short rather than skip bytes.
    monkeypatch.setattr(publish, "MAX_PART_BYTES", 100)
    with rank0.open("ab") as f:
        f.write(b"x" * 250)
    assert parts.unsent() == [f"logs/rank0.log from byte {len(text)}"]
    parts.send(threading.Event())
    assert store.sent[-3:] == [100, 100, 50]
    assert store.read_parts(key, len(text) - 1, 1000) == text[-1:] + b"x" * 250
    store.delete(store.part_key(key, len(text) + 200))
    assert store.read_parts(key, len(text), 1000) == b"x" * 100

    # A worker new to the log (a requeue onto this host) replaces the parts whole, once.
    before = sum(store.sent)
    LogParts(store, 5, tmp_path / "run", launcher_log=False).send(threading.Event())
    assert sum(store.sent) - before == len(text) + 250
    assert store.read_parts(key, 0, 10 * len(text)) == text + b"x" * 250


def test_resume_uses_this_hosts_file_or_downloads_the_object(
    database: WorkerDb, s3_store: ObjectStore
) -> None:
    job_id = database.add_job()
    run_dir = database.runs_dir / str(job_id)
    apply(job_id, run_dir, saved(run_dir, 10, b"weights"))
    uri = recorded_paths()[0]
    assert resume_file(uri, SHA256_OF_WEIGHTS, run_dir) == str(run_dir / "checkpoints/step-10.pt"), (
        "the host that wrote it"
    )
    (run_dir / "checkpoints/step-10.pt").write_bytes(b"wEights")
    assert resume_file(uri, SHA256_OF_WEIGHTS, run_dir) == str(run_dir / RESUME_DIR / "step-10.pt"), (
        "this host's copy changed on disk since: the object still holds the bytes recorded"
    )

    shutil.rmtree(run_dir)  # another host: only the object is left
    fresh = database.runs_dir / "99"
    local = resume_file(uri, SHA256_OF_WEIGHTS, fresh)
    assert local == str(fresh / RESUME_DIR / "step-10.pt")
    assert Path(local).read_bytes() == b"weights"
    with pytest.raises(UnusableCheckpoint, match="its sha256 is"):
        resume_file(uri, "0" * 64, database.runs_dir / "98")

    s3_store.delete(s3_store.run_key(job_id, "checkpoints/step-10.pt"))
    with pytest.raises(UnusableCheckpoint, match="its object is gone"):
        resume_file(uri, SHA256_OF_WEIGHTS, database.runs_dir / "97")
    with pytest.raises(UnusableCheckpoint, match="TRAINYARD_S3_BUCKET"):
        resume_file(f"s3://elsewhere/{s3_store.run_key(job_id, 'checkpoints/step-10.pt')}", None, fresh)
