"""The webhook outbox end to end in one process: transitions through core.transitions.move write delivery
rows in their own transaction, and the sender POSTs them, signed, to a real receiver on loopback."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.services.integrations.webhook_sender import claim_hold, send_due
from core.config import Settings, get_settings
from core.integrations.webhook_events import EVENT_NAMES
from core.integrations.webhook_outbox import DeliveryStatus, claim
from core.models import WebhookDelivery, utcnow
from core.states import JobStatus
from core.transitions import move
from tests.unit.conftest import submit

SECRET = "a-secret-of-16-chars-or-more"
S = JobStatus


@dataclass
class Receiver:
    """A loopback HTTP server that answers each POST with the next scripted status (then 200), and keeps
    what it was sent."""

    script: list[int] = field(default_factory=list)
    location: str | None = None  # sent with 3xx answers
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                code = receiver.script.pop(0) if receiver.script else 200
                self.send_response(code)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hook"

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def verified(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["X-Trainyard-Signature"], expected)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


@pytest.fixture
def quick(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Loopback allowed (the receiver is there) and retries a few hundredths of a second apart."""
    monkeypatch.setenv("TRAINYARD_WEBHOOK_ALLOW", "127.0.0.1")
    monkeypatch.setenv("TRAINYARD_WEBHOOK_BACKOFF_S", "0.01")
    get_settings.cache_clear()
    return get_settings()


def hook(client: TestClient, url: str, events: list[str]) -> int:
    response = client.post("/v1/webhooks", json={"url": url, "events": events, "secret": SECRET})
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def walk(session: Session, job_id: int, *path: JobStatus) -> None:
    """Move the job along `path`, committing each step, as the worker and the API do."""
    for before, after in itertools.pairwise(path):
        assert move(session, job_id, before, after)
        session.commit()


def pending(session: Session) -> int:
    query = select(func.count()).where(WebhookDelivery.status == DeliveryStatus.PENDING)
    count = session.scalar(query)
    session.rollback()
    return count or 0


def drain(settings: Settings, session: Session, within_s: float = 60.0) -> None:
    """Send until nothing is pending (retries included), as the sender's loop would; the bound is only a
    hang's, since a starved test process on a loaded box took more than 5 s."""
    deadline = time.monotonic() + within_s
    while pending(session) and time.monotonic() < deadline:
        send_due(settings)
        time.sleep(0.01)


def test_every_transition_arrives_once_signed(
    quick: Settings, client: TestClient, receiver: Receiver, session: Session
) -> None:
    hook(client, receiver.url, ["*"])
    paths = [
        (
            S.QUEUED,
            S.STARTING,
            S.RUNNING,
            S.PREEMPTING,
            S.QUEUED,
            S.STARTING,
            S.RUNNING,
            S.RESTARTING,
            S.STARTING,
        ),
        (S.QUEUED, S.STARTING, S.RUNNING, S.SUCCEEDED),
        (S.QUEUED, S.FAILED),
        (S.QUEUED, S.STARTING, S.TIMED_OUT),
        (S.QUEUED, S.STARTING, S.CANCELLING, S.CANCELLED),
    ]
    expected = []
    for path in paths:
        job_id = submit(client)["id"]
        walk(session, job_id, *path)
        expected += [(job_id, f"job.{status}") for status in path[1:]]
    drain(quick, session)
    assert sorted((b["job"]["id"], b["event"]) for b in receiver.bodies()) == sorted(expected)
    assert {event for _, event in expected} <= set(EVENT_NAMES)
    for headers, body in receiver.received:
        assert verified(headers, body)
        sent = json.loads(body)
        assert headers["X-Trainyard-Event"] == sent["event"]
        assert headers["X-Trainyard-Delivery"] == str(sent["id"])
    # The job as GET /v1/jobs/{id} shows it.
    last = receiver.bodies()[-1]
    assert last["job"] == client.get(f"/v1/jobs/{last['job']['id']}").json()


def test_only_the_events_asked_for_and_only_the_owners_jobs(
    quick: Settings, client: TestClient, receiver: Receiver, session: Session
) -> None:
    hook(client, receiver.url, ["job.succeeded", "job.failed"])
    job_id = submit(client)["id"]
    walk(session, job_id, S.QUEUED, S.STARTING, S.RUNNING, S.SUCCEEDED)
    drain(quick, session)
    assert [b["event"] for b in receiver.bodies()] == ["job.succeeded"]


def test_a_rolled_back_transition_leaves_no_delivery(
    quick: Settings, client: TestClient, receiver: Receiver, session: Session
) -> None:
    hook(client, receiver.url, ["*"])
    job_id = submit(client)["id"]
    assert move(session, job_id, S.QUEUED, S.STARTING)
    assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 1
    session.rollback()
    assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0


def test_500_twice_then_200_is_three_attempts_of_one_delivery(
    quick: Settings, client: TestClient, receiver: Receiver, session: Session
) -> None:
    hook_id = hook(client, receiver.url, ["job.starting"])
    receiver.script = [500, 500]
    walk(session, submit(client)["id"], S.QUEUED, S.STARTING)
    drain(quick, session)
    assert len(receiver.received) == 3
    assert {headers["X-Trainyard-Delivery"] for headers, _ in receiver.received} == {
        str(receiver.bodies()[0]["id"])
    }
    assert len({body for _, body in receiver.received}) == 1  # the same bytes each time, the same signature
    [shown] = client.get(f"/v1/webhooks/{hook_id}/deliveries").json()["data"]
    assert (shown["status"], shown["attempts"], shown["response_code"]) == ("delivered", 3, 200)


def test_a_redirect_is_an_answer_not_followed(quick: Settings, client: TestClient, session: Session) -> None:
    target = Receiver()
    redirecting = Receiver(script=[302] * 100, location=target.url)
    try:
        hook_id = hook(client, redirecting.url, ["job.starting"])
        walk(session, submit(client)["id"], S.QUEUED, S.STARTING)
        send_due(quick)
        assert target.received == []
        [shown] = client.get(f"/v1/webhooks/{hook_id}/deliveries").json()["data"]
        assert (shown["status"], shown["response_code"]) == ("pending", 302)
    finally:
        target.close()
        redirecting.close()


def test_past_the_deadline_a_delivery_fails(
    quick: Settings, client: TestClient, receiver: Receiver, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_WEBHOOK_RETRY_DEADLINE_S", "0.001")
    get_settings.cache_clear()
    hook_id = hook(client, receiver.url, ["job.starting"])
    receiver.script = [503] * 10
    walk(session, submit(client)["id"], S.QUEUED, S.STARTING)
    drain(get_settings(), session)
    assert len(receiver.received) == 1
    [shown] = client.get(f"/v1/webhooks/{hook_id}/deliveries").json()["data"]
    assert (shown["status"], shown["response_code"]) == ("failed", 503)
    assert shown["error"].startswith("HTTP 503")


def test_a_claimed_delivery_is_not_claimed_again_until_its_hold_lapses(
    quick: Settings, client: TestClient, receiver: Receiver, session: Session
) -> None:
    hook(client, receiver.url, ["job.starting"])
    walk(session, submit(client)["id"], S.QUEUED, S.STARTING)
    [delivery_id] = session.scalars(select(WebhookDelivery.id))
    now, hold = utcnow(), claim_hold(quick)
    assert claim(session, delivery_id, now, hold) == 1
    assert claim(session, delivery_id, now, hold) is None
    assert claim(session, delivery_id, now + hold, hold) == 2
