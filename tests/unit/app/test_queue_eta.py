"""When each waiting job would start (issue 44, app/services/queue_eta.py), as GET /v1/queue shows it: the
jobs running and ahead take their forecast job_time_s on the hosts' GPUs, in queue order. The rows are
those a submission and a worker leave: a host's two GPUs, a lease, forecasts on the plans."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, update
from sqlalchemy.orm import ORMExecuteState, Session

from app.services import queue, queue_eta
from core.config import get_settings
from core.models import GpuLease, Job, JobNode, Worker, utcnow
from core.states import JobStatus
from jobspec.forecast import Forecast
from tests.unit.app.table_rows import table_rows
from tests.unit.conftest import submit

if TYPE_CHECKING:
    from tests.unit.cli_fixtures import CliRunnerCall

pytest_plugins = ["tests.unit.cli_fixtures"]


@pytest.fixture
def two_gpus(session: Session) -> None:
    gpus = [{"index": i, "name": "NVIDIA H200", "memory_total_mb": 143_771} for i in (0, 1)]
    session.add(Worker(id="box:1", host="box", gpus=gpus, cpus=16))
    session.commit()


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> datetime:
    """The clock the queue's estimates read, stopped: a slow box (a test under load) moves no estimate."""
    stopped = utcnow()
    monkeypatch.setattr(queue, "utcnow", lambda: stopped)
    return stopped


def gpu_job(client: TestClient, session: Session, gpus: int, job_time_s: float | None) -> int:
    """A queued job of `gpus` GPUs whose plan forecasts `job_time_s` (None: no forecast)."""
    job_id: int = submit(client, parallel={"strategy": "ddp" if gpus > 1 else "single", "num_gpus": gpus})[
        "id"
    ]
    job = session.get_one(Job, job_id)
    made = Forecast(peak_memory_bytes=2**30, step_time_s=0.1, job_time_s=job_time_s, fits=True, basis="test")
    job.plan = {**job.plan, "forecast": None if job_time_s is None else made.model_dump(mode="json")}
    session.commit()
    return job_id


def running(session: Session, job_id: int, gpu: int, **values: Any) -> None:
    """The job as a worker leaves it once it runs on `gpu` of the box."""
    job = session.get_one(Job, job_id)
    job.status, job.host, job.gpu_ids = JobStatus.RUNNING, "box", [gpu]
    for name, value in values.items():
        setattr(job, name, value)
    session.add(GpuLease(host="box", gpu_index=gpu, job_id=job_id))
    session.commit()


def starts(client: TestClient) -> dict[int, tuple[float | None, str | None]]:
    entries = client.get("/v1/queue").json()["data"]
    return {entry["job_id"]: (entry["starts_in_s"], entry["starts_in_note"]) for entry in entries}


def test_queued_jobs_start_as_the_running_ones_and_those_ahead_end(
    client: TestClient, session: Session, two_gpus: None, now: datetime
) -> None:
    # Running on GPU 0 for 900 s of a forecast 1000: 100 s left; GPU 1 is free.
    ran = gpu_job(client, session, 1, 1000.0)
    running(session, ran, 0, running_at=now - timedelta(seconds=900))
    one = gpu_job(client, session, 1, 300.0)  # GPU 1 now, until 300 s
    two = gpu_job(client, session, 2, 50.0)  # GPU 0 free at 100 s, GPU 1 at 300 s: starts at 300, to 350
    unknown = gpu_job(client, session, 1, None)  # a GPU at 350 s, for a time not known
    behind = gpu_job(client, session, 1, 10.0)  # the other GPU at 350 s, but the unknown one may free first

    found = starts(client)
    assert found[one] == (0.0, None)
    assert found[two][0] == pytest.approx(300.0) and found[two][1] is None
    assert found[unknown][0] == pytest.approx(350.0)
    assert found[behind] == (None, f"job {unknown} ahead of it has no forecast of how long it runs")


def test_a_running_jobs_rate_decides_before_its_forecast_and_a_job_without_either_blocks(
    client: TestClient, session: Session, two_gpus: None, now: datetime
) -> None:
    # Half of its steps in 100 s: 100 s left by its rate, though its forecast said 10 s in all.
    rated = gpu_job(client, session, 1, 10.0)
    running(session, rated, 0, running_at=now - timedelta(seconds=100), progress_step=50, progress_total=100)
    program = gpu_job(client, session, 1, None)
    running(session, program, 1)  # a program's job: no forecast, no progress yet
    waiting = gpu_job(client, session, 1, 20.0)
    assert starts(client)[waiting] == (None, f"job {program} ahead of it has no forecast of how long it runs")

    session.get_one(Job, program).progress_step, session.get_one(Job, program).progress_total = 1, 1000
    session.get_one(Job, program).running_at = now - timedelta(seconds=1)
    session.commit()  # its rate: 999 s left, more than the rated job's 100
    assert starts(client)[waiting][0] == pytest.approx(100.0)


def test_a_job_that_starts_while_the_queue_is_read_waits_for_the_next_read(
    client: TestClient, session: Session, two_gpus: None
) -> None:
    """The ETA reads the active jobs, then where they run, each query seeing the latest commit: a job that
    started in between was a KeyError, a 500 to every poller of GET /v1/queue (the soak's 29)."""
    job_id = gpu_job(client, session, 0, 60.0)  # a CPU job

    def starts_meanwhile(state: ORMExecuteState) -> None:
        if "job_nodes" in str(state.statement) and session.get_one(Job, job_id).status == JobStatus.QUEUED:
            session.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.RUNNING, attempt=1))
            session.add(JobNode(job_id=job_id, node_rank=0, attempt=1, host="box", address="box"))
            session.flush()

    event.listen(session, "do_orm_execute", starts_meanwhile)
    try:
        hosts = queue_eta.host_slots(session, get_settings(), utcnow())
    finally:
        event.remove(session, "do_orm_execute", starts_meanwhile)
    assert session.get_one(Job, job_id).status == JobStatus.RUNNING
    assert all(slot.holder is None for host in hosts for slot in host.cores)


def test_only_the_first_depth_jobs_are_played(
    client: TestClient, session: Session, two_gpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.services.queue.DEPTH", 2)
    first, second, third = (gpu_job(client, session, 1, 60.0) for _ in range(3))
    found = starts(client)
    assert (found[first], found[second]) == ((0.0, None), (0.0, None))
    assert found[third] == (None, queue_eta.BEYOND)


def test_trainyard_queue_shows_when_each_starts_within_80_columns(
    run: CliRunnerCall, client: TestClient, session: Session, two_gpus: None
) -> None:
    now, later = gpu_job(client, session, 2, 300.0), gpu_job(client, session, 1, 60.0)
    unknown = submit(client, name="x" * 40)["id"]  # a CPU job with no forecast: a core is free now
    ahead = gpu_job(client, session, 2, None)
    behind = gpu_job(client, session, 1, 60.0)
    run.columns(80)
    shown = run("queue").output
    assert all(len(line) <= 80 for line in shown.splitlines()), shown
    assert "starts in" in shown
    rows = {row[1]: row for row in table_rows(shown) if row[0]}
    assert rows[str(now)][-2] == "now" and rows[str(later)][-2] == "5:00"
    assert rows[str(unknown)][-2] == "now" and rows[str(behind)][-2] == "-"
    assert rows[str(ahead)][-2] == "6:00"
