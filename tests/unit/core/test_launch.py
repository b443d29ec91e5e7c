"""The torchrun command line and environment are pure functions of the plan and the lease."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.launch import JOB_TOKEN_ENV, RUN_DIR_ENV, Rendezvous, build_launch, torchrun_argv
from jobspec.plan import Plan, resolve_plan
from jobspec.spec import JobSpec

RUN_DIR = Path("/runs/7")
DATA_DIR = Path("/data")
# What a deployed worker's environment holds (docker-compose.yml, docs/operations.md): none of it may reach
# a rank.
SECRETS = {
    "TRAINYARD_DATABASE_URL": "postgresql+psycopg://trainyard:hunter2@postgres:5432/trainyard",
    "TRAINYARD_BROKER_URL": "redis://:hunter2@redis:6379/0",
    "TRAINYARD_S3_BUCKET": "trainyard-artifacts",
    "TRAINYARD_AUTH": "on",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "hunter2",
    "AWS_SESSION_TOKEN": "hunter2",
    "POSTGRES_PASSWORD": "hunter2",
    "REDIS_PASSWORD": "hunter2",
    "PGPASSWORD": "hunter2",
    "OPENAI_API_KEY": "sk-hunter2",
    "HF_TOKEN": "hf_hunter2",
    "GITHUB_TOKEN": "ghp_hunter2",
    "SSH_AUTH_SOCK": "/run/user/0/ssh-agent",
    "HOME": "/root",
    "USER": "root",
}
# What the ranks need from it: the interpreter, the locale, CUDA, and the admin's tuning of the collectives.
NEEDED = {
    "PATH": "/venv/bin:/usr/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
    "PYTHONPATH": "/opt/site",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "GLOO_SOCKET_IFNAME": "eth0",
}


def plan_for(**parallel: object) -> Plan:
    spec = {"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "parallel": parallel}
    return resolve_plan(JobSpec.model_validate(spec))


def launch(
    plan: Plan, gpu_ids: list[int], compile_cache: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    built = build_launch(
        plan,
        job_id=7,
        attempt=2,
        host="box",
        run_dir=RUN_DIR,
        data_dir=DATA_DIR,
        gpu_ids=gpu_ids,
        python="/venv/bin/python",
        worker_env={**NEEDED, **SECRETS, "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        cpu_count=16,
        compile_cache=compile_cache,
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
        "--local-addr",
        "127.0.0.1",
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
    assert env[RUN_DIR_ENV] == "/runs/7"


def test_env_is_the_allow_list_and_the_job_s_own() -> None:
    _, env = launch(plan_for(num_gpus=2), [2, 0])
    assert not set(env) & (set(SECRETS) - {"HOME"})
    assert "hunter2" not in repr(env)
    assert {name: env[name] for name in NEEDED} == NEEDED
    assert env["HOME"] == "/runs/7"  # the job's own directory, not the worker's home
    assert env["TRAINYARD_DATA_DIR"] == "/data"  # the one TRAINYARD_* a rank gets, and it names no secret
    assert sorted(name for name in env if name.startswith("TRAINYARD_")) == [
        *("TRAINYARD_DATA_DIR", JOB_TOKEN_ENV, RUN_DIR_ENV),
    ]


def test_the_host_s_compile_cache_is_shared_only_when_the_worker_says_so() -> None:
    _, shared = launch(plan_for(num_gpus=1), [0], compile_cache=Path("/var/trainyard/compile-cache"))
    assert shared["TORCHINDUCTOR_CACHE_DIR"] == "/var/trainyard/compile-cache"
    _, own = launch(plan_for(num_gpus=1), [0])  # a sandboxed job: Inductor's default, its own /tmp
    assert "TORCHINDUCTOR_CACHE_DIR" not in own


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


def test_ranks_read_hugging_face_models_offline() -> None:
    """model.arch hf_causal_lm reads model.path alone: transformers and the hub never download."""
    _, env = launch(plan_for(), [])
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
