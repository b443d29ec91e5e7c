"""The torchrun command line and environment are pure functions of the plan and the lease."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.launch import JOB_TOKEN_ENV, Rendezvous, build_launch, torchrun_argv
from trainers.plan import Plan, resolve_plan
from trainers.spec import JobSpec

RUN_DIR = Path("/runs/7")


def plan_for(**parallel: object) -> Plan:
    spec = {"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "parallel": parallel}
    return resolve_plan(JobSpec.model_validate(spec))


def launch(plan: Plan, gpu_ids: list[int]) -> tuple[list[str], dict[str, str]]:
    built = build_launch(
        plan,
        job_id=7,
        attempt=2,
        host="box",
        run_dir=RUN_DIR,
        gpu_ids=gpu_ids,
        python="/venv/bin/python",
        base_env={"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        cpu_count=16,
    )
    return built.argv, built.env


def test_argv_is_exact() -> None:
    argv, _ = launch(plan_for(gpus=[1, 3]), [1, 3])
    assert argv == [
        "/venv/bin/python",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "0",
        "-m",
        "trainers.run",
        "--run-dir",
        "/runs/7",
    ]


def test_env_maps_leased_gpus_and_marks_every_process() -> None:
    _, env = launch(plan_for(num_gpus=2), [2, 0])
    assert env["CUDA_VISIBLE_DEVICES"] == "2,0"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env[JOB_TOKEN_ENV] == "box/7/2"
    assert env["TORCHELASTIC_ERROR_FILE"] == "/runs/7/error.json"
    assert env["OMP_NUM_THREADS"] == "8"  # 16 CPUs over 2 ranks
    assert env["PATH"] == "/bin"


def test_cpu_job_sees_no_gpu_even_when_the_worker_does() -> None:
    argv, env = launch(plan_for(nproc_per_node=4), [])
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["OMP_NUM_THREADS"] == "4"
    assert argv[argv.index("--nproc-per-node") + 1] == "4"


def test_lease_that_does_not_match_the_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="needs 2 GPUs but 1 were leased"):
        launch(plan_for(num_gpus=2), [0])


def test_a_node_of_a_multi_host_job_meets_at_node_0_by_c10d() -> None:
    plan = plan_for(strategy="ddp", nnodes=2, nproc_per_node=2)
    node_1 = Rendezvous(2, 1, "10.0.0.1:29400", "trainyard-7-3", "10.0.0.2", 300)
    argv = torchrun_argv(plan, RUN_DIR, "python", node_1)
    assert "--standalone" not in argv
    assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--rdzv-endpoint") + 1] == "10.0.0.1:29400"
    assert argv[argv.index("--rdzv-id") + 1] == "trainyard-7-3"  # per attempt: a restart never meets the last
    assert argv[argv.index("--rdzv-conf") + 1] == "is_host=false,join_timeout=300"
    assert argv[argv.index("--local-addr") + 1] == "10.0.0.2"
    assert argv[argv.index("--nproc-per-node") + 1] == "2" and plan.world_size == 4
