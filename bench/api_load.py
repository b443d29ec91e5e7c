"""API load (issue 4, target 7): job lookups and submissions per second against the real service.

    python -m bench.api_load [--submissions 1000] [--requests 5000] [--queued 0,1000,...] [--api-workers 1]
                             [--client-cpus 0] [--profile] [--smoke]

Starts the API as `make run` does (alembic, SQLite in WAL mode, the embedded SQLAlchemy broker, a real
uvicorn on loopback at log level warning) without a worker, so submissions are real POSTs that validate,
plan, store the job and ring the broker's doorbell, but nothing trains. Then, with bench.lean_http, one client
(one keep-alive connection, opened by an untimed GET /healthz) per request in flight:

1. POST /v1/jobs `submissions` times from SUBMIT_CONCURRENCY clients: accepted (201) per second.
2. GET /v1/jobs/{id} over the stored jobs `requests` times from GET_CONCURRENCY clients: p50/p99 latency.
3. The same over RUNNING_JOBS of them made running, as a worker reports them (status, start, progress and
   metrics written to the database): the jobs clients poll most, and whose bodies carry an ETA that moves
   with the clock.
4. The same jobs as the dashboard polls them: each client asks again POLL_S after its answer, POLL_ROUNDS
   times; the load a page per running job puts on the API, where phases 2 and 3 are its ceiling.
5. GET /v1/jobs?limit=LIST_LIMIT, the dashboard's jobs page (a full page once that many are stored), and
   6. GET /v1/queue, its queue page, `requests` / LIST_SHARE times each from GET_CONCURRENCY clients.
7. The same GETs as phase 2 against `noop_app`, a server that answers at once: the floor this client sets.

Every answer is checked (a 201 whose body holds the new job's id; a 200 whose body is the asked-for job), and
what failed is counted by kind below the table. Each phase stops by itself after PHASE_LIMIT_S. Client and
server share the machine, so the client's own work is in the figures; the table gives both sides' CPU time
per request, steadier than wall time on a machine shared with other work. Targets (issue 14): p99 <= 50 ms
at 64 clients, >= 200 accepted submissions/s.
`--profile` samples the API process with py-spy during both phases and prints the functions that dominate.
`--queued` puts that many jobs in the queue before the phases (copies of one submitted job's row, as if
submitted), once per depth listed, each on a fresh service: whether a request's cost grows with the queue.
`--api-workers` runs that many API processes (TRAINYARD_API_WORKERS); server CPU sums them all.
`--client-cpus` keeps the load client on those CPUs once the service has started, as clients on other machines
would be: each API process claims a CPU of its own from the highest numbered down (app/cpu_pin.py), so on a
2-core box `--client-cpus 0` leaves CPU 1 to one API process. Without it the kernel may run the client on the
API's CPU, whose CPU time per request then carries the switches and the caches the client costs it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import uvloop
from sqlalchemy import create_engine, delete, insert, select, update
from starlette.types import Receive, Scope, Send

from app.cpu_pin import move_threads
from bench.lean_http import Connection, ProtocolError, Reply, encode_request
from bench.profile_stacks import summarize
from bench.report import record, section
from bench.table import markdown, number
from core.models import Base, Job, JobEvent
from core.queue_order import JOBS
from tests.integration.servers import ROOT, Stack, free_port, local_get, stop, wait_for

SUBMIT_CONCURRENCY, GET_CONCURRENCY = 32, 64
PHASE_LIMIT_S = 60.0
# Past the phase's limit, requests still unanswered after this long are abandoned and counted as failed.
STUCK_S = 30.0
FLOOR = "GET, no-op server (floor)"
# About as many as a box trains at once (a job per GPU or CPU slot), with room to spare.
RUNNING_JOBS = 64
# The dashboard's jobs page asks for this many (app/web/views.js); its pages cost more than one job's, so
# they are asked for a LIST_SHARE of the single-job requests.
LIST_LIMIT, LIST_SHARE = 100, 10
# app/web/api.js's POLL_MS: how often an open job page asks for its job again.
POLL_S, POLL_ROUNDS = 2.0, 10
NOOP_JOB_ID = 1
# About a JobPublic of SPEC as JSON, and JSON with an id, so the client checks it as it checks a real job.
NOOP_BODY = json.dumps({"id": NOOP_JOB_ID, "padding": "x" * 2080}).encode()
NOOP_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(NOOP_BODY)).encode())]
# A CPU job the API accepts at once: no GPU to check, nothing on disk.
SPEC = {
    "name": "load",
    "model": {"arch": "mlp"},
    "data": {"dataset": "synthetic", "image_size": 8, "num_samples": 64},
    "train": {"max_steps": 1, "batch_size": 16},
}
JSON = "application/json"
# As `make run` starts it: no access log line per request.
MAKE_RUN_API_ENV = {"TRAINYARD_LOG_LEVEL": "warning"}
ALL_CPUS = frozenset(os.sched_getaffinity(0))
T = TypeVar("T")


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
    client_cpu_s: float | None = None  # the same of this process, the load client
    failures: dict[str, int] = field(default_factory=dict)  # what went wrong, and how often

    def quantile(self, q: float) -> float | None:
        if len(self.latencies_ms) < 2:
            return None
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[round(q * 100) - 1]


# What a request must get back: None when the reply is right, else what was wrong with it.
Check = Callable[[int, Reply], str | None]


def cpu_seconds(process: psutil.Process) -> float:
    """A process's CPU time so far, with its children's (the API's worker processes): on a shared machine,
    what requests cost it however slow the wall clock runs."""
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = each.cpu_times()
            total += times.user + times.system
    return total


def job_id_in(reply: Reply, status: int, *path: str) -> int | str:
    """The job id at `path` in a reply's JSON body, or what is wrong with the reply."""
    if reply.status != status:
        return f"HTTP {reply.status}"
    try:
        document = json.loads(reply.body)
        for key in path:
            document = document[key]
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status} without a job id at {'.'.join(path)}"
    return document if isinstance(document, int) else f"HTTP {status} with a non-integer job id"


def check_job(ids: list[int]) -> Check:
    """GET /v1/jobs/{ids[index % len(ids)]} must answer 200 with that job."""

    def check(index: int, reply: Reply) -> str | None:
        found = job_id_in(reply, 200, "id")
        if isinstance(found, str):
            return found
        return None if found == ids[index % len(ids)] else "HTTP 200 with another job than the one asked for"

    return check


async def hammer(
    name: str,
    requests: list[bytes],
    connections: list[Connection],
    check: Check,
    server: psutil.Process,
    think_s: float = 0.0,
) -> Phase:
    """`requests` (encoded) shared out over `connections`, one in flight each, each timed from send to
    response and checked; each client waits `think_s` after an answer before its next request; stops at the
    limit. A connection that fails is counted and opened anew."""
    latencies: list[float] = []
    failures: Counter[str] = Counter()
    good = next_index = 0
    deadline = time.monotonic() + PHASE_LIMIT_S
    url = f"http://{connections[0].host}"

    async def client_loop(slot: int) -> None:
        nonlocal good, next_index
        # Pages opened at different moments: spread over one think time, not all asking at once.
        await asyncio.sleep(think_s * slot / len(connections))
        while next_index < len(requests) and time.monotonic() < deadline:
            index, next_index = next_index, next_index + 1
            start = time.perf_counter()
            try:
                reply = await connections[slot].send(requests[index])
            except (OSError, ProtocolError) as exc:
                failures[type(exc).__name__] += 1
                await connections[slot].close()
                connections[slot] = await Connection.open(url)
                continue
            latencies.append((time.perf_counter() - start) * 1000)
            wrong = check(index, reply)
            if wrong is None:
                good += 1
            else:
                failures[wrong] += 1
            if think_s:
                await asyncio.sleep(think_s)

    # A full collection of the client's heap pauses every request in flight at once (~100-200 ms here): the
    # client's hiccup, not the server's latency, so the client collects before a phase and not during it.
    gc.collect()
    gc.disable()
    start, cpu, client_cpu = time.perf_counter(), cpu_seconds(server), time.process_time()
    try:
        async with asyncio.timeout(PHASE_LIMIT_S + STUCK_S):
            await asyncio.gather(*(client_loop(slot) for slot in range(len(connections))))
    except TimeoutError:
        failures[f"no answer within {PHASE_LIMIT_S + STUCK_S:.0f} s"] += next_index - sum(failures.values())
    finally:
        seconds = time.perf_counter() - start
        client_cpu = time.process_time() - client_cpu
        gc.enable()
    server_cpu = cpu_seconds(server) - cpu
    return Phase(name, next_index, good, seconds, latencies, server_cpu, client_cpu, dict(failures))


@asynccontextmanager
async def clients(url: str, count: int, warm_path: str) -> AsyncIterator[list[Connection]]:
    """`count` keep-alive connections, as that many separate programs would hold, each opened by an
    untimed GET of `warm_path`."""
    connected = [await Connection.open(url) for _ in range(count)]
    try:
        warm = await asyncio.gather(*(connection.request("GET", warm_path) for connection in connected))
        if any(reply.status != 200 for reply in warm):
            raise RuntimeError(f"GET {warm_path} did not answer 200: {sorted({r.status for r in warm})}")
        yield connected
    finally:
        await asyncio.gather(*(connection.close() for connection in connected))


def submission(host: str, index: int) -> bytes:
    body = json.dumps({**SPEC, "name": f"load-{index}"}).encode()
    return encode_request("POST", "/v1/jobs", host, body, JSON)


def mark_running(database_url: str, ids: list[int]) -> None:
    """What a worker's reports leave in a running job's row, halfway through its steps."""
    engine = create_engine(database_url)
    started = datetime.now(UTC) - timedelta(minutes=5)
    values = {"progress_step": 500, "progress_total": 1000, "latest_metrics": {"loss": 0.52, "lr": 0.1}}
    with engine.begin() as connection:
        connection.execute(
            update(Job).where(Job.id.in_(ids)).values(status="running", running_at=started, **values)
        )
    engine.dispose()


def fill_queue(url: str, database_url: str, queued: int) -> None:
    """`queued` jobs waiting: one submitted, the rest copies of its row (every trigger on the table fires).
    The submission also warms the server's path for the POST phase at every depth (its first request
    compiles statements and builds validators once); with none to queue, its row is deleted."""
    httpx.post(f"{url}/v1/jobs", json=SPEC, timeout=60).raise_for_status()
    engine = create_engine(database_url)
    with engine.begin() as connection:
        if queued <= 0:
            connection.execute(delete(Base.metadata.tables[JobEvent.__tablename__]))
            connection.execute(delete(JOBS))
        else:
            row = connection.execute(select(JOBS).limit(1)).mappings().one()
            connection.execute(insert(JOBS), [{**row, "id": None}] * (queued - 1))
    engine.dispose()


def check_page(least: int) -> Check:
    """A list's page must answer 200 with a `data` list of at least `least` entries."""

    def check(_index: int, reply: Reply) -> str | None:
        if reply.status != 200:
            return f"HTTP {reply.status}"
        try:
            data = json.loads(reply.body)["data"]
        except (ValueError, KeyError, TypeError):
            return "HTTP 200 without a data list"
        return (
            None if isinstance(data, list) and len(data) >= least else f"HTTP 200 with under {least} entries"
        )

    return check


async def pages(url: str, server: psutil.Process, path: str, least: int, requests: int) -> Phase:
    async with clients(url, GET_CONCURRENCY, "/healthz") as readers:
        gets = [encode_request("GET", path, readers[0].host)] * requests
        return await hammer(f"GET {path}", gets, readers, check_page(least), server)


async def lookups(
    url: str, server: psutil.Process, name: str, ids: list[int], requests: int, think_s: float = 0.0
) -> Phase:
    async with clients(url, GET_CONCURRENCY, "/healthz") as readers:
        host = readers[0].host
        gets = [encode_request("GET", f"/v1/jobs/{ids[i % len(ids)]}", host) for i in range(requests)]
        return await hammer(name, gets, readers, check_job(ids), server, think_s)


async def load(
    url: str, database_url: str, server: psutil.Process, submissions: int, requests: int
) -> list[Phase]:
    ids: list[int] = []

    def accepted(_index: int, reply: Reply) -> str | None:
        found = job_id_in(reply, 201, "job", "id")
        if isinstance(found, str):
            return found
        ids.append(found)
        return None

    async with clients(url, SUBMIT_CONCURRENCY, "/healthz") as submitters:
        posts = [submission(submitters[0].host, index) for index in range(submissions)]
        post_phase = await hammer("POST /v1/jobs", posts, submitters, accepted, server)
    if not ids:
        return [post_phase]
    waiting = await lookups(url, server, "GET /v1/jobs/{id}, queued jobs", ids, requests)
    running = ids[:RUNNING_JOBS]
    mark_running(database_url, running)
    polled = await lookups(url, server, "GET /v1/jobs/{id}, running jobs", running, requests)
    polls = POLL_ROUNDS * GET_CONCURRENCY
    name = f"GET /v1/jobs/{{id}}, running jobs, each polled every {POLL_S:g} s"
    dashboards = await lookups(url, server, name, running, polls, think_s=POLL_S)
    listed = await pages(
        url, server, f"/v1/jobs?limit={LIST_LIMIT}", min(LIST_LIMIT, len(ids)), requests // LIST_SHARE
    )
    still_queued = min(1, len(ids) - len(running))  # with a queue before the phases, more
    queue = await pages(url, server, "/v1/queue", still_queued, requests // LIST_SHARE)
    return [post_phase, waiting, polled, dashboards, listed, queue]


async def floor(url: str, server: psutil.Process, requests: int) -> Phase:
    """The GET phase against a server that does nothing (noop_app): what the client and uvicorn alone cost
    on this machine, the least any API could score here."""
    return await lookups(url, server, FLOOR, [NOOP_JOB_ID], requests)


async def noop_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers every request at once with a body the size of a job's."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": NOOP_HEADERS})
    await send({"type": "http.response.body", "body": NOOP_BODY})


def on_uvloop(load: Coroutine[Any, Any, T]) -> T:
    """Runs the client on uvloop, the loop uvicorn serves on: it costs the client less CPU per request."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(load)


def start_noop_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.api_load:noop_app", "--port", str(port), "--log-level"]
    server = subprocess.Popen([*argv, "warning"], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: local_get(url).status_code == 200, 60, "no-op server")
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
            number(p.client_cpu_s * 1000 / p.sent if p.sent and p.client_cpu_s is not None else None, 2),
        ]
        for p in phases
    ]
    header = (
        "request",
        "ok/sent",
        "ok per s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "server CPU ms/req",
        "client CPU ms/req",
    )
    table = markdown(header, rows)
    failed = [
        f"{p.name}: " + ", ".join(f"{n} x {what}" for what, n in p.failures.items())
        for p in phases
        if p.failures
    ]
    return "\n\n".join([table, *(f"Failed: {line}" for line in failed)])


def start_py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` into collapsed stacks until SIGINT; the virtualenv's py-spy when it has one."""
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    # --gil: only the thread doing Python work, not the pool threads waiting for some.
    argv = [py_spy, "record", "--gil", "--pid", str(pid), "--format", "raw", "-o", str(output)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached before the load starts
    return spy


def measure_floor(requests: int, client_cpus: set[int] | None) -> Phase:
    server, url = start_noop_server()
    try:
        if client_cpus:
            move_threads(client_cpus)
        return on_uvloop(floor(url, psutil.Process(server.pid), requests))
    finally:
        move_threads(ALL_CPUS)
        stop(server)


SERVER_LOG_TAIL_BYTES = 20_000


def tail_text(path: Path, size: int) -> str:
    with path.open("rb") as file:
        file.seek(max(path.stat().st_size - size, 0))
        return file.read().decode(errors="replace")


def run_at_depth(
    args: argparse.Namespace, submissions: int, requests: int, queued: int
) -> tuple[list[Phase], str]:
    """The phases on a fresh service whose queue holds `queued` jobs first, and the profile if asked."""
    with tempfile.TemporaryDirectory(prefix="trainyard-load-") as tmp:
        workdir = Path(tmp)
        # Quotas count unfinished jobs per user; every submission here stays queued.
        quota = str(min(2 * (submissions + queued), 100_000))
        env = {**MAKE_RUN_API_ENV, "TRAINYARD_API_WORKERS": str(args.api_workers)}
        stack = ApiOnly.embedded(workdir, env, TRAINYARD_QUOTA_MAX_JOBS=quota)
        raw = workdir / "api.stacks"
        spy = start_py_spy(stack.procs["api"].pid, raw) if args.profile else None
        try:
            api = psutil.Process(stack.procs["api"].pid)
            database_url = stack.env["TRAINYARD_DATABASE_URL"]
            fill_queue(stack.url, database_url, queued)
            if args.client_cpus:  # after the service started: its processes claimed their CPUs from all
                move_threads(args.client_cpus)
            phases = on_uvloop(load(stack.url, database_url, api, submissions, requests))
            if any(phase.failures for phase in phases):  # what the server said of them, before it is deleted
                print(tail_text(workdir / "api.log", SERVER_LOG_TAIL_BYTES), file=sys.stderr)
        finally:
            move_threads(ALL_CPUS)
            if spy is not None:
                spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
                spy.wait(30)
            stack.stop()
        return phases, summarize(raw.read_text()) if raw.exists() else ""


def cpu_list(text: str) -> set[int]:
    """`--client-cpus`: CPUs this process may run on, named by number."""
    try:
        cpus = {int(cpu) for cpu in text.split(",")}
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma list of CPU numbers, e.g. 0 or 0,1"
        ) from None
    if not cpus <= ALL_CPUS:
        raise argparse.ArgumentTypeError(f"this process may only run on CPUs {sorted(ALL_CPUS)}")
    return cpus


def host_label(load_average: float) -> str:
    """The machine as RESULTS.md's heading names it: its own core count, and how busy other work kept it
    (client and server share it, so a loaded machine's figures are not an idle one's)."""
    physical = psutil.cpu_count(logical=False)
    return f"{os.cpu_count()}-core host ({physical} physical), load average {load_average:.1f} at the start"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="sample the API with py-spy meanwhile")
    parser.add_argument("--smoke", action="store_true", help="50 submissions, 200 lookups; prints only")
    parser.add_argument(
        "--queued", default="0", help="jobs queued before the phases; a comma list runs each depth in turn"
    )
    parser.add_argument("--api-workers", type=int, default=1, help="API processes (TRAINYARD_API_WORKERS)")
    parser.add_argument(
        "--client-cpus",
        type=cpu_list,
        default=None,
        help="keep the load client on these CPUs (a comma list) while it loads the service",
    )
    args = parser.parse_args()
    submissions, requests = (50, 200) if args.smoke else (args.submissions, args.requests)
    load_at_start = os.getloadavg()[0]
    phases: list[Phase] = []
    profiles: list[str] = []
    for queued in (int(depth) for depth in args.queued.split(",")):
        at_depth, profile = run_at_depth(args, submissions, requests, queued)
        label = f" ({queued:,} queued before)" if args.queued != "0" else ""
        phases += [replace(phase, name=phase.name + label) for phase in at_depth]
        profiles += [profile] if profile else []
    phases.append(measure_floor(requests, args.client_cpus))
    note = (
        "Real uvicorn (log level warning, as `make run`) + SQLite (WAL) + embedded broker, no worker; "
        "bench.lean_http (asyncio streams on uvloop) on the same machine, one keep-alive connection per "
        f"client: POST from {SUBMIT_CONCURRENCY} clients, GET from {GET_CONCURRENCY}; every answer checked "
        "(status, and the job's id in the body). The floor row is the same GETs against a server that "
        "answers at once. CPU ms/req: each process's user + system time over the requests sent. "
        f"API processes: {args.api_workers}. "
        + (f"The client kept to CPUs {sorted(args.client_cpus)}. " if args.client_cpus else "")
        + "Targets: GET p99 <= 50 ms, >= 200 accepted POST/s."
    )
    body = "\n\n".join([note, results_table(phases), *profiles])
    record(section(host_label(load_at_start), None, body), args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
