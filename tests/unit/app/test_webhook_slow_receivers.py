"""A receiver that drips its answer a byte at a time holds only its own deliveries (issue 42, #5): two real
senders (as two API processes have) share one SQLite database; alice's webhook goes to a drip receiver,
bob's to a healthy one. Bob's deliveries arrive at once, each drip attempt ends at the deadline counted from
its claim, no sender sends more than its bound to the drip host at once, and no delivery is ever on the wire
twice at the same time."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.main import create_app
from app.services.integrations.webhook_sender import WebhookSender
from core.config import Settings, get_settings
from core.keys import create_key
from core.states import JobStatus
from core.transitions import move
from tests.unit.app.test_webhooks_api import bearer, body
from tests.unit.conftest import job_body
from tests.unit.core.test_webhook_outbox import Receiver

DEADLINE_S = 2.0
DRIP_EVERY_S = 0.5  # the whole answer would take 20 s
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
S = JobStatus


@dataclass
class Drip:
    """A loopback server on the healthy receiver's host, 127.0.0.1, on a port of its own (another destination:
    two users' services behind one address), that reads each request whole, then sends its answer a byte every
    DRIP_EVERY_S, noting when each connection closed."""

    # (delivery id, when the request was read, when the client went), monotonic seconds
    attempts: list[tuple[str, float, float]] = field(default_factory=list)
    open_now: int = 0
    most_open: int = 0

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            head, _, rest = _read_head(conn)
            headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
            while len(rest) < int(headers["Content-Length"]):
                rest += conn.recv(65536)
            began = time.monotonic()
            with self.lock:
                self.open_now += 1
                self.most_open = max(self.most_open, self.open_now)
            # A timeout, not select(): the suite's process may hold more than select's 1,024 descriptors.
            conn.settimeout(DRIP_EVERY_S)
            try:
                for byte in ANSWER:
                    conn.sendall(bytes([byte]))
                    try:
                        if not conn.recv(1):  # the sender closed: its attempt ended
                            break
                    except TimeoutError:
                        continue
            except OSError:
                pass
            with self.lock:
                self.open_now -= 1
                self.attempts.append((headers["X-Trainyard-Delivery"], began, time.monotonic()))

    def close(self) -> None:
        self.listener.close()


def _read_head(conn: socket.socket) -> tuple[bytes, bytes, bytes]:
    read = b""
    while b"\r\n\r\n" not in read:
        read += conn.recv(65536)
    return read.partition(b"\r\n\r\n")


@pytest.fixture
def receivers() -> Iterator[tuple[Drip, Receiver]]:
    drip, healthy = Drip(), Receiver()
    yield drip, healthy
    drip.close()
    healthy.close()


def test_a_drip_receiver_holds_only_its_own_deliveries(
    auth_on: Settings,
    session: Session,
    receivers: tuple[Drip, Receiver],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drip, healthy = receivers
    for name, value in {
        "ALLOW": "127.0.0.*",
        "TIMEOUT_S": str(DEADLINE_S),
        "MAX_IN_FLIGHT": "2",
        "MAX_IN_FLIGHT_PER_DESTINATION": "1",
        "BACKOFF_S": "0.1",
        "POLL_S": "0.05",
    }.items():
        monkeypatch.setenv(f"TRAINYARD_WEBHOOK_{name}", value)
    get_settings.cache_clear()
    client = TestClient(create_app())
    alice, bob = (create_key(session, user, admin=False) for user in ("alice", "bob"))
    for token, url in ((alice, drip.url), (bob, healthy.url)):
        assert client.post("/v1/webhooks", json=body(url), headers=bearer(token)).status_code == 201
    # Alice's state changes first: the outbox's oldest rows are all for the drip receiver.
    for token in (alice, bob):
        job_id = client.post("/v1/jobs", json=job_body(), headers=bearer(token)).json()["job"]["id"]
        for before, after in itertools.pairwise((S.QUEUED, S.STARTING, S.RUNNING, S.SUCCEEDED)):
            assert move(session, job_id, before, after)
            session.commit()

    senders = [WebhookSender(), WebhookSender()]
    started = time.monotonic()
    for sender in senders:
        sender.start()
    try:
        while len(healthy.received) < 3:
            assert time.monotonic() - started < 4, f"bob got {len(healthy.received)} of 3 in 4 s"
            time.sleep(0.02)
        time.sleep(2.5 * DEADLINE_S)  # drip attempts end, are retried, maybe by the other sender
    finally:
        for sender in senders:
            sender.stop()

    assert len(drip.attempts) >= 4
    for _, began, ended in drip.attempts:  # the deadline counts from the claim, before the request
        assert ended - began < DEADLINE_S + 0.6, drip.attempts
    assert drip.most_open <= len(senders)  # each sender sends one at a time to the drip receiver
    by_delivery = sorted(drip.attempts)
    for (first, _, ended), (second, began, _) in itertools.pairwise(by_delivery):
        assert first != second or began >= ended, f"delivery {first} was sent twice at once"
    shown = client.get("/v1/webhooks", headers=bearer(alice)).json()["data"]
    deliveries = client.get(f"/v1/webhooks/{shown[0]['id']}/deliveries", headers=bearer(alice)).json()
    assert {d["status"] for d in deliveries["data"]} == {"pending"}
    assert any("TRAINYARD_WEBHOOK_TIMEOUT_S" in (d["error"] or "") for d in deliveries["data"])


def test_one_destination_cannot_be_given_every_slot(settings: Settings) -> None:
    with pytest.raises(ValidationError, match="TRAINYARD_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION"):
        Settings(webhook_max_in_flight=4, webhook_max_in_flight_per_destination=4)
