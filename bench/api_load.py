"""API load (issue 4, target 7): job lookups and submissions per second against the real service.

    python -m bench.api_load [--submissions 1000] [--requests 5000] [--profile] [--smoke]

Starts the API as `make run` does (alembic, SQLite in WAL mode, the embedded SQLAlchemy broker, a real
uvicorn on loopback) without a worker, so submissions are real POSTs that validate, plan, store the job and
ring the broker's doorbell, but nothing trains. Then, with httpx.AsyncClient:

1. POST /v1/jobs `submissions` times at SUBMIT_CONCURRENCY in flight: accepted (201) per second.
2. GET /v1/jobs/{id} over the stored jobs `requests` times at GET_CONCURRENCY in flight: p50/p99 latency.

Each phase stops by itself after PHASE_LIMIT_S. Client and server share the machine, so the client's own
work is in the figures. Targets: p99 <= 25 ms at 64 clients, >= 200 accepted submissions/s.
`--profile` samples the API process with py-spy during both phases and prints the functions that dominate.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.profile_stacks import summarize
from bench.report import record, section
from bench.table import markdown, number
from tests.integration.servers import Stack

SUBMIT_CONCURRENCY, GET_CONCURRENCY = 32, 64
PHASE_LIMIT_S = 60.0
# A CPU job the API accepts at once: no GPU to check, nothing on disk.
SPEC = {
    "name": "load",
    "model": {"arch": "mlp"},
    "data": {"dataset": "synthetic", "image_size": 8, "num_samples": 64},
    "train": {"max_steps": 1, "batch_size": 16},
}


class ApiOnly(Stack):
    """The stack without its worker: jobs are stored and enqueued, never trained."""

    def start_worker(self) -> None:
        return None


@dataclass(frozen=True)
class Phase:
    name: str
    sent: int
    ok: int
    seconds: float
    latencies_ms: list[float]

    def quantile(self, q: float) -> float | None:
        if len(self.latencies_ms) < 2:
            return None
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[round(q * 100) - 1]


async def hammer(
    name: str, count: int, concurrency: int, call: Callable[[int], Awaitable[httpx.Response]], ok: int
) -> Phase:
    """`count` requests, `concurrency` at a time, each timed from send to response; stops at the limit."""
    latencies: list[float] = []
    good = 0
    next_index = 0
    deadline = time.monotonic() + PHASE_LIMIT_S

    async def client() -> None:
        nonlocal good, next_index
        while next_index < count and time.monotonic() < deadline:
            index, next_index = next_index, next_index + 1
            start = time.perf_counter()
            response = await call(index)
            latencies.append((time.perf_counter() - start) * 1000)
            good += response.status_code == ok

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return Phase(name, len(latencies), good, time.perf_counter() - start, latencies)


async def load(url: str, submissions: int, requests: int) -> list[Phase]:
    limits = httpx.Limits(max_connections=GET_CONCURRENCY, max_keepalive_connections=GET_CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        ids: list[int] = []

        async def post(index: int) -> httpx.Response:
            response = await client.post("/v1/jobs", json={**SPEC, "name": f"load-{index}"})
            if response.status_code == 201:
                ids.append(response.json()["job"]["id"])
            return response

        posts = await hammer("POST /v1/jobs", submissions, SUBMIT_CONCURRENCY, post, 201)
        if not ids:
            return [posts]
        gets = await hammer(
            "GET /v1/jobs/{id}",
            requests,
            GET_CONCURRENCY,
            lambda i: client.get(f"/v1/jobs/{ids[i % len(ids)]}"),
            200,
        )
        return [posts, gets]


def results_table(phases: list[Phase]) -> str:
    rows = [
        [
            p.name,
            f"{p.ok}/{p.sent}",
            number(p.ok / p.seconds, 0),
            number(p.quantile(0.5), 1),
            number(p.quantile(0.99), 1),
            number(max(p.latencies_ms, default=None), 1),
        ]
        for p in phases
    ]
    return markdown(("request", "ok/sent", "ok per s", "p50 ms", "p99 ms", "max ms"), rows)


def start_py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` into collapsed stacks until SIGINT; the virtualenv's py-spy when it has one."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    # --gil: only the thread doing Python work, not the pool threads waiting for some.
    argv = [py_spy, "record", "--gil", "--pid", str(pid), "--format", "raw", "-o", str(output)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached before the load starts
    return spy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="sample the API with py-spy meanwhile")
    parser.add_argument("--smoke", action="store_true", help="50 submissions, 200 lookups; prints only")
    args = parser.parse_args()
    submissions, requests = (50, 200) if args.smoke else (args.submissions, args.requests)
    with tempfile.TemporaryDirectory(prefix="trainyard-load-") as tmp:
        workdir = Path(tmp)
        # Quotas count unfinished jobs per user; every submission here stays queued.
        stack = ApiOnly.embedded(
            workdir,
            TRAINYARD_QUOTA_MAX_JOBS=str(10 * submissions),
        )
        raw = workdir / "api.stacks"
        spy = start_py_spy(stack.procs["api"].pid, raw) if args.profile else None
        try:
            phases = asyncio.run(load(stack.url, submissions, requests))
        finally:
            if spy is not None:
                spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
                spy.wait(30)
            stack.stop()
        profile = summarize(raw.read_text()) if raw.exists() else ""
    note = (
        f"Real uvicorn + SQLite (WAL) + embedded broker, no worker; httpx.AsyncClient on the same machine; "
        f"POST at {SUBMIT_CONCURRENCY} in flight, GET at {GET_CONCURRENCY}. Targets: GET p99 <= 25 ms, "
        ">= 200 accepted POST/s."
    )
    body = f"{note}\n\n{results_table(phases)}" + (f"\n\n{profile}" if profile else "")
    record(section("2-core dev machine (shared with other work)", None, body), args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
