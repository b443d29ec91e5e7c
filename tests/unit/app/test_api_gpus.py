"""/v1/gpus: live hosts only, with the job leasing each GPU."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.models import GpuLease, Worker, utcnow
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
        {"index": 0, "name": "NVIDIA H100", "memory_total_mb": 81559, "utilization_pct": 40, "job_id": None},
        {
            "index": 1,
            "name": "NVIDIA H100",
            "memory_total_mb": 81559,
            "utilization_pct": 41,
            "job_id": job_id,
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
