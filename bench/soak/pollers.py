"""Dashboard pages left open (64 in the full soak): asyncio tasks that each ask, every POLL_S as
app/web/api.js does, for a view of the dashboard: the jobs list, the queue, or a job's page (the job, its
events, checkpoints, new metric points and log bytes).

They run in a process of their own, as browsers on other machines would: in the soak's own process, their
parsing of every answer held the interpreter lock the innocent user's timed requests wait for, and so counted
in what the innocent user measured."""

from __future__ import annotations

import asyncio
import multiprocessing
import random
from collections import Counter
from multiprocessing.synchronize import Event
from typing import Any

import httpx

from bench.soak.client import TIMEOUT_S, TRANSPORT_ERROR, User

POLL_S = 2.0  # app/web/api.js's POLL_MS


class Page:
    """One open page: which view it shows, and how far it has read the job it shows."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.job_id: int | None = None
        self.after_step = 0
        self.log_offset = 0

    def paths(self, listed: list[dict[str, Any]]) -> list[str]:
        view = self.rng.choice(("list", "queue", "job"))
        if view == "list" or (view == "job" and not listed):
            return ["/v1/jobs?limit=100"]
        if view == "queue":
            return ["/v1/queue", "/v1/jobs?status=queued&limit=200"]
        if self.job_id is None or self.rng.random() < 0.2:  # the user opens another job now and then
            self.job_id, self.after_step, self.log_offset = self.rng.choice(listed)["id"], 0, 0
        job = f"/v1/jobs/{self.job_id}"
        return [
            job,
            f"{job}/events",
            f"{job}/checkpoints",
            f"{job}/metrics?after_step={self.after_step}&limit=5000",
            f"{job}/logs?offset={self.log_offset}&rank=0",
        ]


class Pollers:
    def __init__(self, url: str, users: list[User], seed: int, pages: int) -> None:
        context = multiprocessing.get_context("spawn")  # the soak's process runs threads: never fork it
        self.stopping, self.results = context.Event(), context.SimpleQueue()
        keys = [(user.name, user.key) for user in users]
        self.process = context.Process(
            target=poll, args=(url, keys, seed, pages, self.stopping, self.results), name="soak-pollers"
        )
        self.answers: Counter[str] = Counter()

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.stopping.set()
        self.answers = Counter(self.results.get())
        self.process.join()


def poll(url: str, keys: list[tuple[str, str]], seed: int, pages: int, stopping: Event, results: Any) -> None:
    """The pollers' process: the pages until `stopping`, then their answers by status onto `results`."""
    answers: Counter[str] = Counter()
    users = [User(name, key) for name, key in keys]
    asyncio.run(_all(url, users, seed, pages, stopping, answers))
    results.put(dict(answers))


async def _all(
    url: str, users: list[User], seed: int, pages: int, stopping: Event, answers: Counter[str]
) -> None:
    limits = httpx.Limits(max_connections=pages)
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S, limits=limits) as client:
        await asyncio.gather(
            *(_page(client, users[n % len(users)], seed, n, stopping, answers) for n in range(pages))
        )


async def _page(
    client: httpx.AsyncClient, user: User, seed: int, number: int, stopping: Event, answers: Counter[str]
) -> None:
    page = Page(random.Random(seed * 1000 + number))
    listed: list[dict[str, Any]] = []
    await asyncio.sleep(page.rng.uniform(0, POLL_S))  # pages opened one after another, not in step
    while not stopping.is_set():
        for path in page.paths(listed):
            body = await _get(client, user, path, answers)
            if body is None:
                continue
            if path.startswith("/v1/jobs?limit"):
                listed = body["data"]
            elif "/metrics?" in path and body["data"]:
                page.after_step = max(row["step"] for row in body["data"])
            elif "/logs?" in path:
                page.log_offset = body.get("next_offset", page.log_offset)
        await asyncio.sleep(POLL_S)


async def _get(
    client: httpx.AsyncClient, user: User, path: str, answers: Counter[str]
) -> dict[str, Any] | None:
    try:
        response = await client.get(path, headers=user.headers)
    except httpx.TransportError:
        answers[TRANSPORT_ERROR] += 1
        return None
    answers[str(response.status_code)] += 1
    ok = response.status_code == 200 and response.headers.get("content-type", "").startswith(
        "application/json"
    )
    return response.json() if ok else None
