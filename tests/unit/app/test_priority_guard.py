"""Only admins may set a priority above TRAINYARD_ADMIN_PRIORITY_ABOVE, since a higher priority starts first
and preempts lower ones: at submit (dry runs included) and by PATCH."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.keys import create_key
from tests.unit.app.test_api_compare import bearer
from tests.unit.conftest import assert_problem, job_body


def test_only_admins_set_a_priority_above_the_threshold(auth_on: Settings, session: Session) -> None:
    ada, root = create_key(session, "ada", admin=False), create_key(session, "root", admin=True)
    client = TestClient(create_app())
    above = {**job_body(), "priority": auth_on.admin_priority_above + 1}
    fix = "only admins may set"
    assert_problem(client.post("/v1/jobs", json=above, headers=bearer(ada)), "priority", fix)
    dry = client.post("/v1/jobs", params={"dry_run": True}, json=above, headers=bearer(ada))
    assert_problem(dry, "priority", fix)
    at_threshold = {**job_body(), "priority": auth_on.admin_priority_above}
    job = client.post("/v1/jobs", json=at_threshold, headers=bearer(ada)).json()["job"]
    raised = client.patch(f"/v1/jobs/{job['id']}", json={"priority": 100}, headers=bearer(ada))
    assert_problem(raised, "priority", fix)
    assert (
        client.patch(f"/v1/jobs/{job['id']}", json={"priority": 100}, headers=bearer(root)).status_code == 200
    )
    assert client.post("/v1/jobs", json=above, headers=bearer(root)).status_code == 201
