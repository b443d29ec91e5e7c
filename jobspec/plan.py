"""The plan: what a spec resolves to on this cluster (strategy, world size, per-rank batch, devices), or every
problem that keeps it from running. Resolved once per submission, so a dry run shows exactly what a submission
would do. No torch import.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, Field, model_validator

from jobspec.catalog.archs import ARCHS
from jobspec.cluster import Inventory, cluster_problems
from jobspec.combinations import combination_problems, plan_warnings
from jobspec.data_plan import DataPath, data_problems, plan_data
from jobspec.data_store import StoreListing
from jobspec.forecast import Forecast
from jobspec.layout import LAYOUTS, Layout, spanning
from jobspec.model_fit import model_problems, model_warnings, stage_problems
from jobspec.problems import Problem, SpecError, refuse
from jobspec.spec import JobSpec, LrScaling, ParallelSpec, Precision, Strategy, TrainSpec
from jobspec.user_fit import user_code_problems


class Plan(BaseModel):
    """What will run: derived from the spec alone, so a dry run shows exactly what a submission would do."""

    strategy: Strategy
    strategy_reason: str
    # How the data is read (held whole, streamed, decided at start by its size), and why.
    data_path: DataPath | None = None
    data_reason: str = ""
    device: str  # "cpu" or "cuda"
    backend: str  # torch.distributed backend
    world_size: int  # torchrun processes
    nproc_per_node: int
    nnodes: int = 1  # hosts, each running nproc_per_node processes
    host: str | None = None  # the host the spec pins a one-host job to
    data_parallel_size: int = 1  # ranks the global batch is split over
    stages: int = 1  # model_parallel and pipeline
    microbatches: int = 1  # pipeline
    workers: int = 1  # hogwild processes sharing one model
    gpus: list[int] | None  # physical ids when the spec names them; leased ids fill in at start
    num_gpus: int
    per_rank_batch: int  # samples per rank per optimizer step
    micro_batch: int  # samples per rank per forward/backward
    precision: Precision
    lr: float  # after the lr scaling rule
    max_steps: int | None = None  # train.max_tokens as optimizer steps; the trainer runs that many
    argv: list[str] = Field(default_factory=list)
    batch_script: str | None = None  # with TRAINYARD_EXECUTOR=slurm: the sbatch script (core/slurm_script.py)
    warnings: list[str] = Field(default_factory=list)  # runs as asked, but likely not as hoped
    # A dry run plans a spec no registered host can run (as the cluster would run it) and says why here.
    runnable: bool = True
    not_runnable_because: list[str] = Field(default_factory=list)
    resume_path: str | None = None
    # Its busiest device's peak memory, step and job time, and whether it fits (issue 44); None with why.
    forecast: Forecast | None = None
    forecast_note: str | None = None
    data_found: StoreListing | None = None  # an s3:// data.root: what its bounded listing found

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def total_gpus(self) -> int:
        """num_gpus is per host; a multi-host job takes that many on each of its hosts."""
        return self.num_gpus * self.nnodes

    @property
    def cpu_cores(self) -> int:
        """The cores one node of a CPU job keeps busy, one per training process: hogwild's workers, not its
        one rank, which only reports; 0 for a GPU job, whose processes drive its GPUs."""
        return 0 if self.gpus or self.num_gpus else self.nproc_per_node * self.workers


def scaled_lr(train: TrainSpec) -> float:
    ratio = train.batch_size / train.base_batch_size
    if train.lr_scaling is LrScaling.LINEAR:
        return train.lr * ratio
    if train.lr_scaling is LrScaling.SQRT:
        return train.lr * math.sqrt(ratio)
    return train.lr


def _gpu_count(parallel: ParallelSpec) -> int:
    if parallel.gpus is not None:
        return len(parallel.gpus)
    return parallel.num_gpus or 0


# fp32 weights, gradients and two Adam moments: 16 bytes a parameter. Above this, replicas crowd the GPU.
REPLICA_BYTES_LIMIT = 40 * 2**30


def _pick_strategy(spec: JobSpec, gpus: int) -> tuple[Strategy, str]:
    parallel = spec.parallel
    if parallel.strategy is not Strategy.AUTO:
        return parallel.strategy, "chosen in the spec"
    if parallel.placement:
        return Strategy.SINGLE, "parallel.placement splits one model over CPU and GPU in one process"
    processes = (gpus or parallel.nproc_per_node or 1) * parallel.nnodes
    if processes == 1:
        return Strategy.SINGLE, "one process: no parallel wrapper needed"
    if spec.program is not None:
        return Strategy.DDP, f"{processes} processes of the program: ty.prepare keeps a replica each"
    if spec.inputs.model.arch is None:
        return Strategy.DDP, (
            f"{processes} processes: DDP keeps a replica of model.factory's model each (its size is known "
            "only once built; ask for fsdp to shard it)"
        )
    params = ARCHS[spec.inputs.model.arch].approx_params(
        spec.inputs.model.arch_kwargs, spec.inputs.data.vocab_size
    )
    if params * 16 > REPLICA_BYTES_LIMIT:
        return Strategy.FSDP, f"~{params / 1e6:.0f}M parameters are too many to replicate: FSDP shards them"
    return Strategy.DDP, f"{processes} processes, ~{params / 1e6:.0f}M parameters: DDP keeps a replica each"


def _batches(train: TrainSpec, layout: Layout) -> tuple[int, int]:
    """Samples per process per optimizer step, and per forward/backward."""
    shards = layout.data_parallel_size * layout.workers * train.grad_accum_steps
    if train.batch_size % shards:
        raise refuse(
            "train.batch_size",
            f"train.batch_size={train.batch_size} must divide evenly over {layout.data_parallel_size} "
            f"ranks x {layout.workers} workers x {train.grad_accum_steps} accumulation steps",
            f"use a multiple of {shards}",
        )
    per_rank = train.batch_size // (layout.data_parallel_size * layout.workers)
    micro = per_rank // train.grad_accum_steps
    if layout.microbatches > micro:
        raise refuse(
            "parallel.microbatches",
            f"parallel.microbatches={layout.microbatches} is more than the {micro} samples each stage "
            "gets per step",
            f"use at most {micro}",
        )
    if micro % layout.microbatches:
        raise refuse(
            "parallel.microbatches",
            f"the per-stage batch of {micro} does not split into parallel.microbatches={layout.microbatches}",
            "use a divisor of it",
        )
    return per_rank, micro


def _token_steps(spec: JobSpec) -> int | None:
    """train.max_tokens in optimizer steps of train.batch_size windows of data.block_size, rounded up."""
    train = spec.train
    if train.max_tokens is None:
        return None
    block_size = spec.inputs.data.block_size
    if block_size is None:
        raise refuse(
            "train.max_tokens",
            "train.max_tokens counts the tokens of data.block_size windows, and data.block_size is not set",
            "use train.max_steps, or a token dataset with data.block_size",
        )
    return math.ceil(train.max_tokens / (train.batch_size * block_size))


def _processes_match_gpus(parallel: ParallelSpec, gpus: int) -> Iterator[Problem]:
    if gpus and parallel.nproc_per_node not in (None, gpus) and parallel.strategy is not Strategy.DP:
        yield Problem(
            "parallel.nproc_per_node",
            f"parallel.nproc_per_node={parallel.nproc_per_node} must equal the {gpus} GPUs asked for "
            "(one process per GPU)",
            "leave it out",
        )


# No host registered: GPUs and hosts are judged when a worker places the job.
NO_HOSTS = Inventory()


def resolve_plan(spec: JobSpec, inventory: Inventory = NO_HOSTS) -> Plan:
    """The plan of `spec` on the cluster `inventory` describes; raises SpecError naming every problem found
    (each with its field and fix), as far as the layout could be worked out."""
    parallel = spec.parallel
    gpus = _gpu_count(parallel)
    device = "cuda" if gpus else "cpu"
    strategy, reason = _pick_strategy(spec, gpus)
    program = spec.program is not None
    problems = [
        *cluster_problems(parallel, inventory),
        *_processes_match_gpus(parallel, gpus),
        *combination_problems(spec, strategy, device),
        *user_code_problems(spec, strategy),
    ]
    if not program:  # a program builds its own model and reads its own data
        problems += [*data_problems(spec, strategy, device), *model_problems(spec, strategy)]
    try:
        per_host = LAYOUTS[strategy](parallel, gpus)
        layout = spanning(per_host, strategy, parallel.nnodes)
        # A program's script picks its own batches (ty.data_loader's batch_size): none to split here.
        per_rank, micro = (0, 0) if program else _batches(spec.train, layout)
        max_steps = None if program else _token_steps(spec)
    except SpecError as error:
        raise SpecError([*problems, *error.problems]) from None
    if not program:
        problems += stage_problems(spec, strategy, layout.stages)
    if problems:
        raise SpecError(problems)
    data_path, data_reason = (None, "") if program else plan_data(spec, device)
    return Plan(
        strategy=strategy,
        strategy_reason=reason,
        data_path=data_path,
        data_reason=data_reason,
        device=device,
        backend="nccl" if device == "cuda" else "gloo",
        world_size=layout.world_size,
        nproc_per_node=per_host.world_size,
        nnodes=parallel.nnodes,
        host=parallel.host,
        data_parallel_size=layout.data_parallel_size,
        stages=layout.stages,
        microbatches=layout.microbatches,
        workers=layout.workers,
        gpus=parallel.gpus,
        num_gpus=gpus,
        per_rank_batch=per_rank,
        micro_batch=micro,
        precision=spec.precision,
        lr=scaled_lr(spec.train),
        max_steps=max_steps,
        warnings=[*plan_warnings(spec, strategy, device), *model_warnings(spec, strategy)],
    )


class RunConfig(BaseModel):
    """Written by the worker to runs/<job>/spec.json and read by every rank of the trainer."""

    job_id: int
    attempt: int
    spec: JobSpec
    plan: Plan
    code_dir: str | None = None  # the job's code bundle, unpacked and read-only, when spec.code names one

    @model_validator(mode="after")
    def steps_of_tokens(self) -> RunConfig:
        """The trainer reads its length from train.max_steps, which train.max_tokens sets once planned."""
        if self.plan.max_steps is not None and self.spec.train.max_tokens is not None:
            train = self.spec.train.model_copy(update={"max_steps": self.plan.max_steps, "max_tokens": None})
            self.spec = self.spec.model_copy(update={"train": train})
        return self
