"""limits.max_disk_gb: the run directory's size, measured off the supervisor's loop; a job past it fails
with reason disk_limit and a message naming the limit and the fix."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core.config import Settings
from core.states import JobStatus
from jobspec.spec import JobSpec
from worker.executors.local.disk import DiskLimit, DiskWatch, disk_bytes, disk_limit
from worker.executors.local.runner import run_job

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

MIB = 1 << 20


def taken_gb(message: str, limit: str) -> float:
    """The size a disk_limit message reports, once it is checked to name the limit and the fix."""
    found = re.fullmatch(
        rf"the run directory takes ([0-9.e-]+) GB, past {re.escape(limit)}; raise .*", message
    )
    assert found, message
    return float(found[1])


def test_disk_bytes_counts_what_is_allocated_and_never_follows_a_link(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "step-1.pt").write_bytes(b"x" * MIB)
    with (run_dir / "sparse").open("wb") as sparse:  # 1 GiB long, nothing written: nothing taken
        sparse.truncate(1 << 30)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * 4 * MIB)
    os.symlink(outside, run_dir / "elsewhere")
    used = disk_bytes(run_dir)
    assert MIB <= used < MIB + 64 * 1024  # the checkpoint, plus the folders' own blocks
    assert disk_bytes(tmp_path / "missing") == 0


def test_the_lower_of_the_spec_s_and_the_worker_s_limit_applies(tmp_path: Path) -> None:
    spec = JobSpec.model_validate({"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}})
    limited = spec.model_copy(update={"limits": spec.limits.model_copy(update={"max_disk_gb": 5.0})})
    assert disk_limit(spec, Settings()) is None
    assert disk_limit(limited, Settings()) == DiskLimit(5.0, "limits.max_disk_gb")
    assert disk_limit(limited, Settings(job_max_disk_gb=2)) == DiskLimit(2.0, "TRAINYARD_JOB_MAX_DISK_GB")
    assert disk_limit(spec, Settings(job_max_disk_gb=2)) == DiskLimit(2.0, "TRAINYARD_JOB_MAX_DISK_GB")


def test_the_watch_reports_once_past_the_limit(tmp_path: Path) -> None:
    limit = DiskLimit(1 / 1024, "limits.max_disk_gb")  # 1 MiB
    with DiskWatch(tmp_path, limit, every_s=0.05) as watch:
        time.sleep(0.2)
        assert watch.exceeded() is None
        (tmp_path / "big").write_bytes(b"x" * 2 * MIB)
        deadline = time.monotonic() + 5
        while watch.exceeded() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    said = watch.exceeded() or ""
    assert 1 / 1024 < taken_gb(said, "limits.max_disk_gb=0.000976562") <= 2.1 / 1024  # maybe seen mid-write
    assert said.endswith(
        "raise limits.max_disk_gb, keep fewer checkpoints (checkpoint.keep_last) or write less into the run "
        "directory"
    )


def test_a_job_past_its_disk_limit_fails_with_the_limit_and_the_fix(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    fake_trainer("fill_disk")
    spec = {**database.spec(), "limits": {"max_disk_gb": 0.001, "max_restarts": 2}}
    job_id = database.add_job(spec)
    started = time.monotonic()
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason, job.attempt) == (JobStatus.FAILED, "disk_limit", 1)
    assert 0.001 < taken_gb(job.message or "", "limits.max_disk_gb=0.001") <= 3.1 / 1024
    assert time.monotonic() - started < 30  # stopped by the limit, not by the fake trainer's 120 s
