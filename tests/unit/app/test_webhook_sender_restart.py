"""A sender killed with SIGKILL between a delivery's attempts, and started again, delivers it once: its
state is in SQL (attempts, next_attempt_at), and the retries keep the delivery's id. The sender is the real
thread the API runs, in a process of its own so that it can be killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.config import Settings, get_settings
from core.states import JobStatus
from core.transitions import move
from tests.unit.core.test_webhook_outbox import Receiver, hook, verified

SENDER = (
    "from app.services.integrations.webhook_sender import WebhookSender; "
    "s = WebhookSender(); s.start(); s.join()"
)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.close()


def start_sender() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SENDER], cwd=os.getcwd(), stderr=subprocess.DEVNULL)


def wait_for(condition: Callable[[], bool], within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_sender_killed_mid_retry_and_restarted_delivers_once(
    settings: Settings,
    client: TestClient,
    session: Session,
    receiver: Receiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINYARD_WEBHOOK_ALLOW", "127.0.0.1")
    monkeypatch.setenv("TRAINYARD_WEBHOOK_POLL_S", "0.05")
    monkeypatch.setenv("TRAINYARD_WEBHOOK_BACKOFF_S", "2")  # the kill lands in the wait before attempt 2
    get_settings.cache_clear()
    hook_id = hook(client, receiver.url, ["job.starting"])
    receiver.script = [500, 500]
    job_id = client.post(
        "/v1/jobs", json={"name": "t", "model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}}
    )
    assert move(session, job_id.json()["job"]["id"], JobStatus.QUEUED, JobStatus.STARTING)
    session.commit()

    def first_attempt_settled() -> bool:
        # Killed before its outcome is stored, the sender would leave its claim held for claim_hold's span.
        [shown] = client.get(f"/v1/webhooks/{hook_id}/deliveries").json()["data"]
        return bool(shown["response_code"] == 500)

    first = start_sender()
    try:
        wait_for(lambda: len(receiver.received) == 1 and first_attempt_settled())
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = start_sender()
    try:
        wait_for(lambda: len(receiver.received) == 3)
        time.sleep(0.5)  # time for a wrongful fourth attempt
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait()

    assert len(receiver.received) == 3
    assert len({headers["X-Trainyard-Delivery"] for headers, _ in receiver.received}) == 1
    assert all(verified(headers, body) for headers, body in receiver.received)
    [shown] = client.get(f"/v1/webhooks/{hook_id}/deliveries").json()["data"]
    assert (shown["status"], shown["attempts"], shown["response_code"]) == ("delivered", 3, 200)
