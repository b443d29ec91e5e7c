"""The API and Redis restarted mid-job (docs/reliability.md case 4), on Redis + PostgreSQL: the jobs (a user's
bundle whose steps sleep, so that they outlast a restart without holding a core) complete and every metric
row is stored exactly once, because the database, not a server's memory, holds what a job has done."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.jobs import PACED, metric_values, submit, wait_status
from tests.integration.servers import Redis, Stack, stop
from tests.integration.test_program_e2e import push
from tests.integration.test_user_code_lifecycle import factories

EVERY = 20
STEPS = 160  # 25 ms each, asleep (tests/integration/bundles/paced): the job outlasts a restart of either


@pytest.fixture(scope="module")
def stack(redis_postgres_stack: Stack) -> Stack:
    """The session's Redis + PostgreSQL stack: what these tests restart comes back, as they check."""
    return redis_postgres_stack


@pytest.fixture(scope="module")
def paced_job(stack: Stack) -> dict[str, Any]:
    return {
        **factories(push(stack, PACED), 0.025, STEPS),
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 1000},
        "metrics": {"every_n_steps": EVERY},
    }


def assert_reported_once(stack: Stack, job_id: int) -> None:
    with stack.client() as client:
        assert wait_status(client, job_id, {"succeeded"}, timeout=240)["progress"]["step"] == STEPS
        steps = [step for step, _ in metric_values(client, job_id, "loss")]
    assert steps == list(range(EVERY, STEPS + 1, EVERY))
    assert stack.sql(f"SELECT count(*) FROM metrics WHERE job_id = {job_id} AND name = 'loss'") == len(steps)


def test_the_api_restarted_mid_job(stack: Stack, paced_job: dict[str, Any]) -> None:
    with stack.client() as client:
        job = submit(client, paced_job)
        wait_status(client, job["id"], {"running"}, timeout=120)
    stop(stack.procs["api"])
    # Mid-job: it still runs with the API gone (the API's start, seconds on a busy machine, may outlast it).
    running = f"SELECT count(*) FROM jobs WHERE id = {job['id']} AND status = 'running'"
    assert stack.sql(running) == 1, "the job ended before the API stopped"
    stack.start_api()
    assert_reported_once(stack, job["id"])


def test_redis_restarted_mid_job(stack: Stack, redis_server: Redis, paced_job: dict[str, Any]) -> None:
    with stack.client() as client:
        job = submit(client, paced_job)
        wait_status(client, job["id"], {"running"}, timeout=120)
        redis_server.restart()
        assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "running", "restarted too late"
        # The restarted broker is empty: this job's doorbell is rung again by the reaper once the worker
        # has reconnected.
        later = submit(client, {**paced_job, "train": {**paced_job["train"], "max_steps": EVERY * 3}})
    assert_reported_once(stack, job["id"])
    with stack.client() as client:
        assert wait_status(client, later["id"], {"succeeded"}, timeout=240)["progress"]["step"] == EVERY * 3
