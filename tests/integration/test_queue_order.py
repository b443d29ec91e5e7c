"""The queue's order is the order jobs start (issue 22 #3), and the doorbell counts its waiting rings on each
broker (#2): a real Celery worker with one slot on the embedded broker, and a real redis-server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import datetime

import pytest

from core.doorbell import pending_rings, ring_unless_pending
from tests.integration.jobs import submit, wait_status
from tests.integration.servers import Redis, Stack
from tests.unit.conftest import _clear_caches

pytestmark = pytest.mark.own_services

TINY = {
    "name": "tiny",
    "model": {"arch": "mlp"},
    "data": {"dataset": "synthetic", "num_samples": 64},
    "train": {"max_steps": 2, "batch_size": 8},
    "parallel": {"strategy": "single"},
}
# Holds the one slot until cancelled.
BLOCKER = {**TINY, "name": "blocker", "train": {"max_steps": 1_000_000, "batch_size": 8}}


@pytest.fixture(scope="module")
def one_slot(
    tmp_path_factory: pytest.TempPathFactory, stopping: list[subprocess.Popen[bytes]]
) -> Iterator[Stack]:
    """A worker that runs one job at a time: a job behind it waits for a worker slot, not for GPUs."""
    stack = Stack.embedded(tmp_path_factory.mktemp("one-slot"), TRAINYARD_WORKER_CONCURRENCY="1")
    yield stack
    stopping += stack.terminate()


def test_a_freed_slot_takes_the_first_job_the_queue_shows(one_slot: Stack) -> None:
    """A priority-100 job submitted after priority-0 ones starts first once the slot frees, though the
    broker holds their rings first; and the jobs start in the order /v1/queue showed."""
    with one_slot.client() as client:
        blocker = submit(client, BLOCKER)["id"]
        wait_status(client, blocker, {"running"}, timeout=120)
        low = [submit(client, {**TINY, "priority": 0})["id"] for _ in range(2)]
        high = submit(client, {**TINY, "priority": 100})["id"]
        shown = [entry["job_id"] for entry in client.get("/v1/queue").json()["data"]]
        assert shown == [high, *low]

        client.post(f"/v1/jobs/{blocker}/cancel")
        jobs = [wait_status(client, job_id, {"succeeded"}) for job_id in shown]
    started = sorted(jobs, key=lambda job: datetime.fromisoformat(job["started_at"]))
    assert [job["id"] for job in started] == shown


@pytest.fixture
def redis_broker(redis_server: Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's doorbell on a Redis database of its own, which no worker reads."""
    monkeypatch.setenv("TRAINYARD_BROKER_URL", redis_server.new_url())
    _clear_caches()
    yield
    _clear_caches()


@pytest.mark.usefixtures("redis_broker")
def test_a_ring_is_not_sent_while_one_waits_on_redis() -> None:
    assert pending_rings() == 0  # Redis keeps no key for an empty queue
    assert ring_unless_pending(7)
    assert not ring_unless_pending(8)
    assert pending_rings() == 1
