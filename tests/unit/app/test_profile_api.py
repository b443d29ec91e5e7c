"""GET /v1/jobs/{id}/profile serves the summary the trainer wrote, /profile/trace its Chrome trace."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from core.config import Settings
from tests.unit.conftest import submit
from trainers.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE, CopyTimes, OpTime, ProfileSummary

SUMMARY = ProfileSummary(
    first_step=6,
    steps=3,
    device="cuda",
    step_wall_us=900.0,
    cpu_total_us=2000.0,
    gpu_total_us=1500.0,
    top_cpu_ops=[OpTime(name="aten::addmm", calls=3, self_us=700.0)],
    top_gpu_ops=[OpTime(name="Memcpy HtoD (Pageable -> Device)", calls=3, self_us=300.0)],
    memcpy=CopyTimes(htod_us=300.0),
    memcpy_share_of_gpu=0.2,
    sync_ops=[OpTime(name="cudaStreamSynchronize", calls=3, self_us=100.0)],
    sync_share_of_cpu=0.05,
    trace_file=f"{PROFILE_DIR}/{TRACE_FILE}",
)


def test_a_job_without_profiling_gets_a_404_that_says_how_to_ask(client: TestClient) -> None:
    job = submit(client)
    for path in ("profile", "profile/trace"):
        response = client.get(f"/v1/jobs/{job['id']}/{path}")
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/problem+json"
        assert '"profile": {"steps": 10}' in response.json()["detail"]


def test_a_profiled_job_says_when_its_profile_appears_then_serves_it(
    client: TestClient, settings: Settings
) -> None:
    job = submit(client, profile={"steps": 3, "skip_first": 5})
    early = client.get(f"/v1/jobs/{job['id']}/profile")
    assert early.status_code == 404 and "after step 8" in early.json()["detail"]

    directory = settings.runs_dir / str(job["id"]) / PROFILE_DIR
    directory.mkdir(parents=True)
    (directory / SUMMARY_FILE).write_text(SUMMARY.model_dump_json())
    (directory / TRACE_FILE).write_text(json.dumps({"traceEvents": [{"name": "aten::addmm"}]}))

    summary = client.get(f"/v1/jobs/{job['id']}/profile")
    assert summary.status_code == 200
    assert ProfileSummary.model_validate(summary.json()) == SUMMARY
    trace = client.get(f"/v1/jobs/{job['id']}/profile/trace")
    assert trace.status_code == 200 and trace.json()["traceEvents"][0]["name"] == "aten::addmm"
    assert f"job{job['id']}-trace.json" in trace.headers["content-disposition"]


def test_an_unknown_job_is_a_404(client: TestClient) -> None:
    response = client.get("/v1/jobs/999/profile")
    assert response.status_code == 404 and "does not exist" in response.json()["detail"]
