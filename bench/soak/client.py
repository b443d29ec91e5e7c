"""A user of the API with their key: every answer counted by status, and a request that meets a killed API
process (the connection reset, or refused while it is replaced) sent again, as a client library would."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.integration.servers import LOCAL_TLS, Stack

RETRY_S = 0.5
RETRY_FOR_S = 120.0  # a PostgreSQL restart, or a worker's return, is over well within this
TIMEOUT_S = 30.0
TRANSPORT_ERROR = "transport"  # the Counter's key for an attempt that got no answer


@dataclass
class User:
    name: str
    key: str
    answers: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def client(self, stack: Stack) -> httpx.Client:
        return httpx.Client(base_url=stack.url, headers=self.headers, timeout=TIMEOUT_S, verify=LOCAL_TLS)

    def count(self, outcome: str) -> None:
        with self.lock:
            self.answers[outcome] += 1

    def call(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The first answer that is not a connection error or a 5xx; after RETRY_FOR_S, the last one (or the
        last connection error raised)."""
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            try:
                response = client.request(method, path, **kwargs)
            except httpx.TransportError:
                self.count(TRANSPORT_ERROR)
                if time.monotonic() > deadline:
                    raise
            else:
                self.count(str(response.status_code))
                if response.status_code < 500 or time.monotonic() > deadline:
                    return response
            time.sleep(RETRY_S)


def make_users(stack: Stack, names: tuple[str, ...]) -> tuple[User, list[User]]:
    """The admin, whose first key comes from the server's own command, and a key per user from the API."""
    admin = User("root", stack.admin_key())
    with admin.client(stack) as client:
        made = [admin.call(client, "POST", "/v1/keys", json={"user": name}) for name in names]
    refused = [response.text for response in made if response.status_code != 201]
    if refused:
        raise RuntimeError(f"POST /v1/keys refused: {refused}")
    return admin, [User(name, response.json()["token"]) for name, response in zip(names, made, strict=True)]
