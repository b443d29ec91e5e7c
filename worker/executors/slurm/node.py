"""`python -m worker.executors.slurm.node --job ID`: one node's task of a Slurm job (core/slurm_script.py
runs it with srun, one task per node). It waits for the attempt the worker wrote, builds this node's
torchrun command as a local worker would (core/launch.py; inside the sandbox when the job runs user code)
and becomes it, so that Slurm's signals and its accounting reach torchrun and the ranks themselves.

It reads no database: what a node needs is the attempt file and the shared runs directory."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from core.config import Settings, get_settings
from core.launch import Launch, Rendezvous, build_launch
from core.project import PROJECT_ROOT
from core.sandbox import confine
from core.slurm_script import slurm_folder
from jobspec.events import LAUNCHER_LOG, LOG_DIR
from jobspec.spec_env import plain_env
from worker.executors.slurm.attempts import NodeAttempt, node_error_mark, wait_for_attempt
from worker.rundir import append_no_follow
from worker.sandbox import check_starts, close_sandbox, job_bundle, sandbox_for

# The rendezvous port on the allocation's first node, from the Slurm job id: the same on every node without
# a word between them, and different for jobs that share a first node unless their ids are 20,000 apart.
PORT_BASE, PORT_SPAN = 20000, 20000


def rendezvous(job_id: int, attempt: int, settings: Settings, env: dict[str, str]) -> Rendezvous | None:
    nnodes = int(env.get("SLURM_JOB_NUM_NODES", "1"))
    if nnodes == 1:
        return None
    first = env["SLURM_LAUNCH_NODE_IPADDR"]  # srun runs in the batch shell, on the allocation's first node
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((first, 9))  # no packet is sent: this picks the address that reaches the first node
        local = probe.getsockname()[0]
    return Rendezvous(
        nnodes=nnodes,
        node_rank=int(env["SLURM_NODEID"]),
        endpoint=f"{first}:{PORT_BASE + int(env['SLURM_JOB_ID']) % PORT_SPAN}",
        run_id=f"trainyard-{job_id}-{attempt}",
        local_addr=local,
        join_timeout_s=int(settings.rendezvous_timeout_s),
    )


def allocated_gpus(env: dict[str, str]) -> list[int]:
    """The GPUs Slurm gave this node's task (--gres=gpu:N), as it names them in CUDA_VISIBLE_DEVICES."""
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    return [int(gpu) for gpu in visible.split(",") if gpu.strip().isdigit()]


def allocated_cpus(env: dict[str, str]) -> int | None:
    """The cores Slurm gave this node's task (--cpus-per-task), which its ranks share: the node may have
    many more, taken by other jobs. None outside an allocation that names them."""
    cpus = env.get("SLURM_CPUS_PER_TASK", "")
    return int(cpus) if cpus.isdigit() else None


def node_command(job_id: int, attempt: NodeAttempt, settings: Settings, env: dict[str, str]) -> Launch:
    """This node's torchrun for the attempt, confined when the attempt is sandboxed (the sandbox started
    once, empty, so that a node that cannot sandbox says so)."""
    config = attempt.config
    run_dir = settings.runs_dir / str(job_id)
    if not run_dir.is_dir():
        raise FileNotFoundError(
            f"the run directory {run_dir} is not on node {socket.gethostname()}: TRAINYARD_RUNS_DIR must be "
            "a folder every node mounts at the same path (docs/slurm.md)"
        )
    gpu_ids = allocated_gpus(env) if config.plan.num_gpus else []
    plan = config.plan.model_copy(update={"gpus": gpu_ids or config.plan.gpus})
    command = build_launch(
        plan,
        job_id=job_id,
        attempt=config.attempt,
        host=socket.gethostname(),
        run_dir=run_dir,
        data_dir=settings.data_dir,
        gpu_ids=gpu_ids,
        python=settings.environment_pythons[config.spec.environment]
        if config.spec.environment
        else sys.executable,
        worker_env=env,
        cpu_count=allocated_cpus(env),
        rendezvous=rendezvous(job_id, config.attempt, settings, env),
        compile_cache=None if attempt.sandboxed else settings.compile_cache_dir,
        # Plain values only: the API refuses secrets under Slurm (app/services/secrets.py), as a node reads
        # no database and holds no key.
        job_env=plain_env(config.spec.env),
    )
    if not attempt.sandboxed:
        return command
    box = sandbox_for(settings, config.spec, plan, run_dir, job_bundle(settings, config.spec), PROJECT_ROOT)
    try:
        check_starts(box)
    except BaseException:
        close_sandbox(box)
        raise
    return confine(command, box)  # the descriptor it holds open passes to bwrap through exec


def become(command: Launch, run_dir: Path, header: str) -> None:
    """Replace this process with the command, its output appended to the run's launcher log (opened without
    following a link the job's ranks may have planted there)."""
    log = append_no_follow(run_dir / LOG_DIR / LAUNCHER_LOG)
    os.write(log, header.encode())
    for fd in (1, 2):
        os.dup2(log, fd)
    os.close(log)
    for fd in command.pass_fds:
        os.set_inheritable(fd, True)
    os.chdir(PROJECT_ROOT)
    os.execvpe(command.argv[0], command.argv, command.env)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--job", type=int, required=True)
    job_id = parser.parse_args(argv).job
    settings = get_settings()
    env = dict(os.environ)
    restarts = int(env.get("SLURM_RESTART_COUNT", "0"))
    try:
        attempt = wait_for_attempt(
            slurm_folder(settings.runs_dir, job_id), restarts, settings.rendezvous_timeout_s
        )
        command = node_command(job_id, attempt, settings, env)
        node = env.get("SLURM_NODEID", "0")
        header = f"=== attempt {attempt.config.attempt} node {node}: {' '.join(command.argv)}\n"
        become(command, settings.runs_dir / str(job_id), header)
    except Exception as exc:
        print(f"{node_error_mark(restarts)}{exc}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
