"""On each backend, through the real API: a deleted job's id is never given to a new one, retries of one job
sent at once make a single new job (issue 22 #1, #9), and a code-bundle job retries as it was submitted
(issue 28 #1)."""

from __future__ import annotations

import asyncio

import httpx

from tests.integration.jobs import PACED, wait_status
from tests.integration.servers import Stack
from tests.integration.test_program_e2e import push
from tests.integration.test_user_code_lifecycle import factories

SMALL = {
    "name": "ids",
    "model": {"arch": "mlp"},
    "data": {"dataset": "synthetic", "num_samples": 64},
    "train": {"max_steps": 5, "batch_size": 8},
}
CONCURRENT = 20


def cancelled(client: httpx.Client) -> int:
    """A job that ended, cancelled before or while it ran; a worker takes what is queued at once."""
    response = client.post("/v1/jobs", json=SMALL)
    assert response.status_code == 201, response.text
    job_id: int = response.json()["job"]["id"]
    client.post(f"/v1/jobs/{job_id}/cancel")
    wait_status(client, job_id, {"cancelled", "succeeded"})
    return job_id


def test_the_newest_job_s_id_is_not_given_again_after_it_is_deleted(stack: Stack) -> None:
    with stack.client() as client:
        newest = cancelled(client)
        assert client.delete(f"/v1/jobs/{newest}").status_code == 204
        assert cancelled(client) > newest


async def _retry_at_once(url: str, job_id: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        return list(await asyncio.gather(*(http.post(f"/v1/jobs/{job_id}/retry") for _ in range(CONCURRENT))))


def test_retries_sent_at_once_make_one_job(stack: Stack) -> None:
    with stack.client() as client:
        parent = cancelled(client)
        responses = asyncio.run(_retry_at_once(stack.url, parent))
        codes = sorted(response.status_code for response in responses)
        assert codes == [200] * (CONCURRENT - 1) + [201], [response.text for response in responses]
        [child] = {response.json()["job"]["id"] for response in responses}
        client.post(f"/v1/jobs/{child}/cancel")
    assert stack.sql(f"SELECT count(*) FROM jobs WHERE parent_id = {parent}") == 1


def test_a_bundle_job_retries_as_it_was_submitted(stack: Stack) -> None:
    """Its stored spec holds no default (a data.* default beside data.factory would be refused), so a retry
    from its checkpoint and one from scratch both validate, and keep the spec the user wrote."""
    spec = {**factories(push(stack, PACED), 0.2), "name": "bundle-retry"}
    with stack.client() as client:
        job_id = client.post("/v1/jobs", json=spec).json()["job"]["id"]
        client.post(f"/v1/jobs/{job_id}/cancel")
        wait_status(client, job_id, {"cancelled"})
        for start in ("latest", "scratch"):
            retried = client.post(f"/v1/jobs/{job_id}/retry", params={"from": start, "again": "true"})
            assert retried.status_code == 201, retried.text
            child = retried.json()["job"]
            assert {**child["spec"], "checkpoint": spec["checkpoint"]} == spec, start
            client.post(f"/v1/jobs/{child['id']}/cancel")
            wait_status(client, child["id"], {"cancelled", "succeeded"})
