"""GET /v1/jobs/{id}/profile serves the summary the trainer wrote, /profile/trace its Chrome trace, and
/tensorboard its TensorBoard event files as a tar."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.keys import create_key
from jobspec.events import TENSORBOARD_DIR
from jobspec.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE, CopyTimes, OpTime, ProfileSummary
from tests.unit.conftest import job_body, submit

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


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tar_members(body: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_tensorboard_events_download_as_a_tar_that_stays_in_the_run_dir(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    job_id = submit(client, metrics={"tensorboard": True})["id"]
    early = client.get(f"/v1/jobs/{job_id}/tensorboard")
    assert early.status_code == 404 and "no TensorBoard events yet" in early.json()["detail"]

    board = settings.runs_dir / str(job_id) / TENSORBOARD_DIR
    (board / "restart").mkdir(parents=True)
    (board / "events.out.tfevents.1.host").write_bytes(b"\x00scalars" * 100)
    (board / "restart" / "events.out.tfevents.2.host").write_bytes(b"more")
    secret = tmp_path / "secret.txt"
    secret.write_text("not the job's")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak").write_text("not the job's")
    # The job's own processes write this folder: links out of the run directory are left out.
    (board / "events.out.tfevents.3.link").symlink_to(secret)
    (board / "linked").symlink_to(outside, target_is_directory=True)

    response = client.get(f"/v1/jobs/{job_id}/tensorboard")
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-tar"
    assert f"job{job_id}-tensorboard.tar" in response.headers["content-disposition"]
    assert tar_members(response.content) == {
        f"job{job_id}/events.out.tfevents.1.host": b"\x00scalars" * 100,
        f"job{job_id}/restart/events.out.tfevents.2.host": b"more",
    }


def test_tensorboard_of_a_job_without_it_says_how_to_ask_and_another_users_is_hidden(
    auth_on: Settings, session: Session
) -> None:
    alice, bob = (create_key(session, user, admin=False) for user in ("alice", "bob"))
    client = TestClient(create_app())
    plain = client.post("/v1/jobs", json=job_body(), headers=bearer(alice)).json()["job"]["id"]
    refused = client.get(f"/v1/jobs/{plain}/tensorboard", headers=bearer(alice))
    assert refused.status_code == 404 and '"metrics": {"tensorboard": true}' in refused.json()["detail"]

    body = job_body(metrics={"tensorboard": True})
    job_id = client.post("/v1/jobs", json=body, headers=bearer(alice)).json()["job"]["id"]
    board = auth_on.runs_dir / str(job_id) / TENSORBOARD_DIR
    board.mkdir(parents=True)
    (board / "events.out.tfevents.1.host").write_bytes(b"alice's")
    assert client.get(f"/v1/jobs/{job_id}/tensorboard", headers=bearer(alice)).status_code == 200
    hidden = client.get(f"/v1/jobs/{job_id}/tensorboard", headers=bearer(bob))
    assert hidden.status_code == 404 and "does not exist" in hidden.json()["detail"]
