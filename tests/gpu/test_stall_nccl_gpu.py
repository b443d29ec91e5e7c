"""A deliberately hung 2-GPU NCCL job through the whole service: rank 1 sleeps before an all_reduce rank 0
has entered (tests/integration/bundles/stall). NCCL's all_reduce returns to Python at once, so rank 0's stack
shows where it next waits on the GPU, not the collective: torch's flight recorder (dumped when the collective
times out, limits.collective_timeout_s) is what names the rank that never arrived.

Skipped with fewer than 2 GPUs; run on the device machine (nvidia-h200-x2):
    python3 -m pytest -q -s tests/gpu/test_stall_nccl_gpu.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from tests.integration.jobs import job_processes, submit, wait_status
from tests.integration.servers import Stack
from tests.integration.test_program_e2e import program, push
from tests.integration.test_stalls import STALL

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")

COLLECTIVE_TIMEOUT_S = 20  # NCCL's watchdog gives up on the all_reduce, and each rank dumps its ring
STALL_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def gpu_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack.embedded(tmp_path_factory.mktemp("stall-stack"), CUDA_VISIBLE_DEVICES="0,1")
    yield stack
    stack.stop()


def test_a_hung_nccl_job_is_found_stalled_and_names_the_rank_that_never_arrived(gpu_stack: Stack) -> None:
    code = push(gpu_stack, STALL)
    spec = program(
        code,
        10,
        program={"entrypoint": ["python", "train.py"]},
        parallel={"strategy": "ddp", "gpus": [0, 1]},
        checkpoint={"every_n_steps": 2, "every_n_epochs": 0, "keep_last": 1},
        metrics={"every_n_steps": 1},
        limits={"stall_timeout_s": STALL_TIMEOUT_S, "collective_timeout_s": COLLECTIVE_TIMEOUT_S},
    )
    with gpu_stack.client() as client:
        job_id = submit(client, spec)["id"]
        job = wait_status(client, job_id, {"failed", "succeeded", "cancelled"}, timeout=400)
        stacks = client.get(f"/v1/jobs/{job_id}/stacks")
        logs = client.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0}).json()["text"]
    print("job:", job["status"], job["status_reason"], job["message"])
    print("stacks:", stacks.status_code, stacks.text[:4000])
    print("rank 0 log tail:", logs[-3000:])
    listed = sorted(p.name for p in (gpu_stack.workdir / "runs" / str(job_id) / "stacks").glob("*"))
    print("stacks folder:", listed)
    assert (job["status"], job["status_reason"]) == ("failed", "stalled"), job
    assert stacks.status_code == 200
    collectives = stacks.json()["collectives"]
    assert any(c["missing"] == [1] and c["waiting"] == [0] for c in collectives), collectives
    assert "rank 1" in job["message"] or "ranks 1" in job["message"], job["message"]
    assert not job_processes(gpu_stack.workdir / "runs", job_id)
