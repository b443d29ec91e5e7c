"""GET /v1/jobs/{id}, the route clients poll: who may see a job, a body that follows its row and the clock,
and HTTP revalidation (ETag, If-None-Match, 304)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.main import create_app
from app.schemas import JobPublic
from app.services import jobs
from core.config import Settings
from core.keys import create_key
from core.models import Job, utcnow
from tests.unit.conftest import job_body, submit


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def set_job(session: Session, job_id: int, **values: object) -> None:
    session.execute(update(Job).where(Job.id == job_id).values(**values))
    session.commit()


def test_every_v1_route_documents_the_bearer_scheme(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    scheme = document["components"]["securitySchemes"]["HTTPBearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, operations in document["paths"].items():
        if path.startswith("/v1/"):
            for operation in operations.values():
                assert operation["security"] == [{"HTTPBearer": []}], path


def test_a_job_is_seen_by_its_owner_and_admins_only(auth_on: Settings, session: Session) -> None:
    alice, bob, root = (create_key(session, user, admin=user == "root") for user in ("alice", "bob", "root"))
    client = TestClient(create_app())
    job_id = client.post("/v1/jobs", json=job_body(), headers=bearer(alice)).json()["job"]["id"]
    keys = {"alice": bearer(alice), "bob": bearer(bob), "root": bearer(root), "none": {}}
    keys |= {"bad key": bearer("ty_nonsense"), "basic": {"Authorization": "Basic YTpi"}}
    statuses = {
        who: client.get(f"/v1/jobs/{job_id}", headers=headers).status_code for who, headers in keys.items()
    }
    assert statuses == {"alice": 200, "bob": 404, "root": 200, "none": 401, "bad key": 401, "basic": 401}
    hidden, missing = (client.get(f"/v1/jobs/{i}", headers=bearer(bob)) for i in (job_id, 999))
    assert hidden.json()["detail"] == f"job {job_id} does not exist; list jobs with GET /v1/jobs"
    assert missing.json()["detail"] == "job 999 does not exist; list jobs with GET /v1/jobs"
    refused = client.get(f"/v1/jobs/{job_id}", headers=keys["bad key"])
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "the API key is not valid" in refused.json()["detail"]


def test_a_body_follows_every_change_of_its_row(client: TestClient, session: Session) -> None:
    first, second = submit(client)["id"], submit(client)["id"]
    assert client.get(f"/v1/jobs/{second}").json()["queue_position"] == 2
    # A change elsewhere moves it in the queue; changes of its own show at once.
    assert client.post(f"/v1/jobs/{first}/cancel").status_code == 200
    assert client.get(f"/v1/jobs/{second}").json()["queue_position"] == 1
    assert client.patch(f"/v1/jobs/{second}", json={"priority": 7}).status_code == 200
    assert client.get(f"/v1/jobs/{second}").json()["priority"] == 7
    set_job(session, second, status="failed", message="out of memory")
    job = client.get(f"/v1/jobs/{second}").json()
    assert (job["status"], job["message"], job["queue_position"]) == ("failed", "out of memory", None)


def test_a_running_job_s_eta_follows_the_clock(
    client: TestClient, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit(client)["id"]
    started = utcnow()
    # NaN is what a diverged loss reports; JSON has no NaN, so it leaves as null.
    metrics = {"loss": 0.5, "eval_loss": float("nan")}
    set_job(session, job_id, status="running", running_at=started, progress_step=10, progress_total=20)
    set_job(session, job_id, latest_metrics=metrics)
    etas = []
    for elapsed in (timedelta(seconds=10), timedelta(seconds=30)):
        monkeypatch.setattr(jobs, "utcnow", lambda elapsed=elapsed: started + elapsed)
        response = client.get(f"/v1/jobs/{job_id}")
        etas.append(response.json()["progress"]["eta_s"])
    assert etas == [10.0, 30.0]
    assert response.json()["latest_metrics"] == {"loss": 0.5, "eval_loss": None}
    # The body is JobPublic's own JSON, as FastAPI would send the model.
    adapter = TypeAdapter(JobPublic)
    assert response.content == adapter.dump_json(adapter.validate_json(response.content))


def test_a_client_with_the_current_body_gets_304_until_the_job_changes(client: TestClient) -> None:
    job_id = submit(client)["id"]
    path = f"/v1/jobs/{job_id}"
    first = client.get(path)
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"
    assert etag.startswith('"') and etag.endswith('"'), "a strong ETag"

    again = client.get(path, headers={"If-None-Match": etag})
    assert (again.status_code, again.content) == (304, b"")
    assert (again.headers["etag"], again.headers["cache-control"]) == (etag, "no-cache")
    # A list of tags, or the weak form of the same tag, names the same body.
    for sent in (f'"other", {etag}', f"W/{etag}", "*"):
        assert client.get(path, headers={"If-None-Match": sent}).status_code == 304, sent
    assert client.get(path, headers={"If-None-Match": '"other"'}).status_code == 200

    assert client.post(f"{path}/cancel").status_code == 200
    changed = client.get(path, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.json()["status"] == "cancelled"
    assert changed.headers["etag"] != etag
    assert client.get(path, headers={"If-None-Match": changed.headers["etag"]}).status_code == 304


def test_a_running_job_is_revalidated_while_its_eta_stands_still(
    client: TestClient, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit(client)["id"]
    started = utcnow()
    set_job(session, job_id, status="running", running_at=started, progress_step=10, progress_total=20)
    monkeypatch.setattr(jobs, "utcnow", lambda: started + timedelta(seconds=10))
    etag = client.get(f"/v1/jobs/{job_id}").headers["etag"]
    assert client.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": etag}).status_code == 304
    monkeypatch.setattr(jobs, "utcnow", lambda: started + timedelta(seconds=20))
    moved = client.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": etag})
    assert moved.status_code == 200 and moved.json()["progress"]["eta_s"] == 20.0


def test_the_jobs_page_is_each_job_as_its_own_get_shows_it_and_revalidates(
    client: TestClient, session: Session
) -> None:
    """The dashboard's jobs page: every entry as GET /v1/jobs/{id} shows that job (the plan's server folders
    as their variables, the queue position), with an ETag that a copy still current gets a 304 for."""
    ids = [submit(client)["id"] for _ in range(3)]
    set_job(session, ids[0], status="running", running_at=utcnow(), progress_step=0, progress_total=20)
    page = client.get("/v1/jobs", params={"limit": 10})
    assert page.json()["data"] == [client.get(f"/v1/jobs/{job_id}").json() for job_id in reversed(ids)]
    assert "$TRAINYARD_RUNS_DIR" in " ".join(page.json()["data"][0]["plan"]["argv"])
    etag = page.headers["etag"]
    again = client.get("/v1/jobs", params={"limit": 10}, headers={"If-None-Match": etag})
    assert (again.status_code, again.content) == (304, b"")
    assert client.post(f"/v1/jobs/{ids[1]}/cancel").status_code == 200
    changed = client.get("/v1/jobs", params={"limit": 10}, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.json()["data"][1]["status"] == "cancelled"
