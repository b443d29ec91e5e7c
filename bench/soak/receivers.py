"""Webhook receivers on loopback, real HTTP servers: a normal one (200 at once), a failing one (500 always)
and a drip (its whole answer one byte every few seconds). Each keeps what it was sent and checks its
signature as a receiver does; the checks judge the normal one's."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET = "soak-webhook-secret-of-32-chars!"
DRIP_S = 3.0  # between two bytes of the drip's answer: under the sender's read timeout, so it never fires
DRIP_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


class Behaviour(StrEnum):
    NORMAL = "normal"
    FAILING = "failing"
    DRIP = "drip"


@dataclass(frozen=True)
class Received:
    delivery: int
    event: str
    job_id: int
    at: float  # time.time() on arrival
    signed: bool


@dataclass
class Receiver:
    behaviour: Behaviour
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = self.rfile.read(length)
                if len(body) < length:  # the sender gave up mid-body at its deadline: nothing was delivered
                    self.close_connection = True
                    return
                receiver.keep(dict(self.headers), body)
                if receiver.behaviour is Behaviour.DRIP:
                    return self._drip()
                self.send_response(500 if receiver.behaviour is Behaviour.FAILING else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def _drip(self) -> None:
                self.close_connection = True
                for byte in DRIP_ANSWER:
                    time.sleep(DRIP_S)
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:  # the sender gave up: what it should do
                        return

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(
            target=self.server.serve_forever, name=f"receiver-{self.behaviour}", daemon=True
        ).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/{self.behaviour}"

    def keep(self, headers: dict[str, str], body: bytes) -> None:
        sent = json.loads(body)
        # As docs/integrations.md tells a receiver to check it.
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        signed = hmac.compare_digest(headers.get("X-Trainyard-Signature", ""), expected)
        arrived = Received(
            int(headers["X-Trainyard-Delivery"]), sent["event"], sent["job"]["id"], time.time(), signed
        )
        with self.lock:
            self.received.append(arrived)

    def deliveries(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_receivers() -> dict[Behaviour, Receiver]:
    return {behaviour: Receiver(behaviour) for behaviour in Behaviour}
