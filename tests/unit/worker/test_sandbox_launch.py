"""The runner puts a job with a code bundle (TRAINYARD_SANDBOX=auto), or every job (on), in the sandbox, and
tells its ranks where the bundle is; a host that cannot sandbox, or runs no user code, fails the launch with
the fix. The fake trainer stands for torchrun, inside the real bubblewrap."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from core.config import get_settings
from core.states import JobStatus
from jobspec.plan import RunConfig
from worker.executors.local.runner import run_job

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]

CODE_ID = "sha256:" + "ab" * 32
SANDBOX_START = ["env", "--ignore-signal=TERM", "bwrap"]


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A code bundle, unpacked in this host's code store."""
    monkeypatch.setenv("TRAINYARD_CODE_DIR", str(tmp_path / "code"))
    get_settings.cache_clear()
    folder = tmp_path / "code" / CODE_ID.removeprefix("sha256:")
    folder.mkdir(parents=True)
    (folder / "models.py").write_text("def build(): ...\n")
    return folder


def with_code(database: WorkerDb) -> dict[str, Any]:
    return {**database.spec(), "code": CODE_ID}


def test_a_job_with_a_bundle_runs_in_the_sandbox_and_is_told_where_the_bundle_is(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None], bundle: Path
) -> None:
    fake_trainer("ok")
    job_id = database.add_job(with_code(database))
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.SUCCEEDED, "completed"), job.message
    assert job.plan["argv"][:3] == SANDBOX_START
    run_dir = database.runs_dir / str(job_id)
    assert RunConfig.model_validate_json((run_dir / "spec.json").read_text()).code_dir == str(bundle)
    job_uid = get_settings().job_uid if os.geteuid() == 0 else os.geteuid()
    assert (run_dir / "events.jsonl").stat().st_uid == job_uid  # written from inside, as the job's uid


@pytest.mark.parametrize(("mode", "sandboxed"), [("auto", False), ("on", True), ("off", False)])
def test_a_built_in_job_is_sandboxed_only_when_every_job_is(
    database: WorkerDb,
    doorbell: Doorbell,
    fake_trainer: Callable[[str], None],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    sandboxed: bool,
) -> None:
    monkeypatch.setenv("TRAINYARD_SANDBOX", mode)
    get_settings.cache_clear()
    fake_trainer("ok")
    job_id = database.add_job()
    run_job(job_id)
    job = database.job(job_id)
    assert job.status == JobStatus.SUCCEEDED, job.message
    assert (job.plan["argv"][:3] == SANDBOX_START) is sandboxed


def test_a_host_without_bubblewrap_fails_the_launch_with_the_fix(
    database: WorkerDb,
    doorbell: Doorbell,
    fake_trainer: Callable[[str], None],
    bundle: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = tmp_path / "bin"  # what the host has: everything the sandbox's command uses but bwrap
    tools.mkdir()
    for tool in ("env", "setpriv", "prlimit"):
        os.symlink(f"/usr/bin/{tool}", tools / tool)
    monkeypatch.setenv("PATH", str(tools))
    fake_trainer("ok")
    job_id = database.add_job(with_code(database))
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.FAILED, "launch_error")
    assert (job.message or "").startswith("the sandbox cannot start on this host: env: 'bwrap': No such file")
    assert "install bubblewrap (`make servers` does)" in (job.message or "")
    assert not (database.runs_dir / str(job_id) / "events.jsonl").exists()  # nothing ran


def test_a_worker_that_runs_no_user_code_refuses_a_bundle(
    database: WorkerDb,
    doorbell: Doorbell,
    fake_trainer: Callable[[str], None],
    bundle: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINYARD_USER_CODE", "off")
    get_settings.cache_clear()
    fake_trainer("ok")
    job_id = database.add_job(with_code(database))
    run_job(job_id)
    job = database.job(job_id)
    assert (job.status, job.status_reason) == (JobStatus.FAILED, "launch_error")
    assert (
        job.message == f"this worker runs no user code (TRAINYARD_USER_CODE=off), and the job names {CODE_ID}"
    )
