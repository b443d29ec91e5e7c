"""Pure builders of the torchrun command line and environment: no processes, no I/O, easy to test."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from trainers.plan import Plan

JOB_TOKEN_ENV = "TRAINYARD_JOB_TOKEN"


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a multi-host job meet: torchrun's c10d rendezvous, hosted by node 0."""

    nnodes: int
    node_rank: int
    endpoint: str  # node 0's "address:port"
    run_id: str  # one per attempt, so a restart never meets the previous attempt's agents
    local_addr: str  # where the other nodes reach this one
    join_timeout_s: int

    @classmethod
    def placeholder(cls, nnodes: int, job_id: int | str, join_timeout_s: float) -> Rendezvous:
        """Node 0's view before placement, for the plan shown at submit: what a worker fills in, named."""
        return cls(
            nnodes,
            0,
            "<node 0 address>:<port>",
            f"trainyard-{job_id}-<attempt>",
            "<host address>",
            int(join_timeout_s),
        )

    def argv(self) -> list[str]:
        is_host = "true" if self.node_rank == 0 else "false"
        return [
            *("--nnodes", str(self.nnodes), "--node-rank", str(self.node_rank)),
            *("--rdzv-backend", "c10d", "--rdzv-endpoint", self.endpoint, "--rdzv-id", self.run_id),
            # Said outright: on one machine every node's endpoint looks local, and each would try to host.
            *("--rdzv-conf", f"is_host={is_host},join_timeout={self.join_timeout_s}"),
            *("--local-addr", self.local_addr),
        ]


def torchrun_argv(plan: Plan, run_dir: Path, python: str, rendezvous: Rendezvous | None = None) -> list[str]:
    """One host: `--standalone` lets the OS pick a free rendezvous port, so jobs never collide."""
    topology = ["--standalone", "--nnodes", "1"] if rendezvous is None else rendezvous.argv()
    return [
        python,
        "-m",
        "torch.distributed.run",
        *topology,
        "--nproc-per-node",
        str(plan.nproc_per_node),
        "--max-restarts",
        "0",
        "-m",
        "trainers.run",
        "--run-dir",
        str(run_dir),
    ]


def job_token(job_id: int, attempt: int, host: str) -> str:
    return f"{host}/{job_id}/{attempt}"


def launch_env(
    base: dict[str, str], plan: Plan, gpu_ids: list[int], token: str, run_dir: Path, cpu_count: int
) -> dict[str, str]:
    env = dict(base)
    env.update(
        {
            # Physical ids in PCI order, the numbering NVML and users see; a CPU job sees no GPU at all.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_ids),
            # Every process of the job inherits this, data-loader workers too: it is how cancel finds them.
            JOB_TOKEN_ENV: token,
            "TORCHELASTIC_ERROR_FILE": str(run_dir / "error.json"),
            "OMP_NUM_THREADS": str(max(1, cpu_count // plan.nproc_per_node)),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def build_launch(
    plan: Plan,
    *,
    job_id: int,
    attempt: int,
    host: str,
    run_dir: Path,
    gpu_ids: list[int],
    python: str,
    base_env: dict[str, str] | None = None,
    cpu_count: int | None = None,
    rendezvous: Rendezvous | None = None,
) -> Launch:
    if plan.device == "cuda" and len(gpu_ids) != plan.num_gpus:
        raise ValueError(f"plan needs {plan.num_gpus} GPUs but {len(gpu_ids)} were leased: {gpu_ids}")
    token = job_token(job_id, attempt, host)
    env = launch_env(
        dict(os.environ) if base_env is None else base_env,
        plan,
        gpu_ids,
        token,
        run_dir,
        cpu_count or os.cpu_count() or 1,
    )
    return Launch(argv=torchrun_argv(plan, run_dir, python, rendezvous), env=env)
