"""Several hosts behind one API (issue 7), with real processes: two Celery workers with host identities of
their own against a real PostgreSQL and redis-server, each consuming its own host queue."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration.jobs import example_spec, job_processes, metric_values, submit, wait_status
from tests.integration.servers import SHORT_LEASE, Postgres, Redis, Stack, wait_for
from worker.executors.local.kill import job_processes as kill_processes
from worker.executors.local.kill import mark_for

pytestmark = pytest.mark.own_services

HOSTS = ("host-a", "host-b")
DDP = example_spec(
    "digits_ddp_cpu.json", train={"epochs": None, "max_steps": 40}, metrics={"every_n_steps": 5}
)
# Long enough to be caught between checkpoints, as in the single-host worker-fault test.
LONG = example_spec(
    "digits_ddp_cpu.json",
    train={"epochs": None, "max_steps": 1200},
    parallel={"strategy": "single", "nproc_per_node": None},
    checkpoint={"every_n_epochs": 0, "every_n_steps": 100, "keep_last": 2},
    metrics={"every_n_steps": 50},
)


@pytest.fixture(scope="module")
def two_hosts(
    tmp_path_factory: pytest.TempPathFactory, redis_server: Redis, postgres_server: Postgres
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("two-hosts")
    stack = Stack.start(
        workdir,
        postgres_server.new_database(),
        redis_server.new_url(),
        # A short lease, so a host that goes quiet is noticed within seconds.
        **SHORT_LEASE,
        TRAINYARD_HOSTNAME=HOSTS[0],
        TRAINYARD_ADVERTISE_ADDRESS="127.0.0.1",
    )
    stack.start_worker("worker-b", TRAINYARD_HOSTNAME=HOSTS[1])
    yield stack
    stack.stop()


def node_hosts(stack: Stack, job_id: int) -> int:
    return stack.sql(f"SELECT count(DISTINCT host) FROM job_nodes WHERE job_id = {job_id}")


def host_processes(stack: Stack, job_id: int, host: str) -> list[psutil.Process]:
    """The first attempt's processes on `host`, found as that host's worker would find them."""
    return kill_processes(mark_for(job_id, 1, host, Path(stack.env["TRAINYARD_RUNS_DIR"])))


def test_two_hosts_are_listed(two_hosts: Stack) -> None:
    with two_hosts.client() as client:
        hosts = client.get("/v1/gpus").json()["data"]
    assert [(host["host"], host["status"]) for host in hosts] == [(HOSTS[0], "up"), (HOSTS[1], "up")]


def test_a_two_node_job_matches_one_node_with_two_processes(two_hosts: Stack) -> None:
    """2 nodes x 1 process over c10d rendezvous, against 1 node x 2 processes: the same ranks, the same
    seed, so the same all-reduced loss curve."""
    with two_hosts.client() as client:
        spanning = submit(client, {**DDP, "parallel": {"strategy": "ddp", "nnodes": 2, "nproc_per_node": 1}})
        local = submit(client, DDP)
        for job in (spanning, local):
            wait_status(client, job["id"], {"succeeded"}, timeout=240)
        assert node_hosts(two_hosts, spanning["id"]) == 2
        two_nodes, one_node = (metric_values(client, job["id"], "loss") for job in (spanning, local))
    assert [step for step, _ in two_nodes] == [step for step, _ in one_node] != []
    for (_, a), (_, b) in zip(two_nodes, one_node, strict=True):
        assert a == pytest.approx(b, rel=1e-5)


def test_a_two_node_job_is_cancelled_on_every_host(two_hosts: Stack) -> None:
    spec = {**LONG, "parallel": {"strategy": "ddp", "nnodes": 2, "nproc_per_node": 1}}
    with two_hosts.client() as client:
        job = submit(client, spec)
        wait_status(client, job["id"], {"running"}, timeout=120)
        assert all(host_processes(two_hosts, job["id"], host) for host in HOSTS)
        client.post(f"/v1/jobs/{job['id']}/cancel")
        wait_status(client, job["id"], {"cancelled"}, timeout=60)
    runs_dir = Path(two_hosts.env["TRAINYARD_RUNS_DIR"])
    wait_for(lambda: not job_processes(runs_dir, job["id"]), 30, "every host's processes to stop")


def test_jobs_spread_and_a_dead_host_s_job_moves_to_the_other(two_hosts: Stack) -> None:
    """Two one-host jobs go to different hosts; host-b then dies (its worker and its processes, as when a
    machine goes away), and its job resumes on host-a from its latest checkpoint."""
    with two_hosts.client() as client:
        placed: dict[str, int] = {}
        for _ in HOSTS:  # one after the other: the second is placed knowing where the first went
            job = submit(client, LONG)
            placed[wait_status(client, job["id"], {"running"}, timeout=120)["host"]] = job["id"]
        assert sorted(placed) == list(HOSTS)
        moved = placed[HOSTS[1]]
        wait_for(lambda: bool(client.get(f"/v1/jobs/{moved}/checkpoints").json()["data"]), 90, "checkpoint")

        two_hosts.procs["worker-b"].kill()
        two_hosts.procs["worker-b"].wait()
        for proc in host_processes(two_hosts, moved, HOSTS[1]):
            proc.send_signal(signal.SIGKILL)

        job = wait_status(client, moved, {"succeeded"}, timeout=240)
        assert (job["host"], job["attempt"]) == (HOSTS[0], 2)
        events = client.get(f"/v1/jobs/{moved}/events").json()["data"]
        lost = [event for event in events if event["reason"] == "worker_lost"]
        # Named by its host's beat or, when the job's own beat lapsed first, by its worker's (host-b:<pid>).
        assert lost and re.search(rf"(host|worker) {HOSTS[1]}\S* stopped heartbeating", lost[0]["message"])
        resumed = metric_values(client, moved, "loss")
        assert resumed[-1][0] == 1200
        hosts = client.get("/v1/gpus").json()["data"]
        assert {host["host"]: host["status"] for host in hosts} == {HOSTS[0]: "up", HOSTS[1]: "down"}
        wait_status(client, placed[HOSTS[0]], {"succeeded"}, timeout=120)
