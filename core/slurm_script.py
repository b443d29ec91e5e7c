"""The sbatch script of a job handed to Slurm: a pure builder, as core/launch.py is for the local argv.

One task per node. Each task runs `python -m worker.executors.slurm.node`, which waits for the attempt the
worker wrote for Slurm's restart count, builds that node's torchrun command (c10d rendezvous on the
allocation's first node, the sandbox around a job with user code) and becomes it. The script is the same for
every attempt, since Slurm runs it again as it is when it requeues the job.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from core.config import Settings
from core.project import PROJECT_ROOT
from jobspec.plan import Plan
from jobspec.spec import JobSpec

# Under the runs directory, beside the jobs' own folders and outside every one of them: what the worker
# writes for a job's nodes (its attempts) and the batch shell's own output. A job's ranks can reach neither
# (a sandboxed job sees its own run directory alone), so the nodes trust what they read there.
SLURM_FOLDER = ".slurm"
BATCH_LOG = "batch.log"
# Trainyard's priority (-100..100) onto Slurm's --nice, which lowers a job's priority by its amount; a
# negative one needs a Slurm admin, so the highest Trainyard priority is nice 0.
MAX_PRIORITY = 100


def slurm_folder(runs_dir: Path, job_id: int | str) -> Path:
    return runs_dir / SLURM_FOLDER / str(job_id)


def job_name(job_id: int | str) -> str:
    return f"trainyard-{job_id}"


def nice(priority: int) -> int:
    return MAX_PRIORITY - priority


def time_limit(max_runtime_s: int, settings: Settings) -> str:
    """Slurm's --time as hours:minutes:seconds: the runtime, the start-up allowance and the signal's lead.
    Slurm counts whole minutes, and start-up, so Trainyard stops the job at its own limit first."""
    total = max_runtime_s + settings.slurm_startup_s + settings.slurm_signal_lead_s
    minutes = -(-total // 60)
    return f"{minutes // 60}:{minutes % 60:02d}:00"


def sbatch_quoted(value: str) -> str:
    """A value of an #SBATCH line as sbatch reads it: it splits the line at spaces outside double quotes and
    takes an unquoted '#' for a comment, so a runs directory with either would lose its batch log."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def cpus_per_task(plan: Plan, settings: Settings) -> int:
    return plan.num_gpus * settings.slurm_cpus_per_gpu if plan.num_gpus else max(1, plan.cpu_cores)


def sbatch_options(
    plan: Plan, spec: JobSpec, job_id: int | str, settings: Settings, after_ok: Sequence[int] = ()
) -> list[str]:
    options = [
        f"--job-name={job_name(job_id)}",
        f"--nodes={plan.nnodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus_per_task(plan, settings)}",
        # Every rank gets SIGTERM this long before the limit: the trainer's final checkpoint.
        f"--signal=TERM@{settings.slurm_signal_lead_s}",
        # A node failure or a preemption puts the job back in Slurm's queue; it resumes from its checkpoint.
        "--requeue",
        f"--nice={nice(spec.priority)}",
        f"--output={sbatch_quoted(str(slurm_folder(settings.runs_dir, job_id) / BATCH_LOG))}",
        "--open-mode=append",
    ]
    if plan.num_gpus:
        options.append(f"--gres=gpu:{plan.num_gpus}")
    if spec.limits.max_runtime_s is not None:
        options.append(f"--time={time_limit(spec.limits.max_runtime_s, settings)}")
    if settings.slurm_partition:
        options.append(f"--partition={settings.slurm_partition}")
    if after_ok:
        # The Slurm jobs of its depends_on: Slurm starts it once each has completed, and cancels it at once
        # when one fails rather than hold it pending for good; Trainyard's own record of them
        # (core/dependencies.py) still decides when it may start and why it was cancelled.
        options.append(f"--dependency=afterok:{':'.join(map(str, after_ok))}")
        options.append("--kill-on-invalid-dep=yes")
    return options


def batch_script(
    plan: Plan,
    spec: JobSpec,
    job_id: int | str,
    settings: Settings,
    python: str,
    project: Path = PROJECT_ROOT,
    after_ok: Sequence[int] = (),
) -> str:
    # One task per node, its cores said again (since Slurm 22.05 srun no longer takes --cpus-per-task from
    # the allocation, and would bind each task to one core); a node that fails takes the step down with it,
    # so the job ends and Slurm's state says how.
    srun = [
        *("srun", "--ntasks-per-node=1", f"--cpus-per-task={cpus_per_task(plan, settings)}"),
        "--kill-on-bad-exit=1",
    ]
    node = [python, "-m", "worker.executors.slurm.node", "--job", str(job_id)]
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {option}" for option in sbatch_options(plan, spec, job_id, settings, after_ok)),
            "set -eu",
            f"cd {shlex.quote(str(project))}",
            f"exec {shlex.join([*srun, *node])}",
            "",
        ]
    )
