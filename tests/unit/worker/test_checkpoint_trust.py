"""Checkpoints the worker can trust: a restart passes over a checkpoint whose bytes changed on disk (named in
a job event) for the newest one still sound; event paths that lead out of the run directory are never
recorded; a rank's warning becomes one job event per attempt."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select

from core import launch
from core.db import session_scope
from core.launch import Launch
from core.models import Checkpoint, Job, JobEvent
from core.states import JobStatus
from jobspec.plan import Plan
from worker.executors.local import runner
from worker.executors.local.leases import claim_job
from worker.executors.local.runner import run_job
from worker.tail import EventTail, apply_events
from worker.uploads import Uploads

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

# Attempt 1 saves steps 10 and 20, then 1 KiB inside step 20's file is overwritten (its size unchanged) and
# the run crashes; attempt 2 notes where it was told to resume from, and finishes.
CORRUPTS_ITS_NEWEST = textwrap.dedent(
    """
    import hashlib, json, pathlib, sys
    run_dir = pathlib.Path(sys.argv[1])
    config = json.loads((run_dir / "spec.json").read_text())

    def emit(event):
        with (run_dir / "events.jsonl").open("a") as f:
            f.write(json.dumps(event) + "\\n")

    emit({"kind": "phase", "phase": "running"})
    if config["attempt"] == 1:
        (run_dir / "checkpoints").mkdir()
        for step in (10, 20):
            data, path = bytes([step]) * 4096, f"checkpoints/step-{step:08d}.pt"
            (run_dir / path).write_bytes(data)
            sha256 = hashlib.sha256(data).hexdigest()
            emit({"kind": "checkpoint", "step": step, "epoch": 0, "path": path, "size_bytes": 4096,
                  "sha256": sha256})
        with (run_dir / "checkpoints/step-00000020.pt").open("r+b") as f:
            f.seek(1024)
            f.write(bytes(1024))
        sys.exit(1)
    (run_dir / "resumed_from").write_text(config["plan"]["resume_path"])
    emit({"kind": "done", "step": 30})
    """
)


@pytest.fixture
def trainer_script(
    fake_trainer: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], None]:
    """Like fake_trainer, with a script of the test's own: it gets the run directory as argv[1]."""

    def use(script: str) -> None:
        def build(plan: Plan, **kwargs: Any) -> Launch:
            real = launch.build_launch(plan, **kwargs)
            return Launch([sys.executable, "-c", script, str(kwargs["run_dir"])], real.env)

        monkeypatch.setattr(runner, "build_launch", build)

    return use


def saved() -> dict[int, int]:
    with session_scope() as session:
        return dict(session.execute(select(Checkpoint.step, Checkpoint.id)).tuples().all())


def record_events(job_id: int, run_dir: Path) -> None:
    """What the worker's tail records of the run directory's events.jsonl, read from its start."""
    with session_scope() as session:
        events = EventTail(run_dir / "events.jsonl").drain()
        apply_events(session, job_id, events, Uploads(job_id, run_dir, launcher_log=True))


def test_a_restart_passes_over_a_corrupt_newest_checkpoint_and_says_so(
    database: WorkerDb, doorbell: Doorbell, trainer_script: Callable[[str], None]
) -> None:
    trainer_script(CORRUPTS_ITS_NEWEST)
    job_id = database.add_job({**database.spec(), "limits": {"max_restarts": 1}})
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.attempt) == (JobStatus.SUCCEEDED, 2), job.message
    run_dir = database.runs_dir / str(job_id)
    assert (run_dir / "resumed_from").read_text() == str(run_dir / "checkpoints/step-00000010.pt")
    ids = saved()
    with session_scope() as session:
        notes = session.execute(
            select(JobEvent.from_status, JobEvent.to_status, JobEvent.attempt, JobEvent.message).where(
                JobEvent.reason == "checkpoint_skipped"
            )
        ).all()
    assert len(notes) == 1 and notes[0][:3] == ("starting", "starting", 2), notes
    message = notes[0].message
    assert message.startswith(f"resuming from checkpoint {ids[10]} (step 10); passed over "), message
    assert f"checkpoint {ids[20]} (step 20): its sha256 is " in message, message


def raw_event(**fields: Any) -> str:
    return json.dumps({"kind": "checkpoint", "step": 1, "epoch": 0, "size_bytes": 1, **fields}) + "\n"


def test_checkpoint_paths_that_lead_out_of_the_run_directory_are_not_recorded(database: WorkerDb) -> None:
    job_id = database.add_job()
    claim_job(job_id)
    run_dir = database.runs_dir / str(job_id)
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints/step-00000002.pt").symlink_to("/etc/passwd")
    (run_dir / "checkpoints/step-00000003.pt").write_bytes(b"weights")
    sha256 = hashlib.sha256(b"weights").hexdigest()
    (run_dir / "events.jsonl").write_text(
        raw_event(path="../../../../../../etc/passwd")
        + raw_event(path="/etc/passwd")
        + raw_event(step=2, path="checkpoints/step-00000002.pt")
        + raw_event(step=3, path="checkpoints/step-00000003.pt", sha256=sha256)
    )
    record_events(job_id, run_dir)
    with session_scope() as session:
        rows = session.execute(select(Checkpoint.step, Checkpoint.path, Checkpoint.sha256)).all()
    assert rows == [(3, str(run_dir / "checkpoints/step-00000003.pt"), sha256)]


def test_a_warning_is_one_job_event_per_attempt(database: WorkerDb) -> None:
    job_id = database.add_job()
    claim_job(job_id)
    run_dir = database.runs_dir / str(job_id)
    run_dir.mkdir(parents=True)
    warning = {"kind": "warning", "reason": "nonfinite_loss"}
    lines = [{"kind": "phase", "phase": "running"}]
    lines += [{**warning, "step": step, "message": f"not finite at step {step}"} for step in (7, 9)]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for _ in range(2):  # the file read again from its start, as after a worker's restart
        record_events(job_id, run_dir)
    with session_scope() as session:
        notes = session.execute(
            select(JobEvent.from_status, JobEvent.to_status, JobEvent.message).where(
                JobEvent.reason == "nonfinite_loss"
            )
        ).all()
    assert notes == [("running", "running", "not finite at step 7")]


def test_a_step_saved_again_after_a_restart_takes_the_new_file_s_sha256(database: WorkerDb) -> None:
    """A restart from step 10 saves step 20 again, over the file an earlier attempt wrote: the row must name
    the new bytes, or every later resume and download would refuse a sound file."""
    job_id = database.add_job()
    claim_job(job_id)
    run_dir = database.runs_dir / str(job_id)
    path = run_dir / "checkpoints/step-00000020.pt"
    path.parent.mkdir(parents=True)
    lines = ""
    for content in (b"first attempt", b"second attempt"):
        path.write_bytes(content)
        sha256 = hashlib.sha256(content).hexdigest()
        lines += raw_event(step=20, path="checkpoints/step-00000020.pt", sha256=sha256)
    (run_dir / "events.jsonl").write_text(lines)
    for _ in range(2):  # as the events come, then read again from the start
        with session_scope() as session:
            events = EventTail(run_dir / "events.jsonl").drain()
            apply_events(session, job_id, events, Uploads(job_id, run_dir, launcher_log=True))
        with session_scope() as session:
            assert session.scalars(select(Checkpoint.sha256)).all() == [sha256]


def test_a_resume_from_whose_bytes_changed_fails_the_launch_saying_why(
    database: WorkerDb, doorbell: Doorbell, trainer_script: Callable[[str], None]
) -> None:
    trainer_script(CORRUPTS_ITS_NEWEST)
    source = database.add_job(status=JobStatus.SUCCEEDED)
    path = database.runs_dir / str(source) / "checkpoints/step-00000010.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"weights, overwritten since")
    sha256 = hashlib.sha256(b"weights").hexdigest()
    with session_scope() as session:
        session.add(Checkpoint(job_id=source, step=10, epoch=0, path=str(path), size_bytes=7, sha256=sha256))
    job_id = database.add_job()
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.plan = {**job.plan, "resume_path": str(path)}
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.FAILED, "launch_error")
    assert (job.message or "").startswith("cannot resume from checkpoint.resume_from: its sha256 is "), (
        job.message
    )
