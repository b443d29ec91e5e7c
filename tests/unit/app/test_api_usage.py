"""GET /v1/usage: each user sees their own recent use, admins everyone's, least used first; and the queue
names only the caller's use to a user who is not an admin."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings
from core.keys import create_key
from core.models import utcnow
from tests.unit.app.test_api_job_lookup import bearer
from tests.unit.conftest import job_body
from worker.executors.local.telemetry import charge


def test_usage_is_the_callers_own_unless_admin(auth_on: Settings, session: Session) -> None:
    ada, bob, root = (create_key(session, user, admin=user == "root") for user in ("ada", "bob", "root"))
    charge(session, "ada", 14.2 * 3600, 0.0, utcnow(), auth_on)
    charge(session, "bob", 0.3 * 3600, 2 * 3600, utcnow(), auth_on)
    session.commit()
    client = TestClient(create_app())

    def usage(token: str) -> list[tuple[str, float, float]]:
        body = client.get("/v1/usage", headers=bearer(token)).json()
        assert body["half_life_h"] == 24
        return [(u["user"], round(u["gpu_hours"], 1), round(u["cpu_core_hours"], 1)) for u in body["data"]]

    assert usage(ada) == [("ada", 14.2, 0.0)]
    assert usage(bob) == [("bob", 0.3, 2.0)]
    assert usage(root) == [("bob", 0.3, 2.0), ("ada", 14.2, 0.0)]
    assert client.get("/v1/usage").status_code == 401

    for token in (ada, bob):
        assert client.post("/v1/jobs", json=job_body(), headers=bearer(token)).status_code == 201
    shown = {
        who: client.get("/v1/queue", headers=bearer(token)).json()["fair_share"]
        for who, token in (("ada", ada), ("root", root))
    }
    # Bob's CPU use counts in the order, so both units show, Ada's included, though she sees only hers.
    both = "(use halves every 24 h; a CPU core-h counts 0.1 GPU-h)"
    assert shown["ada"].endswith(f": ada has used 14.2 GPU-h and 0.0 CPU core-h {both}")
    assert shown["root"].endswith(
        f": bob has used 0.3 GPU-h and 2.0 CPU core-h, ada 14.2 GPU-h and 0.0 CPU core-h {both}"
    )
