"""The users who load the service: each pushes the paced bundle, points webhooks at the three receivers, then
keeps a few jobs in flight (between them every kind once first, in a random order, then kinds at random;
every other built-in job exported to MLflow), runs a sweep now and then (the first user one at once), cancels
a job now and then, and downloads checkpoints, keeping each one's sha256 for the checks."""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.soak.client import User
from bench.soak.profile import Profile
from bench.soak.receivers import SECRET, Behaviour, Receiver
from bench.soak.specs import Kind, job_spec, paced_bundle, sweep
from tests.integration.jobs import TERMINAL
from tests.integration.servers import Stack

CANCEL_CHANCE = 0.05  # per look: a running or queued job of theirs cancelled
PAUSE_S = (1.0, 3.0)  # between two looks


@dataclass(frozen=True)
class Download:
    checkpoint_id: int
    status: int
    sha256: str


@dataclass
class Submitted:
    jobs: dict[int, str] = field(default_factory=dict)  # accepted job id → kind
    sweeps: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # why a submission was not accepted
    cancels: int = 0
    downloads: list[Download] = field(default_factory=list)


def hooks(user: User, client: httpx.Client, receivers: dict[Behaviour, Receiver]) -> dict[Behaviour, int]:
    """The user's webhook at each receiver, every event."""
    made = {}
    for behaviour, receiver in receivers.items():
        body = {"url": receiver.url, "events": ["*"], "secret": SECRET}
        response = user.call(client, "POST", "/v1/webhooks", json=body)
        if response.status_code != 201:
            raise RuntimeError(f"{user.name}: POST /v1/webhooks {response.status_code}: {response.text}")
        made[behaviour] = int(response.json()["id"])
    return made


def submit(user: User, client: httpx.Client, spec: dict[str, Any], done: Submitted, kind: str) -> int | None:
    """POST with an Idempotency-Key, so a retry after a lost answer finds the job it made, never a second."""
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    response = user.call(client, "POST", "/v1/jobs", json=spec, headers=headers)
    if response.status_code not in (200, 201):
        done.refused.append(f"{kind}: {response.status_code} {response.text[:200]}")
        return None
    job_id = int(response.json()["job"]["id"])
    done.jobs[job_id] = kind
    return job_id


class FirstKinds:
    """Every kind once first, in one seeded order, shared by the users: whoever submits next takes the next
    kind no one has submitted yet. The first len(Kind) jobs between them are every kind however few each user
    gets in: on a loaded box one user's first job may take a short soak's whole window."""

    def __init__(self, seed: int) -> None:
        self._left = random.Random(seed).sample(list(Kind), len(Kind))
        self._lock = threading.Lock()

    def take(self) -> Kind | None:
        """The next kind not yet taken; None once every kind has been."""
        with self._lock:
            return self._left.pop(0) if self._left else None


class LoadUser(threading.Thread):
    def __init__(
        self,
        user: User,
        stack: Stack,
        seed: int,
        profile: Profile,
        first_kinds: FirstKinds,
        sweeps_first: bool,
        closed: threading.Event,
    ) -> None:
        super().__init__(name=f"soak-user-{user.name}", daemon=True)
        self.user, self.stack, self.profile = user, stack, profile
        self.closed = closed  # to submissions: the user goes on looking, cancelling and downloading
        self.rng = random.Random(seed)
        # However short the soak, it runs every kind of job, a tracked one and a sweep.
        self.first_kinds = first_kinds
        self.tracked = itertools.cycle((True, False))
        self.sweeps_first = sweeps_first
        self.done = Submitted()
        self.stopping = threading.Event()
        self.code = ""

    def setup(self, receivers: dict[Behaviour, Receiver]) -> dict[Behaviour, int]:
        with self.user.client(self.stack) as client:
            headers = {"Content-Type": "application/gzip"}
            pushed = self.user.call(client, "POST", "/v1/code", content=paced_bundle(), headers=headers)
            if pushed.status_code not in (200, 201):
                raise RuntimeError(f"{self.user.name}: POST /v1/code {pushed.status_code}: {pushed.text}")
            self.code = pushed.json()["id"]
            return hooks(self.user, client, receivers)

    def run(self) -> None:
        with self.user.client(self.stack) as client:
            while not self.stopping.wait(self.rng.uniform(*PAUSE_S)):
                self.look(client)

    def look(self, client: httpx.Client) -> None:
        jobs = self.user.call(client, "GET", "/v1/jobs", params={"limit": 100}).json()["data"]
        unfinished = [job for job in jobs if job["status"] not in TERMINAL]
        if not self.closed.is_set():
            self.submit_more(client, unfinished)
        if unfinished and self.rng.random() < CANCEL_CHANCE:
            victim = self.rng.choice(unfinished)
            if self.user.call(client, "POST", f"/v1/jobs/{victim['id']}/cancel").status_code == 200:
                self.done.cancels += 1
        finished = [job for job in jobs if job["status"] == "succeeded"]
        if finished:
            self.download(client, self.rng.choice(finished)["id"])

    def submit_more(self, client: httpx.Client, unfinished: list[dict[str, Any]]) -> None:
        """A job while fewer than `in_flight` of theirs are unfinished; a sweep now and then while none of
        theirs runs."""
        if len([job for job in unfinished if job["sweep_id"] is None]) < self.profile.in_flight:
            kind = self.first_kinds.take() or self.rng.choice(list(Kind))
            tracked = kind is Kind.BUILTIN and next(self.tracked)
            submit(self.user, client, job_spec(kind, self.code, tracked), self.done, kind)
        if any(job["sweep_id"] for job in unfinished):
            return
        if (self.sweeps_first and not self.done.sweeps) or self.rng.random() < self.profile.sweep_chance:
            made = self.user.call(client, "POST", "/v1/sweeps", json=sweep(self.rng.randrange(2**31)))
            if made.status_code == 201:
                self.done.sweeps.append(int(made.json()["id"]))
            else:
                self.done.refused.append(f"sweep: {made.status_code} {made.text[:200]}")

    def download(self, client: httpx.Client, job_id: int) -> None:
        listed = self.user.call(client, "GET", f"/v1/jobs/{job_id}/checkpoints").json()["data"]
        if not listed:
            return
        checkpoint = self.rng.choice(listed)
        got = self.user.call(client, "GET", f"/v1/checkpoints/{checkpoint['id']}/download")
        sha = hashlib.sha256(got.content).hexdigest() if got.status_code == 200 else ""
        self.done.downloads.append(Download(int(checkpoint["id"]), got.status_code, sha))

    def stop(self) -> None:
        self.stopping.set()
        self.join()
