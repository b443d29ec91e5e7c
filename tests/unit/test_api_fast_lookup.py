"""GET /v1/jobs/{id} through the fast path must answer exactly as FastAPI's route does, errors included."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from pydantic import TypeAdapter
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.api import fast_lookup
from app.api.deps import get_caller
from app.main import create_app
from app.schemas import JobPublic
from app.services.keys import Caller, create_key
from core.config import Settings
from core.models import Job
from tests.unit.conftest import job_body


@pytest.fixture
def fast_answers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The job ids of the requests the fast path took, so a test knows which way each one went in."""
    taken: list[int] = []
    authenticate: Callable[[Request], Awaitable[Caller]] = fast_lookup.get_caller

    async def counted(request: Request) -> Caller:
        taken.append(request.path_params["job_id"])
        return await authenticate(request)

    monkeypatch.setattr(fast_lookup, "get_caller", counted)
    return taken


def without_fast_path() -> FastAPI:
    app = create_app()
    app.user_middleware = [m for m in app.user_middleware if m.cls is not fast_lookup.JobLookupFastPath]
    return app


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def answer(client: TestClient, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    response = client.get(path, headers=headers, follow_redirects=False)
    return response.status_code, {k: v for k, v in response.headers.items() if k != "date"}, response.content


def test_fast_path_answers_as_the_fastapi_route(
    auth_on: Settings, session: Session, fast_answers: list[int]
) -> None:
    alice, bob, root = (create_key(session, user, admin=user == "root") for user in ("alice", "bob", "root"))
    fast, routed = TestClient(create_app()), TestClient(without_fast_path())
    running, queued = (
        fast.post("/v1/jobs", json=job_body(name="caf\u00e9"), headers=bearer(alice)).json()["job"]["id"]
        for _ in range(2)
    )
    started = datetime(2026, 1, 2, 3, 4, 5, 500, tzinfo=UTC)
    # step == total keeps the ETA at 0 whenever each app reads the row; NaN is what a diverged loss reports.
    session.execute(
        update(Job)
        .where(Job.id == running)
        .values(
            status="running",
            started_at=started,
            running_at=started,
            progress_step=5,
            progress_total=5,
            host="h",
            gpu_ids=[0, 1],
            latest_metrics={"loss": 0.1 + 0.2, "eval_loss": float("nan"), "lr": 1e-5},
        )
    )
    session.commit()
    keys = {"alice": bearer(alice), "bob": bearer(bob), "root": bearer(root), "none": {}}
    keys |= {"bad key": bearer("ty_nonsense"), "basic": {"Authorization": "Basic YTpi"}}
    for job_id in (running, queued, 999):
        for who, headers in keys.items():
            path = f"/v1/jobs/{job_id}"
            assert answer(fast, path, headers) == answer(routed, path, headers), (path, who)
    assert fast_answers == [job_id for job_id in (running, queued, 999) for _ in keys]
    statuses = [answer(fast, f"/v1/jobs/{running}", headers)[0] for headers in keys.values()]
    assert statuses == [200, 404, 200, 401, 401, 401], "alice's job: hers, hidden from bob, root sees all"
    _, headers, body = answer(fast, f"/v1/jobs/{running}", keys["bad key"])
    assert headers["www-authenticate"] == "Bearer" and b"the API key is not valid" in body
    # What FastAPI sends for a route that returns the model, which this route did before it rendered itself.
    _, _, body = answer(fast, f"/v1/jobs/{running}", keys["alice"])
    adapter = TypeAdapter(JobPublic)
    assert body == adapter.dump_json(adapter.validate_json(body))
    assert b'"eval_loss":null' in body and b'"eta_s":0.0' in body


def test_paths_fastapi_reads_otherwise_go_on_to_it(
    auth_on: Settings, session: Session, fast_answers: list[int]
) -> None:
    alice = create_key(session, "alice", admin=False)
    fast, routed = TestClient(create_app()), TestClient(without_fast_path())
    job_id = fast.post("/v1/jobs", json=job_body(), headers=bearer(alice)).json()["job"]["id"]
    fast_answers.clear()
    # A leading zero, ids outside 1..2**31-1, a trailing slash (a redirect), not a number.
    paths = (f"/v1/jobs/00{job_id}", "/v1/jobs/0", "/v1/jobs/2147483648", f"/v1/jobs/{job_id}/", "/v1/jobs/x")
    for path in paths:
        assert answer(fast, path, bearer(alice)) == answer(routed, path, bearer(alice)), path
    head = fast.head(f"/v1/jobs/{job_id}", headers=bearer(alice))
    assert head.status_code == routed.head(f"/v1/jobs/{job_id}", headers=bearer(alice)).status_code == 405
    assert fast_answers == []
    assert fast.get("/v1/jobs/2147483647", headers=bearer(alice)).status_code == 404
    assert fast_answers == [2**31 - 1]


def test_an_overridden_dependency_applies_to_lookups(settings: Settings, fast_answers: list[int]) -> None:
    app = create_app()
    client = TestClient(app)
    job_id = client.post("/v1/jobs", json=job_body()).json()["job"]["id"]
    app.dependency_overrides[get_caller] = lambda: Caller("somebody-else")
    assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    assert fast_answers == []
