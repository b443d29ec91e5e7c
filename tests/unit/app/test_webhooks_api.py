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
        # IPv6 forms that carry an IPv4 (issue 42, #9)
        ("http://[::127.0.0.1]/hook", "::7f00:1"),  # IPv4-compatible: refused outright
        ("http://[::8.8.8.8]/hook", "::808:808"),  # even of a public IPv4
        ("http://[64:ff9b::7f00:1]/hook", "64:ff9b::7f00:1"),  # NAT64 of loopback
        ("http://[64:ff9b::a01:203]/hook", "64:ff9b::a01:203"),  # NAT64 of 10.1.2.3
        ("http://[64:ff9b:1::5db8:d70e]/hook", "64:ff9b:1::5db8:d70e"),  # local-use NAT64: refused outright
        ("http://[2002:7f00:1::1]/hook", "2002:7f00:1::1"),  # 6to4 of loopback
        ("http://[2002:a9fe:a9fe::1]/hook", "2002:a9fe:a9fe::1"),  # 6to4 of 169.254.169.254
        ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook", "2001:0:4136"),  # Teredo: refused outright
        ("http://[::ffff:7f00:1]/hook", "127.0.0.1"),  # IPv4-mapped loopback, written in hex
        ("file:///etc/passwd", "http"),
        ("ftp://93.184.215.14/x", "http"),
        ("http://user:pw@93.184.215.14/x", "credentials"),
    ],
)
def test_a_refused_destination_is_a_422_naming_url(client: TestClient, url: str, fragment: str) -> None:
    assert_problem(client.post("/v1/webhooks", json=body(url)), "url", fragment)
    assert client.get("/v1/webhooks").json()["data"] == []


@pytest.mark.parametrize(
    "url",
    [
        "http://[64:ff9b::5db8:d70e]/hook",  # NAT64 (DNS64) of the public 93.184.215.14
        "http://[2002:5db8:d70e::1]/hook",  # 6to4 of the same
        "http://[2606:4700:4700::1111]/hook",  # a plain public IPv6
    ],
)
def test_an_ipv6_form_of_a_public_address_is_taken(client: TestClient, url: str) -> None:
    assert client.post("/v1/webhooks", json=body(url)).status_code == 201


def test_a_user_at_the_webhook_limit_is_told_the_limit_and_the_fix(
    auth_on: Settings, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_WEBHOOK_MAX_PER_USER", "2")
    get_settings.cache_clear()
    bob, eve = (create_key(session, user, admin=False) for user in ("bob", "eve"))
    client = TestClient(create_app())
    made = [client.post("/v1/webhooks", json=body(), headers=bearer(bob)) for _ in range(2)]
    assert [response.status_code for response in made] == [201, 201]
    refused = client.post("/v1/webhooks", json=body(), headers=bearer(bob))
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    for fragment in ("TRAINYARD_WEBHOOK_MAX_PER_USER=2", "DELETE /v1/webhooks/{id}"):
        assert fragment in refused.json()["detail"]
    assert client.post("/v1/webhooks", json=body(), headers=bearer(eve)).status_code == 201  # per user
    client.delete(f"/v1/webhooks/{made[0].json()['id']}", headers=bearer(bob))
    assert client.post("/v1/webhooks", json=body(), headers=bearer(bob)).status_code == 201


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
