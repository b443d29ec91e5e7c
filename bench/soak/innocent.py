"""The innocent user: submits a tiny job now and then and looks at their own job and list, as someone sharing
the service with the load does; every GET is timed, answer or not. Apart from them, /healthz is asked every
second: the service must never say it is unavailable."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

import httpx

from bench.soak.client import TIMEOUT_S, TRANSPORT_ERROR, User
from bench.soak.load import Submitted, submit
from bench.soak.specs import builtin
from tests.integration.servers import Stack

PROBE_S = 0.5  # between two GETs
SUBMIT_EVERY = 40  # probes: a job every 20 s
HEALTH_S = 1.0


@dataclass(frozen=True)
class Probe:
    at_s: float  # since the soak started
    seconds: float
    outcome: str  # the status code, or "transport"


@dataclass
class Innocent:
    user: User
    stack: Stack
    started: float
    closed: threading.Event  # to submissions: they look on while the service drains
    probes: list[Probe] = field(default_factory=list)
    health: list[Probe] = field(default_factory=list)  # /healthz's answers
    done: Submitted = field(default_factory=Submitted)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self.threads = [
            threading.Thread(target=self._probe, name="soak-innocent", daemon=True),
            threading.Thread(target=self._health, name="soak-healthz", daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _timed_get(self, client: httpx.Client, path: str) -> Probe:
        """The GET's outcome, timed; `at_s` is when its answer came."""
        began = time.perf_counter()
        try:
            outcome = str(client.get(path).status_code)
        except httpx.TransportError:
            outcome = TRANSPORT_ERROR
        seconds = time.perf_counter() - began
        return Probe(round(time.monotonic() - self.started, 2), seconds, outcome)

    def _probe(self) -> None:
        with self.user.client(self.stack) as client:
            for tick in itertools.count():
                if tick % SUBMIT_EVERY == 0 and not self.closed.is_set():
                    submit(self.user, client, builtin("innocent", 5, tracked=False), self.done, "innocent")
                own = max(self.done.jobs, default=None)
                path = f"/v1/jobs/{own}" if own and tick % 2 else "/v1/jobs?limit=20"
                self.probes.append(self._timed_get(client, path))
                if self.stopping.wait(PROBE_S):
                    return

    def _health(self) -> None:
        with httpx.Client(base_url=self.stack.url, timeout=TIMEOUT_S) as client:
            while not self.stopping.wait(HEALTH_S):
                self.health.append(self._timed_get(client, "/healthz"))

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()
