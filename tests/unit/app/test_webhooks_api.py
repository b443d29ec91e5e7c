"""/v1/webhooks: a user makes, lists and deletes their own webhooks and reads their deliveries; the secret is
never shown; events and destinations are checked at creation (422 naming the field); only an admin's may
fire for every user's jobs, and those fire for another user's job while a user's own fire only for theirs."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.main import create_app
from core.config import Settings, get_settings
from core.keys import create_key
from core.states import JobStatus
from core.transitions import move
from tests.unit.conftest import assert_problem, job_body
from tests.unit.core.test_webhook_outbox import SECRET

PUBLIC = "http://93.184.215.14/hook"  # a global address: no name to resolve


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def body(url: str = PUBLIC, events: list[str] | None = None, **more: object) -> dict[str, object]:
    return {"url": url, "events": events or ["*"], "secret": SECRET, **more}


def test_made_listed_and_deleted_without_the_secret(client: TestClient) -> None:
    made = client.post("/v1/webhooks", json=body(events=["job.succeeded", "job.failed"]))
    assert made.status_code == 201, made.text
    assert "secret" not in made.json()
    assert made.json()["events"] == ["job.succeeded", "job.failed"]
    listed = client.get("/v1/webhooks").json()["data"]
    assert [hook["id"] for hook in listed] == [made.json()["id"]]
    assert SECRET not in client.get("/v1/webhooks").text
    assert client.get(f"/v1/webhooks/{made.json()['id']}/deliveries").json() == {"data": []}
    assert client.delete(f"/v1/webhooks/{made.json()['id']}").status_code == 204
    assert client.get("/v1/webhooks").json()["data"] == []
    assert client.delete(f"/v1/webhooks/{made.json()['id']}").status_code == 404


def test_an_unknown_event_is_a_422_listing_the_valid_ones(client: TestClient) -> None:
    response = client.post("/v1/webhooks", json=body(events=["job.done"]))
    assert_problem(response, "events", "'job.done'")
    assert "job.succeeded" in response.json()["detail"] and "'*'" in response.json()["detail"]


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://127.0.0.1:9/hook", "127.0.0.1"),  # loopback, not in TRAINYARD_WEBHOOK_ALLOW
        ("http://localhost/hook", "TRAINYARD_WEBHOOK_ALLOW"),
        ("http://10.1.2.3/hook", "10.1.2.3"),  # private
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),  # link-local: cloud metadata
        ("http://[::ffff:192.168.0.1]/hook", "192.168.0.1"),  # private behind an IPv6 mapping
        ("http://[fd00::1]/hook", "fd00::1"),  # unique local
        ("file:///etc/passwd", "http"),
        ("ftp://93.184.215.14/x", "http"),
        ("http://user:pw@93.184.215.14/x", "credentials"),
    ],
)
def test_a_refused_destination_is_a_422_naming_url(client: TestClient, url: str, fragment: str) -> None:
    assert_problem(client.post("/v1/webhooks", json=body(url)), "url", fragment)
    assert client.get("/v1/webhooks").json()["data"] == []


def test_the_allow_list_admits_a_loopback_host(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_WEBHOOK_ALLOW", "hooks.internal, 127.0.0.*")
    get_settings.cache_clear()
    assert client.post("/v1/webhooks", json=body("http://127.0.0.1:8080/hook")).status_code == 201


def test_only_an_admin_fires_for_every_user(auth_on: Settings, session: Session) -> None:
    root, bob, eve = (create_key(session, u, admin=u == "root") for u in ("root", "bob", "eve"))
    client = TestClient(create_app())
    refused = client.post("/v1/webhooks", json=body(all_users=True), headers=bearer(bob))
    assert refused.status_code == 403 and "all_users" in refused.json()["detail"]
    everyone = client.post("/v1/webhooks", json=body(all_users=True), headers=bearer(root)).json()
    bobs = client.post("/v1/webhooks", json=body(), headers=bearer(bob)).json()
    eves = client.post("/v1/webhooks", json=body(), headers=bearer(eve)).json()
    # Each user sees their own; another's is missing, not forbidden.
    assert [h["id"] for h in client.get("/v1/webhooks", headers=bearer(bob)).json()["data"]] == [bobs["id"]]
    assert client.delete(f"/v1/webhooks/{eves['id']}", headers=bearer(bob)).status_code == 404
    assert client.get(f"/v1/webhooks/{eves['id']}/deliveries", headers=bearer(bob)).status_code == 404
    job_id = client.post("/v1/jobs", json=job_body(), headers=bearer(bob)).json()["job"]["id"]
    assert move(session, job_id, JobStatus.QUEUED, JobStatus.STARTING)
    session.commit()

    def events(hook: dict[str, object], token: str) -> list[tuple[int, str]]:
        shown = client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=bearer(token)).json()["data"]
        return [(d["job_id"], d["event"]) for d in shown]

    assert events(bobs, bob) == [(job_id, "job.starting")]
    assert events(everyone, root) == [(job_id, "job.starting")]
    assert events(eves, eve) == []
