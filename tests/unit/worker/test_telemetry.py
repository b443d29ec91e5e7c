"""Per-job GPU telemetry and fair-share charging on the heartbeat (issue 19 #4, #2), with a fake NVML: this
box has no driver. Times are handed to the meter, so ten minutes of samples take no ten minutes."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from app.main import create_app
from core.config import get_settings
from core.db import session_scope
from core.models import Job, JobEvent, Metric, UserUsage, utcnow
from core.states import JobStatus
from worker.executors.local.heartbeat import Heartbeat
from worker.executors.local.leases import ClaimOutcome, claim_job
from worker.executors.local.nodes import NodeTask
from worker.executors.local.telemetry import GPU_IDLE, JobMeter

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


class FakeNvmlError(Exception):
    pass


@dataclass
class FakeNvml:
    """The part of pynvml that worker/gpus.py reads; a handle is the GPU's index."""

    utilisation: dict[int, int]
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVMLError = FakeNvmlError

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self.utilisation[handle], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=80 * 2**30, used=(1000 + handle) * 2**20)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 250_000  # milliwatts

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 60

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return 1980


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    fake = FakeNvml({0: 3, 1: 90, 2: 0, 3: 0})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("TRAINYARD_TELEMETRY_EVERY_BEATS", "1")
    monkeypatch.setenv("TRAINYARD_FAIR_SHARE_HALF_LIFE_S", str(10**8))  # no decay to speak of here
    get_settings.cache_clear()
    yield fake
    get_settings.cache_clear()


def claimed_gpu_job(database: WorkerDb) -> NodeTask:
    """Ada's job on GPUs 0 and 1, running."""
    job_id = database.add_job(database.spec(gpus=[0, 1]), owner="ada")
    claim = claim_job(job_id)
    assert claim.outcome is ClaimOutcome.CLAIMED
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.RUNNING))
    return NodeTask(job_id, claim.attempt)


def beat(meter: JobMeter, now: datetime, step: int) -> None:
    """One heartbeat's metering at `now`, with the job at `step`."""
    with session_scope() as session:
        session.execute(update(Job).where(Job.id == meter.node.job_id).values(progress_step=step))
    meter.beat(now)


def idle_warnings(job_id: int) -> list[str | None]:
    query = select(JobEvent.message).where(JobEvent.job_id == job_id, JobEvent.reason == GPU_IDLE)
    with session_scope() as session:
        return list(session.scalars(query))


def series(job_id: int, name: str) -> list[tuple[int, float]]:
    query = select(Metric.step, Metric.value).where(Metric.job_id == job_id, Metric.name == name)
    with session_scope() as session:
        return [(step, value) for step, value in session.execute(query.order_by(Metric.step))]


def test_samples_become_rows_and_gauges_and_an_idle_gpu_warns_once(
    database: WorkerDb, nvml: FakeNvml
) -> None:
    node = claimed_gpu_job(database)
    meter = JobMeter(node, get_settings())
    start = meter.since
    for minute in range(13):  # a beat a minute; the first learns the node's GPUs, the rest sample them
        beat(meter, start + timedelta(minutes=minute), step=10 * (minute // 2))
        # GPU 0 averaged 3 % from minute 1 on: ten minutes of it are sampled at minute 11, not before.
        assert len(idle_warnings(node.job_id)) == (minute >= 11)
    assert idle_warnings(node.job_id) == ["GPU 0 averaged 3 % utilisation over 10 min"]
    # Minute 12 sampled at step 60; a later sample at that step replaces it: one point per step, the latest.
    nvml.utilisation[1] = 50
    beat(meter, start + timedelta(minutes=13), step=60)
    assert series(node.job_id, "gpu_util/1") == [(step, 90.0) for step in range(0, 60, 10)] + [(60, 50.0)]
    assert series(node.job_id, "gpu_mem_mb/1")[-1] == (60, 1001.0)
    assert series(node.job_id, "gpu_power_w/0")[-1] == (60, 250.0)
    assert series(node.job_id, "gpu_util/2") == []  # not the job's GPU

    metrics = TestClient(create_app(), base_url="http://localhost").get("/metrics").text
    assert f'trainyard_job_gpu_utilization_percent{{gpu="1",job="{node.job_id}"}} 50.0' in metrics
    assert f'trainyard_job_gpu_utilization_percent{{gpu="0",job="{node.job_id}"}} 3.0' in metrics
    assert f'trainyard_job_gpu_sm_clock_megahertz{{gpu="0",job="{node.job_id}"}} 1980.0' in metrics
    # Fair share: two GPUs for the 13 minutes the beats covered.
    with session_scope() as session:
        ada = session.get_one(UserUsage, "ada")
        assert (ada.gpu_seconds, ada.cpu_core_seconds) == (pytest.approx(2 * 13 * 60, rel=1e-5), 0.0)


def test_the_heartbeat_thread_meters_the_job(database: WorkerDb, nvml: FakeNvml) -> None:
    node = claimed_gpu_job(database)
    started = utcnow()
    with Heartbeat(node, every_s=0.01):
        deadline = time.monotonic() + 60
        while not series(node.job_id, "gpu_util/1") and time.monotonic() < deadline:
            time.sleep(0.05)
    assert series(node.job_id, "gpu_util/1") == [(0, 90.0)]
    with session_scope() as session:
        ada = session.get_one(UserUsage, "ada")
        # Charged for no more than the two GPUs held while the heartbeat ran.
        assert 0 < ada.gpu_seconds <= 2 * (utcnow() - started).total_seconds()


def test_metering_that_fails_never_costs_the_lease(
    database: WorkerDb, nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = claimed_gpu_job(database)
    failed: list[int] = []

    def broken(handle: int) -> int:
        failed.append(handle)
        raise RuntimeError("a driver that answers nonsense")

    monkeypatch.setattr(nvml, "nvmlDeviceGetPowerUsage", broken)
    deadline = time.monotonic() + 60
    with Heartbeat(node, every_s=0.01):
        while not failed and time.monotonic() < deadline:
            time.sleep(0.05)
        # Renewed again after a beat whose metering failed.
        after_failure = database.job(node.job_id).heartbeat_at
        while database.job(node.job_id).heartbeat_at == after_failure and time.monotonic() < deadline:
            time.sleep(0.05)
    assert failed and database.job(node.job_id).heartbeat_at != after_failure
    assert series(node.job_id, "gpu_util/0") == []
