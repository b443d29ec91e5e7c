"""/v1/gpus: live hosts only, with the job leasing each GPU."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.keys import create_key
from core.models import GpuLease, Worker, utcnow
from tests.unit.app.test_api_keys import bearer
from tests.unit.conftest import submit


def gpu(index: int) -> dict[str, object]:
    return {"index": index, "name": "NVIDIA H100", "memory_total_mb": 81559, "utilization_pct": 40 + index}


def test_no_worker_means_no_gpus(client: TestClient) -> None:
    assert client.get("/v1/gpus").json() == {"data": []}


def test_host_gpus_with_their_leases_and_down_hosts(client: TestClient, session: Session) -> None:
    job_id = submit(client, parallel={"gpus": [1]})["id"]
    session.add(Worker(id="box:1", host="box", gpus=[gpu(1), gpu(0)]))
    stale = utcnow() - timedelta(hours=1)
    session.add(Worker(id="box:0", host="box", gpus=[gpu(0)], heartbeat_at=stale))
    session.add(Worker(id="gone:7", host="gone", gpus=[gpu(0)], heartbeat_at=stale))
    session.add(GpuLease(host="box", gpu_index=1, job_id=job_id))
    session.commit()
    host, gone = client.get("/v1/gpus").json()["data"]
    assert (gone["host"], gone["status"]) == ("gone", "down")  # shown, so its absence is noticed
    assert (host["host"], host["status"], host["worker_id"]) == ("box", "up", "box:1")
    assert host["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H100",
            "memory_total_mb": 81559,
            "utilization_pct": 40,
            "job_id": None,
            "health": "ok",
            "health_reason": None,
        },
        {
            "index": 1,
            "name": "NVIDIA H100",
            "memory_total_mb": 81559,
            "utilization_pct": 41,
            "job_id": job_id,
            "health": "ok",
            "health_reason": None,
        },
    ]


def test_stale_inventory_still_judges_submissions_while_no_host_is_live(
    client: TestClient, session: Session
) -> None:
    session.add(Worker(id="box:1", host="box", gpus=[gpu(0)], heartbeat_at=utcnow() - timedelta(hours=1)))
    session.commit()
    assert [host["status"] for host in client.get("/v1/gpus").json()["data"]] == ["down"]
    response = client.post(
        "/v1/jobs",
        json={"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "parallel": {"gpus": [2]}},
    )
    assert response.status_code == 422
    assert "GPU 2 does not exist on this host (it has GPUs 0)" in response.json()["detail"]


def test_a_pinned_host_or_more_nodes_than_hosts_is_refused(client: TestClient, session: Session) -> None:
    session.add(Worker(id="box:1", host="box", gpus=[gpu(0)]))
    session.commit()
    spec = {"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}}
    nowhere = client.post("/v1/jobs", json={**spec, "parallel": {"host": "nowhere"}})
    assert nowhere.status_code == 422
    assert "parallel.host: no worker registered host nowhere; hosts: box" in nowhere.json()["detail"]
    spanning = client.post("/v1/jobs", json={**spec, "parallel": {"strategy": "ddp", "nnodes": 2}})
    assert spanning.status_code == 422
    assert "parallel.nnodes: 2 hosts asked for but 1 are registered (box)" in spanning.json()["detail"]


def test_an_admin_drains_and_undrains_a_gpu_and_everyone_sees_its_health(
    auth_on: Settings, session: Session
) -> None:
    root, bob = create_key(session, "root", admin=True), create_key(session, "bob", admin=False)
    session.add(Worker(id="box:1", host="box", gpus=[gpu(0), gpu(1)]))
    session.commit()
    client = TestClient(create_app())
    refused = client.post("/v1/gpus/box/1/drain", json={"reason": "ECC"}, headers=bearer(bob))
    assert refused.status_code == 403
    assert "only an admin may drain or undrain a GPU, and 'bob' is not one" in refused.json()["detail"]
    drained = client.post(
        "/v1/gpus/box/1/drain", json={"reason": "ECC errors in dmesg"}, headers=bearer(root)
    )
    assert drained.status_code == 200, drained.text
    assert drained.json()["health"] == "drained" and drained.json()["jobs_stopped"] == []
    listed = client.get("/v1/gpus", headers=bearer(bob)).json()["data"][0]["gpus"]
    assert [(g["index"], g["health"]) for g in listed] == [(0, "ok"), (1, "drained")]
    assert listed[1]["health_reason"].startswith("ECC errors in dmesg (an admin, ")
    metrics = client.get("/metrics", headers=bearer(root)).text
    assert 'trainyard_gpu_health{gpu="1",health="drained",host="box"} 1.0' in metrics
    assert 'trainyard_gpu_health{gpu="0",health="ok",host="box"} 1.0' in metrics
    undrained = client.post("/v1/gpus/box/1/undrain", headers=bearer(root)).json()
    assert (undrained["health"], undrained["health_reason"]) == ("ok", None)
    assert client.get("/v1/gpus", headers=bearer(bob)).json()["data"][0]["gpus"][1]["health"] == "ok"


@pytest.mark.parametrize(
    ("path", "body", "status", "said"),
    [
        (
            "/v1/gpus/nowhere/0/drain",
            {"reason": "x"},
            404,
            "no worker registered host 'nowhere' (hosts: box)",
        ),
        ("/v1/gpus/box/7/undrain", None, 404, "host box has no GPU 7 (its GPUs: 0)"),
        ("/v1/gpus/box/0/drain", {"reason": ""}, 422, "reason"),
        ("/v1/gpus/box/0/drain", {}, 422, "reason"),
    ],
)
def test_a_drain_of_no_gpu_or_without_a_reason_is_refused_saying_why(
    client: TestClient, session: Session, path: str, body: dict[str, str] | None, status: int, said: str
) -> None:
    session.add(Worker(id="box:1", host="box", gpus=[gpu(0)]))
    session.commit()
    answer = client.post(path, json=body)
    assert answer.status_code == status
    assert said in answer.text
