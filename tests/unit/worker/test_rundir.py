"""The worker's writes into a run directory that an earlier attempt's ranks owned: a link where the worker
writes next is refused or replaced, never followed, so a root worker writes no file the job points it at. And
a first attempt never takes up events that another job left at its run directory."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select

from core.db import session_scope
from core.models import Checkpoint, Metric
from core.rundirs import SET_ASIDE
from core.states import JobStatus
from jobspec.events import EVENTS_FILE
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from worker.executors.local.runner import run_job
from worker.failure import ERROR_FILE
from worker.rundir import RunDirTampered, append_no_follow, prepare_run_dir

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

JOB_UID = 65534


def config() -> RunConfig:
    spec = JobSpec.model_validate({"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}})
    return RunConfig(job_id=7, attempt=2, spec=spec, plan=resolve_plan(spec))


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A file the job must not get written: /etc/passwd, in effect."""
    path = tmp_path / "passwd"
    path.write_text("root:x:0:0\n")
    return path


def test_the_spec_replaces_a_link_and_the_last_error_goes(tmp_path: Path, target: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    os.symlink(target, run_dir / "spec.json")
    os.symlink(target, run_dir / f".spec.json.{os.getpid()}")  # the staging name, which is predictable
    (run_dir / ERROR_FILE).write_text("{}")
    prepare_run_dir(run_dir, config())
    assert target.read_text() == "root:x:0:0\n"
    assert not (run_dir / "spec.json").is_symlink()
    assert RunConfig.model_validate_json((run_dir / "spec.json").read_text()).attempt == 2
    assert not (run_dir / ERROR_FILE).exists()


def test_a_logs_link_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.symlink(tmp_path, run_dir / "logs")
    with pytest.raises(RunDirTampered, match="logs is not a plain folder"):
        prepare_run_dir(run_dir, config())


def test_a_log_link_is_refused(tmp_path: Path, target: Path) -> None:
    os.symlink(target, tmp_path / "launcher.log")
    with pytest.raises(RunDirTampered, match=r"launcher\.log: Too many levels of symbolic links"):
        append_no_follow(tmp_path / "launcher.log")
    assert target.read_text() == "root:x:0:0\n"
    fd = append_no_follow(tmp_path / "rank0.log")
    os.write(fd, b"ok\n")
    os.close(fd)
    assert (tmp_path / "rank0.log").read_text() == "ok\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands files to another uid")
def test_the_run_directory_and_its_logs_are_handed_to_the_job_s_uid(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    prepare_run_dir(run_dir, config(), owner=JOB_UID)
    assert run_dir.stat().st_uid == (run_dir / "logs").stat().st_uid == JOB_UID
    assert (run_dir / "spec.json").stat().st_uid == 0  # written by the worker, afresh each attempt


def test_a_first_attempt_sets_aside_the_events_another_job_left_at_its_run_directory(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("ok")
    job_id = database.add_job()
    left = database.runs_dir / str(job_id)
    (left / "checkpoints").mkdir(parents=True)
    (left / "checkpoints" / "step-900.pt").write_bytes(b"another job's weights")
    loss = {"kind": "metrics", "step": 900, "total_steps": 1000, "epoch": 3, "values": {"loss": 0.01}}
    saved = {
        "kind": "checkpoint",
        "step": 900,
        "epoch": 3,
        "path": "checkpoints/step-900.pt",
        "size_bytes": 21,
    }
    (left / EVENTS_FILE).write_text(f"{json.dumps(loss)}\n{json.dumps(saved)}\n")
    run_job(job_id)
    assert database.job(job_id).status == JobStatus.SUCCEEDED
    with session_scope() as session:
        steps = session.scalars(select(Metric.step).where(Metric.job_id == job_id)).all()
        checkpoints = session.scalars(select(Checkpoint.path).where(Checkpoint.job_id == job_id)).all()
    assert (steps, checkpoints) == ([5], []), "only what this job's own ranks reported"
    [moved] = (database.runs_dir / SET_ASIDE).iterdir()
    assert moved.name.startswith(f"{job_id}.")
    assert (moved / "checkpoints" / "step-900.pt").read_bytes() == b"another job's weights"
