"""Retry: from the job's latest checkpoint unless asked to start over, once per job however often it is asked
(unless asked for another), and every job made from another names it as its parent."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.models import Checkpoint, Job
from tests.unit.conftest import submit

CONCURRENT = 20


def cancelled(client: TestClient, **sections: Any) -> int:
    job_id: int = submit(client, **sections)["id"]
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    return job_id


def checkpoint(session: Session, settings: Settings, job_id: int, step: int) -> Checkpoint:
    path = settings.runs_dir / str(job_id) / "checkpoints" / f"step-{step}.pt"
    row = Checkpoint(job_id=job_id, step=step, epoch=0, path=str(path), size_bytes=1)
    session.add(row)
    session.commit()
    return row


def retry(client: TestClient, job_id: int, query: str = "", **headers: str) -> tuple[int, dict[str, Any]]:
    response = client.post(f"/v1/jobs/{job_id}/retry{query}", headers=headers)
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return response.status_code, body


def first_event(client: TestClient, job_id: int) -> str:
    message: str = client.get(f"/v1/jobs/{job_id}/events").json()["data"][0]["message"]
    return message


def test_retry_continues_from_the_latest_checkpoint_unless_told_to_start_from_scratch(
    client: TestClient, session: Session, settings: Settings
) -> None:
    parent = cancelled(client)
    checkpoint(session, settings, parent, 10)
    latest = checkpoint(session, settings, parent, 30)
    checkpoint(session, settings, parent, 20)  # saved later, at an earlier step: not the latest
    status, resumed = retry(client, parent)
    assert status == 201
    assert resumed["job"]["parent_id"] == parent
    assert resumed["job"]["spec"]["checkpoint"]["resume_from"] == latest.id
    # The API shows the server's folders by their variables (issue 22 #17), the worker gets the real path.
    shown = latest.path.replace(str(settings.runs_dir), "$TRAINYARD_RUNS_DIR")
    assert resumed["plan"]["resume_path"] == shown
    assert (
        first_event(client, resumed["job"]["id"]) == f"retry of job {parent} from its checkpoint {latest.id}"
    )
    status, scratch = retry(client, parent, "?from=scratch")
    assert status == 201, "another start is another retry"
    assert scratch["job"]["parent_id"] == parent
    assert "checkpoint" not in scratch["job"]["spec"], "the spec as submitted, which names no checkpoint"
    assert scratch["plan"]["resume_path"] is None
    assert client.get(f"/v1/jobs/{scratch['job']['id']}").json()["parent_id"] == parent
    assert client.post(f"/v1/jobs/{parent}/retry?from=nowhere").status_code == 422


def test_a_job_resumed_from_a_checkpoint_names_its_parent_until_that_is_deleted(
    client: TestClient, session: Session, settings: Settings
) -> None:
    parent = cancelled(client)
    saved = checkpoint(session, settings, parent, 10)
    child = submit(client, checkpoint={"resume_from": saved.id})
    assert child["parent_id"] == parent
    assert submit(client)["parent_id"] is None
    assert client.delete(f"/v1/jobs/{parent}").status_code == 204
    assert client.get(f"/v1/jobs/{child['id']}").json()["parent_id"] is None


def test_a_repeated_retry_answers_the_first_unless_another_is_asked_for(client: TestClient) -> None:
    parent = cancelled(client)
    status, first = retry(client, parent)
    assert status == 201 and first["job"]["parent_id"] == parent
    status, repeated = retry(client, parent)
    assert (status, repeated["job"]["id"]) == (200, first["job"]["id"])
    status, another = retry(client, parent, "?again=true")
    assert status == 201 and another["job"]["id"] != first["job"]["id"]
    status, keyed = retry(client, parent, **{"Idempotency-Key": "k1"})
    assert status == 201 and keyed["job"]["id"] not in (first["job"]["id"], another["job"]["id"])
    status, replayed = retry(client, parent, **{"Idempotency-Key": "k1"})
    assert (status, replayed["job"]["id"]) == (200, keyed["job"]["id"])
    status, new_key = retry(client, parent, **{"Idempotency-Key": "k2"})
    assert status == 201 and new_key["job"]["id"] != keyed["job"]["id"]
    made = {first["job"]["id"], another["job"]["id"], keyed["job"]["id"], new_key["job"]["id"]}
    status, plain = retry(client, parent)
    assert status == 200 and plain["job"]["id"] in made


async def _retry_at_once(job_id: int) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        requests = (http.post(f"/v1/jobs/{job_id}/retry") for _ in range(CONCURRENT))
        return list(await asyncio.wait_for(asyncio.gather(*requests), 60))


def test_concurrent_retries_of_one_job_make_one_job(client: TestClient, session: Session) -> None:
    parent = cancelled(client)
    responses = asyncio.run(_retry_at_once(parent))
    assert sorted(response.status_code for response in responses) == [200] * (CONCURRENT - 1) + [201]
    assert len({response.json()["job"]["id"] for response in responses}) == 1
    children = select(func.count()).select_from(Job).where(Job.parent_id == parent)
    assert session.scalar(children) == 1
