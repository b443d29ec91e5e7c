"""The loopback Slurm cluster that the Slurm executor runs against (deploy/slurm_cluster.py): its nodes look
like machines of their own to a 2-node job, torchrun's c10d rendezvous and gloo work between them, and a
node that fails has its --requeue jobs requeued."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from deploy.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.own_services]

# Each rank all-reduces its rank + 1 over gloo, across the nodes; c10d finds the ranks through the first node.
ALL_REDUCE = """
import socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(socket.gethostname(), dist.get_rank(), int(total.item()), flush=True)
dist.destroy_process_group()
"""


def job_field(cluster: SlurmCluster, job_id: str, name: str) -> str:
    shown = cluster.run(["scontrol", "show", "job", job_id])
    found = re.search(rf"\b{name}=(\S+)", shown)
    assert found, f"no {name} in {shown}"
    return found.group(1)


def wait_field(cluster: SlurmCluster, job_id: str, name: str, value: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (seen := job_field(cluster, job_id, name)) != value:
        assert time.monotonic() < deadline, f"job {job_id}: {name}={seen}, not {value} after {timeout}s"
        time.sleep(0.2)


def test_a_two_node_batch_job_runs_a_task_on_each_node(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "hosts.out"
    script = "srun sh -c 'echo $(hostname) $(hostname -i)'"
    slurm_cluster.run(["sbatch", "--wait", "-N2", f"--output={out}", "--wrap", script])
    addresses = slurm_cluster.network.addresses()
    assert sorted(out.read_text().splitlines()) == [f"{node} {addresses[node]}" for node in sorted(addresses)]


def test_torchrun_rendezvous_and_gloo_span_the_nodes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    first = slurm_cluster.node_names[0]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1"]
    torchrun += ["--rdzv_backend=c10d", f"--rdzv_endpoint={first}:29400", "--rdzv_id=smoke", str(script)]
    printed = slurm_cluster.run(["srun", "-N2", "--ntasks-per-node=1", *torchrun], timeout=60)
    ranks = sorted(line.split() for line in printed.splitlines())
    assert ranks == [[node, str(rank), "3"] for rank, node in enumerate(slurm_cluster.node_names)]


def test_a_failed_node_requeues_its_requeueable_job(slurm_cluster: SlurmCluster) -> None:
    node = slurm_cluster.node_names[-1]
    submitted = slurm_cluster.run(
        [
            "sbatch",
            "--parsable",
            "--requeue",
            f"--nodelist={node}",
            "--output=/dev/null",
            "--wrap",
            "sleep 300",
        ]
    )
    job_id = submitted.strip()
    try:
        wait_field(slurm_cluster, job_id, "JobState", "RUNNING")
        slurm_cluster.node_down(node)
        wait_field(slurm_cluster, job_id, "Restarts", "1")
        assert job_field(slurm_cluster, job_id, "JobState") == "PENDING"
    finally:
        slurm_cluster.node_up(node)
        slurm_cluster.run(["scancel", job_id])
