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

# Two epochs: the curve to compare crosses an epoch's end (the sampler's reshuffle, a checkpoint); more epochs
# only repeat that.
TWO_NODES = example_spec(
    "digits_ddp_cpu.json", train={"epochs": 2}, parallel={"nproc_per_node": 1, "nnodes": 2}
)

# More nodes than the cluster has: Slurm holds it pending for good.
THREE_NODES = {
    **TWO_NODES,
    "parallel": {"nproc_per_node": 1, "nnodes": 3, "strategy": "ddp"},
    "train": {**TWO_NODES["train"], "batch_size": 63},
}


# A paced step's sleep: a test that needs a job running for a while, not its training, costs the CPU of a few
# steps a second (a step at 50 ms: 20 a second, most of a core for the job, its worker and its API).
PACE_S = 0.2


def paced_on_two_nodes(
    code: str, max_steps: int, pace_s: float = PACE_S, **sections: dict[str, Any]
) -> dict[str, Any]:
    """A user's bundle whose steps sleep `pace_s` (tests/integration/bundles/paced), on two nodes."""
    parallel = {"strategy": "ddp", "nproc_per_node": 1, "nnodes": 2}
    return {**factories(code, pace_s, max_steps), "parallel": parallel, **sections}


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


def wait_training(stack: Stack, client: httpx.Client, job_id: int, step: int) -> None:
    """Until the job reports `step`: its start-up, the long part (minutes on a loaded box), polled at
    wait_status's pace (twice a second at most), then its first steps at wait_step's (ten times a second)."""
    wait_status(client, job_id, {"running"}, timeout=240)
    wait_step(stack, job_id, step)


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


def test_cancel_stops_every_process_on_both_nodes(
    slurm_stack: Stack, slurm_cluster: SlurmCluster, paced: str
) -> None:
    with slurm_stack.client() as client:
        job = submit(client, paced_on_two_nodes(paced, 100_000))
        wait_training(slurm_stack, client, job["id"], 10)
        client.post(f"/v1/jobs/{job['id']}/cancel")
        done = wait_status(client, job["id"], {"cancelled"}, timeout=120)
    # Its ranks stopped on the SIGTERM (their final checkpoint), so Slurm records how they exited.
    assert slurm_state(slurm_cluster, done["slurm_job_id"]) in ("FAILED", "CANCELLED")
    assert not job_processes(runs_dir(slurm_stack), job["id"])


def test_max_runtime_ends_timed_out_after_a_final_checkpoint(slurm_stack: Stack, paced: str) -> None:
    # Under Slurm the limit counts the whole start-up until the first step, then training alone: 40 s leaves a
    # 2-node start on a loaded box room to reach its first step, so there is training to checkpoint (20 and 30
    # did not, on a box of two cores under a load of 15), and the job then trains 40 s, a step a second.
    spec = paced_on_two_nodes(
        paced,
        100_000,  # stopped at the limit, long before its end
        1.0,
        checkpoint={"every_n_steps": 0, "every_n_epochs": 0, "keep_last": 2},
        limits={"max_runtime_s": 40},
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
    # 100 paced steps: the node goes down long before the first attempt could end.
    every_20 = {"every_n_steps": 20, "every_n_epochs": 0, "keep_last": 2}
    spec = paced_on_two_nodes(paced, 100, checkpoint=every_20)
    with slurm_stack.client() as client:
        job = submit(client, spec)
        wait_training(slurm_stack, client, job["id"], 45)  # two checkpoints stored
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
    assert steps == sorted(set(steps)) and steps[-1] == 100, f"a step twice, or not the last: {steps}"
    # What the worker handed the nodes for each of Slurm's restarts: the checkpoint to resume from.
    folder = runs_dir(slurm_stack) / ".slurm" / str(job["id"])
    for restart in range(1, done["attempt"]):
        handed = json.loads((folder / f"attempt-{restart}.json").read_text())
        assert handed["config"]["attempt"] == restart + 1 and handed["config"]["plan"]["resume_path"], handed


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
        **factories(paced, PACE_S, 100_000),
        "parallel": {"strategy": "ddp", "nproc_per_node": 1},
    }
    receiver = Receiver()
    try:
        with slurm_stack.client() as client:
            hook = client.post(
                "/v1/webhooks", json={"url": receiver.url, "events": ["job.cancelled"], "secret": SECRET}
            ).json()
            job = submit(client, spec)
            wait_training(slurm_stack, client, job["id"], 5)
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


def node_command(stack: Stack, job_id: int) -> list[str]:
    """What node 0 ran for the job's first attempt, as the header of its launcher log says."""
    launcher = (runs_dir(stack) / str(job_id) / "logs" / "launcher.log").read_text()
    header = next(line for line in launcher.splitlines() if line.startswith("=== attempt 1 node 0: "))
    return header.split(": ", 1)[1].split()


def slurm_field(cluster: SlurmCluster, slurm_id: int, field: str) -> str:
    shown = cluster.run(["scontrol", "--oneliner", "show", "job", str(slurm_id)])
    return shown.split(f" {field}=", 1)[1].split()[0]


def submitted_after(cluster: SlurmCluster, slurm_id: int) -> str | None:
    """The --dependency the job was submitted with, as the batch script Slurm keeps says (scontrol shows a
    dependency only until it is met)."""
    script = cluster.run(["scontrol", "write", "batch_script", str(slurm_id), "-"])
    return next((line.split("=", 1)[1] for line in script.splitlines() if "--dependency=" in line), None)


def handed_over(client: httpx.Client, job_ids: list[int]) -> dict[int, int]:
    """The Slurm job ids of those of `job_ids` handed to Slurm."""
    return {job_id: slurm_id for job_id in job_ids if (slurm_id := slurm_job_id(client, job_id)) is not None}


def test_a_dependant_of_slurm_jobs_waits_in_slurm_and_a_parent_that_ends_otherwise_leaves_none_pending(
    slurm_stack: Stack, slurm_cluster: SlurmCluster
) -> None:
    """A job whose depends_on are Slurm jobs is handed over at once, held by Slurm (afterok); when its parent
    ends otherwise than succeeded it is cancelled in Slurm (--kill-on-invalid-dep, or Trainyard's scancel)
    and in Trainyard (dependency_failed), never started by either."""
    with slurm_stack.client() as client:
        stuck = submit(client, THREE_NODES)  # more nodes than the cluster has: it waits in Slurm for good
        orphan = submit(client, {**THREE_NODES, "depends_on": [stuck["id"]]})
        ids = [stuck["id"], orphan["id"]]
        wait_for(lambda: len(handed_over(client, ids)) == len(ids), 30, "both handed to Slurm")
        slurm = handed_over(client, ids)
        assert submitted_after(slurm_cluster, slurm[orphan["id"]]) == f"afterok:{slurm[stuck['id']]}"
        # Slurm names the reason at its first scheduling pass over the job.
        reason = lambda: slurm_field(slurm_cluster, slurm[orphan["id"]], "Reason")  # noqa: E731
        wait_for(lambda: reason() == "Dependency", 30, "Slurm's reason: Dependency")
        client.post(f"/v1/jobs/{stuck['id']}/cancel")
        cancelled = wait_status(client, orphan["id"], {"cancelled"}, timeout=30)
    assert cancelled["status_reason"] == "dependency_failed" and cancelled["started_at"] is None, cancelled
    wait_for(
        lambda: slurm_state(slurm_cluster, slurm[orphan["id"]]) == "CANCELLED", 30, "its Slurm job ended"
    )


# Two jobs one after the other, each a torchrun start-up, which on a busy two-core box takes a minute or more.
@pytest.mark.timeout(600)
def test_a_dependant_starts_in_slurm_and_in_trainyard_once_its_parent_succeeded(
    slurm_stack: Stack, slurm_cluster: SlurmCluster, paced: str
) -> None:
    spec: dict[str, Any] = {
        **factories(paced, 0.0, 20),
        "parallel": {"strategy": "ddp", "nproc_per_node": 1},
    }
    with slurm_stack.client() as client:
        parent = submit(client, spec)
        child = submit(client, {**spec, "depends_on": [parent["id"]]})
        ids = [parent["id"], child["id"]]
        wait_for(lambda: len(handed_over(client, ids)) == len(ids), 30, "both handed to Slurm")
        slurm = handed_over(client, ids)
        done = [wait_status(client, job_id, {"succeeded"}, timeout=240) for job_id in ids]
    # Handed over with afterok, Slurm started it once its parent had completed; Trainyard, once it had
    # succeeded.
    assert submitted_after(slurm_cluster, slurm[child["id"]]) == f"afterok:{slurm[parent['id']]}"
    parent_end = slurm_field(slurm_cluster, slurm[parent["id"]], "EndTime")
    assert slurm_field(slurm_cluster, slurm[child["id"]], "StartTime") >= parent_end
    assert done[1]["started_at"] >= done[0]["finished_at"], done
    # Both are a user's bundle, which a node runs sandboxed (a job of its own to show it cost a torchrun
    # start-up more).
    for job_id in ids:
        argv = node_command(slurm_stack, job_id)
        assert "bwrap" in argv and "--unshare-pid" in argv and any(a.startswith("--reuid=") for a in argv), (
            argv
        )
