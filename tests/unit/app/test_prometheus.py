"""/metrics: cluster gauges read from SQL, and the API's latency histogram labelled by route template."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update
from sqlalchemy.orm import Session

from core.models import GpuLease, Job, Worker, utcnow
from core.states import JobStatus
from tests.unit.conftest import submit


def scrape(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def test_jobs_queue_gpus_and_worker_heartbeats(client: TestClient, session: Session) -> None:
    queued = [submit(client)["id"] for _ in range(2)]
    running = submit(client)["id"]
    session.execute(update(Job).where(Job.id == running).values(status=JobStatus.RUNNING))
    session.add_all([GpuLease(host="gpu-a", gpu_index=i, job_id=running) for i in (0, 1)])
    session.add(Worker(id="gpu-a:42", host="gpu-a", gpus=[], heartbeat_at=utcnow() - timedelta(seconds=7)))
    session.commit()
    samples = scrape(client)
    assert samples[("trainyard_jobs", frozenset({("status", "queued")}))] == len(queued)
    assert samples[("trainyard_jobs", frozenset({("status", "running")}))] == 1
    assert samples[("trainyard_jobs", frozenset({("status", "failed")}))] == 0
    assert samples[("trainyard_queue_depth", frozenset())] == 2
    assert samples[("trainyard_gpus_allocated", frozenset({("host", "gpu-a")}))] == 2
    age = samples[
        ("trainyard_worker_heartbeat_age_seconds", frozenset({("worker", "gpu-a:42"), ("host", "gpu-a")}))
    ]
    assert 7 <= age < 60


def test_request_latency_is_labelled_by_route_template(client: TestClient) -> None:
    job_id = submit(client)["id"]
    for _ in range(3):
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
    assert client.get("/v1/jobs/999").status_code == 404
    assert client.get("/nowhere").status_code == 404
    samples = scrape(client)

    def count(route: str, status: str) -> float:
        labels = frozenset({("method", "GET"), ("route", route), ("status", status)})
        return samples.get(("trainyard_http_request_duration_seconds_count", labels), 0)

    assert count("/v1/jobs/{job_id}", "200") == 3
    assert count("/v1/jobs/{job_id}", "404") == 1
    assert count("unmatched", "404") == 1
    assert not any("/v1/jobs/1" in str(labels) for _, labels in samples)


def test_metrics_stays_at_the_root(client: TestClient) -> None:
    assert client.get("/v1/metrics").status_code == 404
    assert client.get("/metrics").status_code == 200
