"""Trainyard on a real Slurm cluster (deploy/slurm_cluster.py: munged, slurmctld, two slurmd nodes in
network namespaces of their own): jobs submitted through the API run as Slurm jobs, one torchrun per node,
and end as they do locally — done, cancelled (by Trainyard or by an scancel from outside), out of time,
requeued after a node failure, sandboxed."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.slurm_cluster import SlurmCluster
from tests.integration.jobs import PACED, example_spec, job_processes, metric_values, submit, wait_status
from tests.integration.servers import Stack, wait_for
from tests.integration.test_faults_restart import LOSS_RTOL, wait_step
from tests.integration.test_program_e2e import push
from tests.integration.test_user_code_lifecycle import factories
from tests.integration.trainer_helpers import train
from tests.unit.core.test_webhook_outbox import SECRET, Receiver
from worker.executors.slurm.outcomes import SLURM_CANCELLED

pytestmark = pytest.mark.own_services

TWO_NODES = example_spec("digits_ddp_cpu.json", parallel={"nproc_per_node": 1, "nnodes": 2})
# Long enough to be caught running: checkpoints every 20 steps, a few hundred steps in all.
LONG = example_spec(
    "digits_ddp_cpu.json",
    model={"kwargs": {"hidden": 512, "depth": 3}},
    train={"epochs": 40},
    parallel={"nproc_per_node": 1, "nnodes": 2},
    checkpoint={"every_n_epochs": 0, "every_n_steps": 20, "keep_last": 2},
)

# More nodes than the cluster has: Slurm holds it pending for good.
THREE_NODES = {
    **TWO_NODES,
    "parallel": {"nproc_per_node": 1, "nnodes": 3, "strategy": "ddp"},
    "train": {**TWO_NODES["train"], "batch_size": 63},
}


def paced_on_two_nodes(code: str, max_steps: int, **sections: dict[str, Any]) -> dict[str, Any]:
    """A user's bundle whose steps sleep 50 ms (tests/integration/bundles/paced), on two nodes: for a test
    that needs a job running for a while, not its training, the nodes' cores stay free for the suite's
    other parts."""
    parallel = {"strategy": "ddp", "nproc_per_node": 1, "nnodes": 2}
    return {**factories(code, 0.05, max_steps), "parallel": parallel, **sections}


@pytest.fixture(scope="module")
def slurm_stack(
    slurm_cluster: SlurmCluster,
    tmp_path_factory: pytest.TempPathFactory,
    stopping: list[subprocess.Popen[bytes]],
) -> Iterator[Stack]:
    """API and a worker in Slurm mode on the embedded database; the runs directory is the cluster's shared
    filesystem (one machine)."""
    stack = Stack.embedded(
        tmp_path_factory.mktemp("slurm-stack"),
        api_env={"TRAINYARD_EXECUTOR": "slurm"},
        TRAINYARD_EXECUTOR="slurm",
        TRAINYARD_SLURM_POLL_S="0.5",
        **slurm_cluster.env,
    )
    yield stack
    stopping += stack.terminate()


@pytest.fixture(scope="module")
def paced(slurm_stack: Stack) -> str:
    return push(slurm_stack, PACED)


def runs_dir(stack: Stack) -> Path:
    return Path(stack.env["TRAINYARD_RUNS_DIR"])


def slurm_state(cluster: SlurmCluster, slurm_id: int) -> str:
    shown = cluster.run(["scontrol", "--oneliner", "show", "job", str(slurm_id)])
    return shown.split("JobState=", 1)[1].split()[0]


def slurm_job_id(client: httpx.Client, job_id: int) -> int | None:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return job["slurm_job_id"]


def test_a_two_node_job_trains_as_two_local_ranks_do(slurm_stack: Stack, tmp_path: Path) -> None:
    with slurm_stack.client() as client:
        dry = client.post("/v1/jobs", json=TWO_NODES, params={"dry_run": "true"}).json()
        job = submit(client, TWO_NODES)
        assert "#SBATCH --nodes=2" in job["plan"]["batch_script"], job["plan"]
        done = wait_status(client, job["id"], {"succeeded"}, timeout=240)
        curve = metric_values(client, job["id"], "train_loss")
    assert "#SBATCH --nodes=2" in dry["plan"]["batch_script"], dry
    assert done["slurm_job_id"] is not None and done["attempt"] == 1, done
    local = train(tmp_path / "local", {**TWO_NODES, "parallel": {"strategy": "ddp", "nproc_per_node": 2}}, 2)
    expected = local.metric("train_loss")
    assert [step for step, _ in curve] == [step for step, _ in expected]
    for (step, value), (_, want) in zip(curve, expected, strict=True):
        assert value == pytest.approx(want, rel=LOSS_RTOL), step


def test_cancel_stops_every_process_on_both_nodes(slurm_stack: Stack, slurm_cluster: SlurmCluster) -> None:
    with slurm_stack.client() as client:
        job = submit(client, LONG)
        wait_step(slurm_stack, job["id"], 10)
        client.post(f"/v1/jobs/{job['id']}/cancel")
        done = wait_status(client, job["id"], {"cancelled"}, timeout=120)
    # Its ranks stopped on the SIGTERM (their final checkpoint), so Slurm records how they exited.
    assert slurm_state(slurm_cluster, done["slurm_job_id"]) in ("FAILED", "CANCELLED")
    assert not job_processes(runs_dir(slurm_stack), job["id"])


def test_max_runtime_ends_timed_out_after_a_final_checkpoint(slurm_stack: Stack, paced: str) -> None:
    # The limit counts training once it runs, and start-up until then: 20 s leaves a 2-node start on a busy
    # CI box room to reach its first step, so there is training to checkpoint.
    spec = paced_on_two_nodes(
        paced,
        100_000,  # stopped at the limit, long before its end
        checkpoint={"every_n_steps": 0, "every_n_epochs": 0, "keep_last": 2},
        limits={"max_runtime_s": 20},
    )
    with slurm_stack.client() as client:
        job = wait_status(client, submit(client, spec)["id"], {"timed_out"}, timeout=180)
        checkpoints = client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["data"]
    assert job["status_reason"] == "max_runtime", job
    # None was due by the spec: the one there was written on the SIGTERM.
    assert len(checkpoints) == 1 and checkpoints[0]["step"] > 0, checkpoints
    assert not job_processes(runs_dir(slurm_stack), job["id"])


def test_a_failed_node_requeues_the_job_which_resumes_from_its_checkpoint(
    slurm_stack: Stack, slurm_cluster: SlurmCluster, paced: str
) -> None:
    # 300 steps of 50 ms: the node goes down long before the first attempt could end.
    every_20 = {"every_n_steps": 20, "every_n_epochs": 0, "keep_last": 2}
    spec = paced_on_two_nodes(paced, 300, checkpoint=every_20)
    with slurm_stack.client() as client:
        job = submit(client, spec)
        wait_step(slurm_stack, job["id"], 45)  # two checkpoints stored
        slurm_cluster.node_down(slurm_cluster.node_names[1])
        requeued = wait_status(client, job["id"], {"queued"}, timeout=120)
        slurm_cluster.node_up(slurm_cluster.node_names[1])
        done = wait_status(client, job["id"], {"succeeded"}, timeout=300)
        events = client.get(f"/v1/jobs/{job['id']}/events").json()["data"]
        steps = [step for step, _ in metric_values(client, job["id"], "loss")]
    assert requeued["status_reason"] == "slurm_requeued", requeued
    # Slurm may requeue it again while the node comes back (a busy machine): each later attempt resumes too.
    assert done["attempt"] >= 2 and [e["to_status"] for e in events].count("queued") == done["attempt"], (
        events
    )
    assert steps == sorted(set(steps)) and steps[-1] == 300, f"a step twice, or not the last: {steps}"
    # What the worker handed the nodes for each of Slurm's restarts: the checkpoint to resume from.
    folder = runs_dir(slurm_stack) / ".slurm" / str(job["id"])
    for restart in range(1, done["attempt"]):
        handed = json.loads((folder / f"attempt-{restart}.json").read_text())
        assert handed["config"]["attempt"] == restart + 1 and handed["config"]["plan"]["resume_path"], handed


def test_a_bundle_job_runs_sandboxed_on_a_node(slurm_stack: Stack, paced: str) -> None:
    spec: dict[str, Any] = {**factories(paced, 0.0), "parallel": {"strategy": "ddp", "nproc_per_node": 1}}
    with slurm_stack.client() as client:
        job = wait_status(client, submit(client, spec)["id"], {"succeeded"}, timeout=240)
    launcher = (runs_dir(slurm_stack) / str(job["id"]) / "logs" / "launcher.log").read_text()
    header = next(line for line in launcher.splitlines() if line.startswith("=== attempt 1 node 0: "))
    argv = header.split(": ", 1)[1].split()
    assert "bwrap" in argv and "--unshare-pid" in argv and any(a.startswith("--reuid=") for a in argv), header


def test_more_nodes_than_the_cluster_has_waits_with_slurm_reason_and_priority(
    slurm_stack: Stack, slurm_cluster: SlurmCluster
) -> None:
    with slurm_stack.client() as client:
        job = submit(client, THREE_NODES)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            queue = client.get("/v1/queue").json()["data"]
            entry = next((e for e in queue if e["job_id"] == job["id"]), None)
            if (
                entry is not None
                and entry["status_reason"] == "slurm_pending"
                and "is pending: " in entry["reason"]
            ):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no Slurm reason in the queue: {queue}")
        # A priority changed while it waits reaches Slurm as its nice (priority 40 -> nice 60).
        assert client.patch(f"/v1/jobs/{job['id']}", json={"priority": 40}).status_code == 200
        slurm_id = client.get(f"/v1/jobs/{job['id']}").json()["slurm_job_id"]
        wait_for(
            lambda: " Nice=60 " in slurm_cluster.run(["scontrol", "-o", "show", "job", str(slurm_id)]),
            30,
            "nice",
        )
        client.post(f"/v1/jobs/{job['id']}/cancel")
        assert wait_status(client, job["id"], {"cancelled"}, timeout=30)


def test_an_scancel_from_outside_ends_a_running_job_cancelled_saying_so(
    slurm_stack: Stack, slurm_cluster: SlurmCluster, paced: str
) -> None:
    """The cluster's user or an admin cancels the Slurm job, not Trainyard: the job ends `cancelled`, through
    `cancelling` as any cancel of a started job, its webhooks recorded and no process of it left."""
    spec: dict[str, Any] = {
        **factories(paced, 0.05, 100_000),
        "parallel": {"strategy": "ddp", "nproc_per_node": 1},
    }
    receiver = Receiver()
    try:
        with slurm_stack.client() as client:
            hook = client.post(
                "/v1/webhooks", json={"url": receiver.url, "events": ["job.cancelled"], "secret": SECRET}
            ).json()
            job = submit(client, spec)
            wait_step(slurm_stack, job["id"], 5)
            slurm_id = slurm_job_id(client, job["id"])
            assert slurm_id is not None
            slurm_cluster.run(["scancel", str(slurm_id)])
            done = wait_status(client, job["id"], {"cancelled"}, timeout=30)
            events = client.get(f"/v1/jobs/{job['id']}/events").json()["data"]
            sent = client.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["data"]
            client.delete(f"/v1/webhooks/{hook['id']}")
    finally:
        receiver.close()
    assert done["status_reason"] == SLURM_CANCELLED, done
    # The test cluster keeps no accounting, so Slurm does not say who.
    assert done["message"].startswith(f"Slurm job {slurm_id} CANCELLED outside Trainyard"), done
    assert [(e["from_status"], e["to_status"], e["reason"]) for e in events[-2:]] == [
        ("running", "cancelling", SLURM_CANCELLED),
        ("cancelling", "cancelled", SLURM_CANCELLED),
    ], events
    assert [(d["job_id"], d["event"]) for d in sent] == [(job["id"], "job.cancelled")], sent
    assert slurm_state(slurm_cluster, slurm_id) == "CANCELLED"
    wait_for(lambda: not job_processes(runs_dir(slurm_stack), job["id"]), 30, "no process of the job")


def test_an_scancel_from_outside_ends_a_job_waiting_in_slurm_cancelled(
    slurm_stack: Stack, slurm_cluster: SlurmCluster
) -> None:
    with slurm_stack.client() as client:
        job = submit(client, THREE_NODES)
        wait_for(lambda: slurm_job_id(client, job["id"]) is not None, 30, "a Slurm job id")
        slurm_id = slurm_job_id(client, job["id"])
        slurm_cluster.run(["scancel", str(slurm_id)])
        done = wait_status(client, job["id"], {"cancelled"}, timeout=30)
        events = client.get(f"/v1/jobs/{job['id']}/events").json()["data"]
    assert done["status_reason"] == SLURM_CANCELLED and done["attempt"] == 0, done
    # Nothing of it ran: no attempt began.
    assert [(e["from_status"], e["to_status"]) for e in events[1:]] == [("queued", "cancelled")], events
