"""An admin's retry of a user's job (issue 28 #3) is the user's job: the user sees it, it counts against the
user's quota (and fair share, which follows the owner), it runs the user's bundle; the admin is recorded as
who asked, in the job and in its first event."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings, get_settings
from core.keys import create_key
from core.models import Job
from tests.unit.app.test_api_job_lookup import bearer
from tests.unit.app.test_api_retry_user_code import FILES, GZIP, factory_body, fail
from tests.unit.code_archives import bundle_archive
from tests.unit.conftest import job_body


def test_an_admins_retry_of_a_users_job_stays_the_users(
    auth_on: Settings, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_QUOTA_MAX_JOBS", "1")
    get_settings.cache_clear()
    as_ada, as_root = (bearer(create_key(session, user, admin=user == "root")) for user in ("ada", "root"))
    client = TestClient(create_app())
    pushed = client.post("/v1/code", content=bundle_archive(FILES), headers=GZIP | as_ada)
    assert pushed.status_code == 201, pushed.text
    # ada's own bundle, which root never pushed: the retry runs it as ada's.
    created = client.post("/v1/jobs", json=factory_body(pushed.json()["id"]), headers=as_ada)
    assert created.status_code == 201, created.text
    parent = created.json()["job"]["id"]
    fail(session, parent)

    response = client.post(f"/v1/jobs/{parent}/retry", headers=as_root)
    assert response.status_code == 201, response.text
    child = response.json()["job"]["id"]
    seen = client.get(f"/v1/jobs/{child}", headers=as_ada)
    assert seen.status_code == 200, "the owner sees the retry of their job"
    assert seen.json()["requested_by"] == "root"
    assert created.json()["job"]["requested_by"] == "ada"
    assert session.get_one(Job, child).owner == "ada"  # what usage and fair share are charged to
    events = client.get(f"/v1/jobs/{child}/events", headers=as_ada).json()["data"]
    assert events[0]["message"] == f"retry of job {parent}, asked by root"

    # The retry is ada's one unfinished job: ada's quota is full, root's is not.
    refused = client.post("/v1/jobs", json=job_body(), headers=as_ada)
    assert refused.status_code == 429, refused.text
    assert "user ada already has 1 unfinished jobs" in refused.json()["detail"]
    assert client.post("/v1/jobs", json=job_body(), headers=as_root).status_code == 201
