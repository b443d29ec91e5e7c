"""Two hosts on one GPU box: two workers with host identities of their own, one GPU each, and a 2-node DDP
job over NCCL between them (c10d rendezvous, one torchrun per host). Skipped without 2 GPUs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.gpu.test_gpu_e2e import gpu_spec
from tests.integration.jobs import metric_values, submit, wait_status
from tests.integration.servers import Stack

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


@pytest.fixture(scope="module")
def two_gpu_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("gpu-hosts")
    stack = Stack.embedded(
        workdir,
        # Each worker's own mask narrows what NVML finds to one GPU; a job's ranks then get the GPU leased.
        CUDA_VISIBLE_DEVICES="0",
        TRAINYARD_ADVERTISE_ADDRESS="127.0.0.1",
        TRAINYARD_HOSTNAME="gpu-a",
    )
    stack.start_worker("worker-b", TRAINYARD_HOSTNAME="gpu-b", CUDA_VISIBLE_DEVICES="1")
    yield stack
    stack.stop()


def test_a_two_node_nccl_job_trains_across_two_hosts(two_gpu_hosts: Stack) -> None:
    spec = {**gpu_spec([0], 60), "parallel": {"strategy": "ddp", "nnodes": 2, "num_gpus": 1}}
    with two_gpu_hosts.client() as client:
        job = submit(client, spec)
        job = wait_status(client, job["id"], {"succeeded"}, timeout=240)
        loss = [value for _, value in metric_values(client, job["id"], "loss")]
    nodes = two_gpu_hosts.sql(f"SELECT count(DISTINCT host) FROM job_nodes WHERE job_id = {job['id']}")
    print(f"2 nodes x 1 GPU: {job['plan']['backend']}, world {job['plan']['world_size']}, loss {loss}")
    assert nodes == 2 and job["plan"]["backend"] == "nccl" and job["plan"]["world_size"] == 2
    assert loss[-1] < loss[0]
