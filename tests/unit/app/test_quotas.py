"""Per-user quotas: unfinished jobs and the GPUs they ask for; 429 with Retry-After past either."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from core.config import Settings, get_settings
from tests.unit.conftest import job_body, submit


@pytest.fixture
def small_quota(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("TRAINYARD_QUOTA_MAX_JOBS", "2")
    monkeypatch.setenv("TRAINYARD_QUOTA_MAX_GPUS", "3")
    monkeypatch.setenv("TRAINYARD_QUOTA_RETRY_AFTER_S", "7")
    get_settings.cache_clear()
    return TestClient(create_app())


def test_a_third_unfinished_job_is_429_with_retry_after(small_quota: TestClient) -> None:
    first = submit(small_quota)
    submit(small_quota)
    refused = small_quota.post("/v1/jobs", json=job_body())
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "7"
    assert "TRAINYARD_QUOTA_MAX_JOBS=2" in refused.json()["detail"]
    # A finished job no longer counts.
    assert small_quota.post(f"/v1/jobs/{first['id']}/cancel").status_code == 200
    submit(small_quota)


def test_dry_runs_do_not_count(small_quota: TestClient) -> None:
    for _ in range(3):
        assert small_quota.post("/v1/jobs", params={"dry_run": "true"}, json=job_body()).status_code == 200


def test_gpus_asked_for_count_against_the_gpu_quota(small_quota: TestClient) -> None:
    # No worker has registered, so any GPU count is accepted at submit: the quota alone refuses.
    submit(small_quota, parallel={"num_gpus": 2})
    refused = small_quota.post("/v1/jobs", json=job_body(parallel={"num_gpus": 2}))
    assert refused.status_code == 429, refused.text
    assert "TRAINYARD_QUOTA_MAX_GPUS=3" in refused.json()["detail"]
    submit(small_quota, parallel={"num_gpus": 1})


def test_a_multi_host_job_counts_its_gpus_on_every_host(small_quota: TestClient) -> None:
    """num_gpus is per host: 2 hosts x 1 GPU is 2 GPUs of the quota of 3, so one more GPU fits, two do not."""
    submit(small_quota, parallel={"strategy": "ddp", "nnodes": 2, "num_gpus": 1})
    refused = small_quota.post("/v1/jobs", json=job_body(parallel={"num_gpus": 2}))
    assert refused.status_code == 429, refused.text
    assert "ask for 2 GPUs; 2 more would pass" in refused.json()["detail"]
    submit(small_quota, parallel={"num_gpus": 1})


def test_a_cpu_job_is_not_refused_by_a_gpu_quota_it_takes_nothing_from(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the GPU quota is lowered below what a user's jobs already ask for, GPU jobs are refused and jobs
    that ask for no GPUs are still taken: they cannot take the user past the GPU quota."""
    submit(TestClient(create_app()), parallel={"num_gpus": 2})
    monkeypatch.setenv("TRAINYARD_QUOTA_MAX_GPUS", "1")
    get_settings.cache_clear()
    client = TestClient(create_app())
    refused = client.post("/v1/jobs", json=job_body(parallel={"num_gpus": 1}))
    assert refused.status_code == 429, refused.text
    assert "ask for 2 GPUs; 1 more would pass TRAINYARD_QUOTA_MAX_GPUS=1" in refused.json()["detail"]
    submit(client)
