"""API load (issue 4, target 7): job lookups and submissions per second against the real service.

    python -m bench.api_load [--submissions 1000] [--requests 5000] [--profile] [--smoke]

Starts the API as `make run` does (alembic, SQLite in WAL mode, the embedded SQLAlchemy broker, a real
uvicorn on loopback) without a worker, so submissions are real POSTs that validate, plan, store the job and
ring the broker's doorbell, but nothing trains. Then, with httpx.AsyncClient, one client (one keep-alive
connection, opened by an untimed GET /healthz) per request in flight:

1. POST /v1/jobs `submissions` times from SUBMIT_CONCURRENCY clients: accepted (201) per second.
2. GET /v1/jobs/{id} over the stored jobs `requests` times from GET_CONCURRENCY clients: p50/p99 latency.
3. The same GETs against `noop_app`, a server that answers at once: the floor this client sets here.

Each phase stops by itself after PHASE_LIMIT_S. Client and server share the machine, so the client's own
work is in the figures; the server's CPU time per request is not, and on a machine shared with other work
it is the steadier figure. Targets: p99 <= 25 ms at 64 clients, >= 200 accepted submissions/s.
`--profile` samples the API process with py-spy during both phases and prints the functions that dominate.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from starlette.types import Receive, Scope, Send

from bench.profile_stacks import summarize
from bench.report import record, section
from bench.table import markdown, number
from tests.integration.servers import ROOT, Stack, free_port, stop, wait_for

SUBMIT_CONCURRENCY, GET_CONCURRENCY = 32, 64
PHASE_LIMIT_S = 60.0
FLOOR = "GET, no-op server (floor)"
NOOP_BODY = b"x" * 2100  # about a JobPublic of SPEC as JSON
NOOP_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(NOOP_BODY)).encode())]
# A CPU job the API accepts at once: no GPU to check, nothing on disk.
SPEC = {
    "name": "load",
    "model": {"arch": "mlp"},
    "data": {"dataset": "synthetic", "image_size": 8, "num_samples": 64},
    "train": {"max_steps": 1, "batch_size": 16},
}


class ApiOnly(Stack):
    """The stack without its worker: jobs are stored and enqueued, never trained."""

    def start_worker(self, name: str = "worker", **env: str) -> None:
        return None


@dataclass(frozen=True)
class Phase:
    name: str
    sent: int
    ok: int
    seconds: float
    latencies_ms: list[float]
    server_cpu_s: float  # user + system time of the server process during the phase

    def quantile(self, q: float) -> float | None:
        if len(self.latencies_ms) < 2:
            return None
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[round(q * 100) - 1]


Call = Callable[[httpx.AsyncClient, int], Awaitable[httpx.Response]]


def cpu_seconds(server: psutil.Process) -> float:
    """The server's CPU time so far: on a shared machine, what requests cost it however slow the wall clock
    runs."""
    times = server.cpu_times()
    return times.user + times.system


async def hammer(
    name: str, count: int, clients: list[httpx.AsyncClient], call: Call, ok: int, server: psutil.Process
) -> Phase:
    """`count` requests shared out over `clients`, one in flight each, each timed from send to response;
    stops at the limit."""
    latencies: list[float] = []
    good = 0
    next_index = 0
    deadline = time.monotonic() + PHASE_LIMIT_S

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal good, next_index
        while next_index < count and time.monotonic() < deadline:
            index, next_index = next_index, next_index + 1
            start = time.perf_counter()
            response = await call(client, index)
            latencies.append((time.perf_counter() - start) * 1000)
            good += response.status_code == ok

    # A full collection of the client's heap pauses every request in flight at once (~100-200 ms here): the
    # client's hiccup, not the server's latency, so the client collects before a phase and not during it.
    gc.collect()
    gc.disable()
    start, cpu = time.perf_counter(), cpu_seconds(server)
    try:
        await asyncio.gather(*(client_loop(client) for client in clients))
    finally:
        seconds = time.perf_counter() - start
        gc.enable()
    return Phase(name, len(latencies), good, seconds, latencies, cpu_seconds(server) - cpu)


@asynccontextmanager
async def clients(url: str, count: int, warm_path: str) -> AsyncIterator[list[httpx.AsyncClient]]:
    """`count` clients with one keep-alive connection each, as that many separate programs would be, each
    connected by an untimed GET of `warm_path`. One AsyncClient with a pool of `count` connections is not
    that: its pool's bookkeeping grows with the connections in use, and at 64 it alone held a server that
    answers at once to ~200 requests/s."""
    async with AsyncExitStack() as stack:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        connected = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=30, limits=limits))
            for _ in range(count)
        ]
        await asyncio.gather(*(client.get(warm_path) for client in connected))
        yield connected


async def load(url: str, server: psutil.Process, submissions: int, requests: int) -> list[Phase]:
    ids: list[int] = []

    async def post(client: httpx.AsyncClient, index: int) -> httpx.Response:
        response = await client.post("/v1/jobs", json={**SPEC, "name": f"load-{index}"})
        if response.status_code == 201:
            ids.append(response.json()["job"]["id"])
        return response

    async def get(client: httpx.AsyncClient, index: int) -> httpx.Response:
        return await client.get(f"/v1/jobs/{ids[index % len(ids)]}")

    async with clients(url, SUBMIT_CONCURRENCY, "/healthz") as submitters:
        posts = await hammer("POST /v1/jobs", submissions, submitters, post, 201, server)
    if not ids:
        return [posts]
    async with clients(url, GET_CONCURRENCY, "/healthz") as readers:
        gets = await hammer("GET /v1/jobs/{id}", requests, readers, get, 200, server)
    return [posts, gets]


async def floor(url: str, server: psutil.Process, requests: int) -> Phase:
    """The GET phase against a server that does nothing (noop_app): what the client and uvicorn alone cost
    on this machine, the least any API could score here."""
    async with clients(url, GET_CONCURRENCY, "/") as readers:
        return await hammer(FLOOR, requests, readers, lambda client, _: client.get("/"), 200, server)


async def noop_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers every request at once with a body the size of a job's."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": NOOP_HEADERS})
    await send({"type": "http.response.body", "body": NOOP_BODY})


def start_noop_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.api_load:noop_app", "--port", str(port), "--log-level"]
    server = subprocess.Popen([*argv, "warning"], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(url).status_code == 200, 60, "no-op server")
    return server, url


def results_table(phases: list[Phase]) -> str:
    rows = [
        [
            p.name,
            f"{p.ok}/{p.sent}",
            number(p.ok / p.seconds, 0),
            number(p.quantile(0.5), 1),
            number(p.quantile(0.99), 1),
            number(max(p.latencies_ms, default=None), 1),
            number(p.server_cpu_s * 1000 / p.sent if p.sent else None, 2),
        ]
        for p in phases
    ]
    header = ("request", "ok/sent", "ok per s", "p50 ms", "p99 ms", "max ms", "server CPU ms/request")
    return markdown(header, rows)


def start_py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` into collapsed stacks until SIGINT; the virtualenv's py-spy when it has one."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    # --gil: only the thread doing Python work, not the pool threads waiting for some.
    argv = [py_spy, "record", "--gil", "--pid", str(pid), "--format", "raw", "-o", str(output)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached before the load starts
    return spy


def measure_floor(requests: int) -> Phase:
    server, url = start_noop_server()
    try:
        return asyncio.run(floor(url, psutil.Process(server.pid), requests))
    finally:
        stop(server)


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
            api = psutil.Process(stack.procs["api"].pid)
            phases = asyncio.run(load(stack.url, api, submissions, requests))
        finally:
            if spy is not None:
                spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
                spy.wait(30)
            stack.stop()
        profile = summarize(raw.read_text()) if raw.exists() else ""
    phases.append(measure_floor(requests))
    note = (
        f"Real uvicorn + SQLite (WAL) + embedded broker, no worker; httpx.AsyncClient on the same machine, "
        f"one connection per client: POST from {SUBMIT_CONCURRENCY} clients, GET from {GET_CONCURRENCY}; "
        "the floor row is the same GETs against a server that answers at once. Targets: GET p99 <= 25 ms, "
        ">= 200 accepted POST/s."
    )
    body = f"{note}\n\n{results_table(phases)}" + (f"\n\n{profile}" if profile else "")
    record(section("2-core dev machine (shared with other work)", None, body), args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
