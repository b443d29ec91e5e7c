"""The worker's writes into a run directory that an earlier attempt's ranks owned: a link where the worker
writes next is refused or replaced, never followed, so a root worker writes no file the job points it at."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainers.plan import RunConfig, resolve_plan
from trainers.spec import JobSpec
from worker.failure import ERROR_FILE
from worker.rundir import RunDirTampered, append_no_follow, prepare_run_dir

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
