"""Pure builders of the torchrun command line and environment: no processes, no I/O, easy to test."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.config import Settings
from core.executors import executor_traits
from jobspec.datadir import DATA_DIR_ENV, RUN_DIR_ENV
from jobspec.plan import Plan
from jobspec.spec import JobSpec
from jobspec.stacks import JOB_TOKEN_ENV as JOB_TOKEN_ENV
from jobspec.stacks import NCCL_TRACE_PREFIX, STACKS_DIR

# What a rank may inherit from the worker's environment: what the interpreter, the locale, CUDA and the
# collectives need to work, and the admin's tuning of them. Nothing else passes, so the database and broker
# URLs, object-store credentials, API keys and the worker's own TRAINYARD_* settings never reach user code.
INHERITED = frozenset(
    {
        *("PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "CUDA_HOME"),
        *("PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS", "PYTHONFAULTHANDLER"),
    }
)
INHERITED_PREFIXES = ("LC_", "CUDA_", "NCCL_", "GLOO_", "TORCH_", "NVSHMEM_")


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    pass_fds: tuple[int, ...] = ()  # descriptors the command inherits (core/sandbox.py's BoundFile)


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
    """One host: `--standalone` lets the OS pick a free rendezvous port, so jobs never collide, and the ranks
    meet on loopback, the one network a sandboxed job has: its host's name may resolve to an address that
    is not there."""
    one_host = ["--standalone", "--nnodes", "1", "--local-addr", "127.0.0.1"]
    topology = one_host if rendezvous is None else rendezvous.argv()
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


def planned_argv(plan: Plan, settings: Settings, job_id: int | str) -> list[str]:
    """The torchrun command a worker would run for the job, stored with it at submission (a job or a sweep's
    trial) and shown by a dry run: `python` for the worker's interpreter and, over several hosts, node 0's
    rendezvous with what placement decides named (Rendezvous.placeholder). The worker stores the command it
    ran in its place when it launches the job."""
    spanning = (
        None
        if plan.nnodes == 1
        else Rendezvous.placeholder(plan.nnodes, job_id, settings.rendezvous_timeout_s)
    )
    return torchrun_argv(plan, settings.runs_dir / str(job_id), "python", spanning)


def show_planned(plan: Plan, spec: JobSpec, settings: Settings, job_id: int | str) -> None:
    """What a job's plan shows of how it will run: planned_argv, and what its executor submits for it where
    it submits something (Slurm's batch script, core/slurm_script.py)."""
    plan.argv = planned_argv(plan, settings, job_id)
    if (submitted := executor_traits(settings).submitted) is not None:
        plan.batch_script = submitted(plan, spec, job_id, settings, "python")


def job_token(job_id: int, attempt: int, host: str) -> str:
    return f"{host}/{job_id}/{attempt}"


def inherited(worker_env: Mapping[str, str]) -> dict[str, str]:
    """The part of the worker's environment the allow-list lets through."""
    return {
        name: value
        for name, value in worker_env.items()
        if name in INHERITED or name.startswith(INHERITED_PREFIXES)
    }


def launch_env(
    worker_env: Mapping[str, str],
    plan: Plan,
    gpu_ids: list[int],
    token: str,
    run_dir: Path,
    data_dir: Path,
    cpu_count: int,
    compile_cache: Path | None,
) -> dict[str, str]:
    # A compiled job's graphs and kernels are kept for the next job like it. A sandboxed one, which may run a
    # user's code, compiles into its own /tmp (a tmpfs of the sandbox's), so that it can neither read nor
    # plant another job's compiled code.
    cache = {} if compile_cache is None else {"TORCHINDUCTOR_CACHE_DIR": str(compile_cache)}
    threads = max(1, cpu_count // plan.nproc_per_node)  # per process
    return {
        **inherited(worker_env),
        # Physical ids in PCI order, the numbering NVML and users see; a CPU job sees no GPU at all.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_ids),
        # Every process of the job inherits these, data-loader workers too: it is how cancel finds them.
        JOB_TOKEN_ENV: token,
        # Next to the token: the token ("<host>/<job>/<attempt>") repeats across deployments on one host (a
        # test suite beside a dev server, both with job 1), the run directory does not.
        RUN_DIR_ENV: str(run_dir),
        # The data dir the API checked data.root against, resolved: the trainer runs from another cwd.
        DATA_DIR_ENV: str(data_dir),
        # Caches and dotfiles of libraries land in the job's own directory, never the worker's home.
        "HOME": str(run_dir),
        "TORCHELASTIC_ERROR_FILE": str(run_dir / "error.json"),
        "OMP_NUM_THREADS": str(threads),
        # torch.compile's workers: as many as the rank's threads, so a CPU job's compile stays in its share
        # (with one, Inductor compiles in the rank rather than in a pool of fresh interpreters).
        "TORCHINDUCTOR_COMPILE_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
        # Hugging Face libraries read model.path and nothing else: no hub, no download, whatever the
        # worker's environment says.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **cache,
        **(flight_recorder(run_dir) if plan.device == "cuda" else {}),
    }


def flight_recorder(run_dir: Path) -> dict[str, str]:
    """torch's NCCL flight recorder: the last collectives of each rank kept in a ring, and dumped into the
    run directory when a collective times out, where the worker reduces them to which rank is missing from
    which collective (worker/attempts/flight.py). A gloo job's stacks alone say who waits where."""
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(run_dir / STACKS_DIR / NCCL_TRACE_PREFIX),
    }


def build_launch(
    plan: Plan,
    *,
    job_id: int,
    attempt: int,
    host: str,
    run_dir: Path,
    data_dir: Path,
    gpu_ids: list[int],
    python: str,
    worker_env: Mapping[str, str] | None = None,
    cpu_count: int | None = None,
    rendezvous: Rendezvous | None = None,
    compile_cache: Path | None = None,
    job_env: Mapping[str, str] | None = None,
) -> Launch:
    """`worker_env` (default: os.environ) passes through the allow-list. `compile_cache`: the host's
    torch.compile cache the job may share; None keeps the job's compilations to itself. `job_env`: the
    spec's env with its secrets' values (core/secrets.py::ranks_env), which only this environment carries:
    never the argv, the run directory or a log."""
    if plan.device == "cuda" and len(gpu_ids) != plan.num_gpus:
        raise ValueError(f"plan needs {plan.num_gpus} GPUs but {len(gpu_ids)} were leased: {gpu_ids}")
    # The spec refuses the names launch_env sets (jobspec/spec_env.py): neither can replace the other's.
    env = launch_env(
        os.environ if worker_env is None else worker_env,
        plan,
        gpu_ids,
        job_token(job_id, attempt, host),
        run_dir,
        data_dir,
        cpu_count or os.cpu_count() or 1,
        compile_cache,
    )
    return Launch(argv=torchrun_argv(plan, run_dir, python, rendezvous), env={**(job_env or {}), **env})
