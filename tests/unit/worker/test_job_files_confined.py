"""The worker reads a job's run directory as root, through the confined opener only: the event tail, the
checkpoint and log uploads, the resume check, the failure report and the kill's standby ids neither follow
a link the job's ranks planted (at the file or at a folder on its way) nor wait on a FIFO (issue 28, defect
5)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from core.config import get_settings
from core.storage import ObjectStore
from jobspec.events import EVENTS_FILE, CheckpointEvent, PhaseEvent
from jobspec.files import JobFileRefused
from worker.executors.local.kill import JobMark
from worker.failure import ERROR_FILE, FailureKind, classify_failure, root_cause
from worker.publish import LogParts, UnusableCheckpoint, resume_file, upload_checkpoint
from worker.sandbox import resume_binding
from worker.tail import EventTail

pytest_plugins = ["tests.unit.s3_fixtures"]

# A FIFO opened without O_NONBLOCK waits for a writer forever: that is a failure, not a slow test.
pytestmark = pytest.mark.timeout(30)

SECRET = b"root:$6$the-worker-may-read-this-the-job-may-not"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_bytes(SECRET)
    return path


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRAINYARD_RUNS_DIR", str(tmp_path / "runs"))
    get_settings.cache_clear()
    path = tmp_path / "runs" / "7"
    path.mkdir(parents=True)
    return path


def phase_line() -> bytes:
    return PhaseEvent(phase="running").model_dump_json().encode() + b"\n"


def test_the_event_tail_reads_no_link_and_waits_on_no_fifo(run_dir: Path, secret: Path) -> None:
    (run_dir / EVENTS_FILE).write_bytes(phase_line())
    assert [type(e) for e in EventTail(run_dir / EVENTS_FILE).read()] == [PhaseEvent], "a plain one is read"
    secret.write_bytes(phase_line())  # another job's events, or anything the worker may read
    (run_dir / EVENTS_FILE).unlink()
    (run_dir / EVENTS_FILE).symlink_to(secret)
    assert EventTail(run_dir / EVENTS_FILE).read() == []
    (run_dir / EVENTS_FILE).unlink()
    os.mkfifo(run_dir / EVENTS_FILE)
    assert EventTail(run_dir / EVENTS_FILE).read() == []


def saved(run_dir: Path, content: bytes) -> CheckpointEvent:
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    (run_dir / "checkpoints/step-1.pt").write_bytes(content)
    return CheckpointEvent(step=1, epoch=0, path="checkpoints/step-1.pt", size_bytes=len(content))


def stored(store: ObjectStore) -> list[str]:
    listed = store.client.list_objects_v2(Bucket=store.bucket).get("Contents", [])
    return [item["Key"] for item in listed]


def test_a_checkpoint_upload_sends_no_planted_link_fifo_or_oversized_file(
    run_dir: Path, secret: Path, tmp_path: Path, s3_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = saved(run_dir, b"weights")
    checkpoint = run_dir / event.path
    checkpoint.unlink()
    checkpoint.symlink_to(secret)
    assert upload_checkpoint(s3_store, 7, run_dir, event, lambda _: None) is None
    checkpoint.unlink()
    os.mkfifo(checkpoint)
    assert upload_checkpoint(s3_store, 7, run_dir, event, lambda _: None) is None
    checkpoint.unlink()
    (run_dir / "checkpoints").rmdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "step-1.pt").write_bytes(SECRET)
    (run_dir / "checkpoints").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert upload_checkpoint(s3_store, 7, run_dir, event, lambda _: None) is None
    assert stored(s3_store) == []

    (run_dir / "checkpoints").unlink()
    saved(run_dir, b"weights" * 1000)  # 7 kB, over the 4 kB below
    monkeypatch.setenv("TRAINYARD_JOB_MAX_FILE_GB", "4e-6")
    get_settings.cache_clear()
    assert upload_checkpoint(s3_store, 7, run_dir, event, lambda _: None) is None
    assert stored(s3_store) == []
    saved(run_dir, b"weights")
    assert upload_checkpoint(s3_store, 7, run_dir, event, lambda _: None) is not None, "a plain one goes up"


def test_log_uploads_send_no_planted_link_and_wait_on_no_fifo(
    run_dir: Path, secret: Path, tmp_path: Path, s3_store: ObjectStore
) -> None:
    logs = run_dir / "logs"
    logs.mkdir()
    (logs / "rank0.log").symlink_to(secret)
    os.mkfifo(logs / "rank1.log")
    (logs / "rank2.log").write_text("rank 2's own output\n")
    parts = LogParts(s3_store, 7, run_dir, launcher_log=True)
    parts.send(threading.Event())
    assert [key.split("/logs/")[1].split("/")[0] for key in stored(s3_store)] == ["rank2.log.parts"]
    assert parts.unsent() == []

    (logs / "rank2.log").unlink()
    (logs / "rank1.log").unlink()
    (logs / "rank0.log").unlink()
    logs.rmdir()
    (tmp_path / "rank3.log").write_bytes(SECRET)
    logs.symlink_to(tmp_path, target_is_directory=True)  # a whole folder of what the worker may read
    before = stored(s3_store)
    LogParts(s3_store, 7, run_dir, launcher_log=True).send(threading.Event())
    assert stored(s3_store) == before


def test_a_resume_loads_no_checkpoint_through_a_linked_folder(run_dir: Path, tmp_path: Path) -> None:
    """The bytes even hash to the sha256 recorded: what is refused is the way to them."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "step-1.pt").write_bytes(SECRET)
    (run_dir / "checkpoints").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    path = str(run_dir / "checkpoints/step-1.pt")
    with pytest.raises(UnusableCheckpoint, match="checkpoints is a symbolic link"):
        resume_file(path, hashlib.sha256(SECRET).hexdigest(), run_dir)
    (run_dir / "checkpoints").unlink()
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints/step-1.pt").write_bytes(b"weights")
    assert resume_file(path, hashlib.sha256(b"weights").hexdigest(), run_dir) == path
    with pytest.raises(UnusableCheckpoint, match="not a plain name"):
        resume_file(str(tmp_path / "elsewhere" / "step-1.pt"), hashlib.sha256(SECRET).hexdigest(), run_dir)


def test_the_failure_report_waits_on_no_fifo_and_reads_no_link(run_dir: Path, secret: Path) -> None:
    os.mkfifo(run_dir / ERROR_FILE)
    (run_dir / "logs").mkdir()
    os.mkfifo(run_dir / "logs" / "rank0.log")
    (run_dir / "logs" / "rank1.log").symlink_to(secret)
    assert classify_failure(run_dir, 1) is FailureKind.CRASH
    assert root_cause(run_dir, 1) == "exit code 1; no log output"


def test_the_kill_reads_standby_ids_through_no_link_or_fifo(run_dir: Path, secret: Path) -> None:
    mark = JobMark("7/1/host", run_dir)
    mark.standby_file.write_text("standby-a\n")
    assert mark.standby_ids() == {"standby-a"}
    mark.standby_file.unlink()
    secret.write_text("another-jobs-standby\n")
    mark.standby_file.symlink_to(secret)
    assert mark.standby_ids() == set()
    mark.standby_file.unlink()
    os.mkfifo(mark.standby_file)
    assert mark.standby_ids() == set()


def test_a_checkpoint_fetched_for_a_resume_is_written_through_no_planted_link(
    run_dir: Path, tmp_path: Path, s3_store: ObjectStore
) -> None:
    """The worker downloads an object into the run directory's resume/ folder: a job that made that folder a
    link, or the file's name one, must not have the worker (root, perhaps) write where it points."""
    key = s3_store.run_key(3, "checkpoints/step-00000002.pt")
    s3_store.put_bytes(key, b"weights")
    sha256 = hashlib.sha256(b"weights").hexdigest()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "resume").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UnusableCheckpoint, match="resume is not a plain folder"):
        resume_file(s3_store.uri(key), sha256, run_dir)
    assert list(elsewhere.iterdir()) == []
    (run_dir / "resume").unlink()
    (run_dir / "resume").mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    (run_dir / "resume" / "step-00000002.pt").symlink_to(victim)
    fetched = resume_file(s3_store.uri(key), sha256, run_dir)
    assert fetched == str(run_dir / "resume" / "step-00000002.pt")
    assert Path(fetched).read_bytes() == b"weights" and not Path(fetched).is_symlink()
    assert victim.read_bytes() == SECRET


def test_the_sandbox_binds_another_job_s_checkpoint_through_no_planted_link(
    run_dir: Path, tmp_path: Path
) -> None:
    """The checkpoint a retry resumes from lies in its parent's run directory, which the parent's ranks
    wrote: the descriptor the sandbox binds is the regular file there, never what a link leads to."""
    settings = get_settings()
    parent = run_dir.parent / "3"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "step-1.pt").write_bytes(SECRET)
    (parent / "checkpoints").parent.mkdir()
    (parent / "checkpoints").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    checkpoint = parent / "checkpoints" / "step-1.pt"
    with pytest.raises(JobFileRefused, match="3/checkpoints is a symbolic link, not a folder"):
        resume_binding(settings, str(checkpoint), run_dir)
    with pytest.raises(JobFileRefused, match="no leading /, no"):
        resume_binding(settings, str(tmp_path / "elsewhere" / "step-1.pt"), run_dir)
    (parent / "checkpoints").unlink()
    (parent / "checkpoints").mkdir()
    checkpoint.write_bytes(b"weights")
    bound = resume_binding(settings, str(checkpoint), run_dir)
    assert bound is not None and bound.path == checkpoint
    try:
        assert os.fstat(bound.fd).st_ino == checkpoint.stat().st_ino
    finally:
        os.close(bound.fd)
    assert resume_binding(settings, str(run_dir / "resume" / "step-1.pt"), run_dir) is None  # its own
