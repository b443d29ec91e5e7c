"""The plan: what a spec resolves to (strategy, world size, per-rank batch, devices), derived from the spec
alone so a dry run shows exactly what a submission would do. No torch import.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from trainers.combinations import check_combinations
from trainers.spec import JobSpec, LrScaling, ParallelSpec, Precision, Strategy, TrainSpec


class Plan(BaseModel):
    """What will run: derived from the spec alone, so a dry run shows exactly what a submission would do."""

    strategy: Strategy
    strategy_reason: str
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
    argv: list[str] = Field(default_factory=list)
    resume_path: str | None = None

    def public(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def total_gpus(self) -> int:
        """num_gpus is per host; a multi-host job takes that many on each of its hosts."""
        return self.num_gpus * self.nnodes


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


# Rough parameter counts, enough for `auto` to tell a model that replicates well from one that does not.
APPROX_PARAMS = {
    "mlp": 1e6,
    "small_cnn": 1e6,
    "alexnet": 57e6,
    "resnet18": 11.7e6,
    "resnet50": 25.6e6,
    "vgg11": 129e6,
}
# fp32 weights, gradients and two Adam moments: 16 bytes a parameter. Above this, replicas crowd the GPU.
REPLICA_BYTES_LIMIT = 40 * 2**30


def approx_params(spec: JobSpec) -> float:
    if spec.model.arch == "embedding_bag":
        return spec.data.vocab_size * float(spec.model.kwargs.get("embedding_dim", 64))
    return APPROX_PARAMS[spec.model.arch]


def _pick_strategy(spec: JobSpec, gpus: int) -> tuple[Strategy, str]:
    parallel = spec.parallel
    if parallel.strategy is not Strategy.AUTO:
        return parallel.strategy, "chosen in the spec"
    if parallel.placement:
        return Strategy.SINGLE, "parallel.placement splits one model over CPU and GPU in one process"
    processes = (gpus or parallel.nproc_per_node or 1) * parallel.nnodes
    if processes == 1:
        return Strategy.SINGLE, "one process: no parallel wrapper needed"
    params = approx_params(spec)
    if params * 16 > REPLICA_BYTES_LIMIT:
        return Strategy.FSDP, f"~{params / 1e6:.0f}M parameters are too many to replicate: FSDP shards them"
    return Strategy.DDP, f"{processes} processes, ~{params / 1e6:.0f}M parameters: DDP keeps a replica each"


class Layout(BaseModel):
    """How a strategy uses processes: torchrun's world, and what each process does with the batch."""

    world_size: int = 1
    data_parallel_size: int = 1  # ranks the global batch is split over
    stages: int = 1
    microbatches: int = 1
    workers: int = 1  # hogwild processes behind one torchrun rank


def _one_process(parallel: ParallelSpec, strategy: Strategy) -> None:
    if (parallel.nproc_per_node or 1) > 1:
        raise ValueError(
            f"parallel.strategy={strategy} runs one process; drop parallel.nproc_per_node "
            "or use strategy ddp for several processes"
        )


def _split_stages(parallel: ParallelSpec) -> int:
    """On CPU the stages follow the split points given, else two."""
    return len(parallel.split_at) + 1 if parallel.split_at else 2


def _stage_count(parallel: ParallelSpec, default: int) -> int:
    stages = len(parallel.split_at) + 1 if parallel.split_at else default
    if parallel.split_at and stages != default:
        raise ValueError(
            f"parallel.split_at gives {stages} stages but the job has {default} devices for stages; "
            f"give {default - 1} split points or change the GPU count"
        )
    return stages


def _layout(strategy: Strategy, parallel: ParallelSpec, gpus: int) -> Layout:
    if strategy is Strategy.SINGLE:
        if gpus > 1 or (parallel.nproc_per_node or 1) > 1:
            raise ValueError(
                f"parallel.strategy=single runs one process but {max(gpus, parallel.nproc_per_node or 1)} "
                "were asked for; use strategy ddp or ask for one GPU/process"
            )
        return Layout()
    if strategy in (Strategy.DDP, Strategy.FSDP):
        world = gpus or parallel.nproc_per_node or 1
        return Layout(world_size=world, data_parallel_size=world)
    if strategy is Strategy.DP:
        if not gpus:
            raise ValueError(
                "parallel.strategy=dp drives GPUs from one process; ask for parallel.gpus, "
                "or use strategy ddp with nproc_per_node on CPU"
            )
        _one_process(parallel, strategy)
        return Layout()
    if strategy is Strategy.MODEL_PARALLEL:
        _one_process(parallel, strategy)
        if gpus == 1:
            raise ValueError(
                "parallel.strategy=model_parallel needs at least 2 GPUs for its stages; "
                "ask for more parallel.gpus or use strategy single"
            )
        return Layout(stages=_stage_count(parallel, gpus or _split_stages(parallel)))
    if strategy is Strategy.PIPELINE:
        stages = _stage_count(parallel, gpus or parallel.nproc_per_node or _split_stages(parallel))
        if stages < 2:
            raise ValueError("parallel.strategy=pipeline needs at least 2 stages (GPUs or CPU processes)")
        return Layout(world_size=stages, stages=stages, microbatches=parallel.microbatches or 2 * stages)
    if strategy is Strategy.HOGWILD:
        if gpus:
            raise ValueError("parallel.strategy=hogwild trains in CPU processes; drop parallel.gpus/num_gpus")
        return Layout(workers=parallel.nproc_per_node or 2)
    raise ValueError(f"parallel.strategy={strategy} cannot be planned")


def _spanning(layout: Layout, strategy: Strategy, nnodes: int) -> Layout:
    """Each of nnodes hosts runs the one-host layout; only data-parallel strategies span hosts."""
    if nnodes == 1:
        return layout
    if strategy not in (Strategy.DDP, Strategy.FSDP):
        raise ValueError(
            f"parallel.nnodes={nnodes} spans hosts with strategy ddp or fsdp only, and parallel.strategy="
            f"{strategy} runs on one host; use strategy ddp, or set parallel.nnodes to 1"
        )
    return layout.model_copy(
        update={
            "world_size": layout.world_size * nnodes,
            "data_parallel_size": layout.data_parallel_size * nnodes,
        }
    )


def _batches(train: TrainSpec, layout: Layout) -> tuple[int, int]:
    """Samples per process per optimizer step, and per forward/backward."""
    shards = layout.data_parallel_size * layout.workers * train.grad_accum_steps
    if train.batch_size % shards:
        raise ValueError(
            f"train.batch_size={train.batch_size} must divide evenly over {layout.data_parallel_size} "
            f"ranks x {layout.workers} workers x {train.grad_accum_steps} accumulation steps; "
            f"use a multiple of {shards}"
        )
    per_rank = train.batch_size // (layout.data_parallel_size * layout.workers)
    micro = per_rank // train.grad_accum_steps
    if layout.microbatches > micro:
        raise ValueError(
            f"parallel.microbatches={layout.microbatches} is more than the {micro} samples each stage "
            f"gets per step; use at most {micro}"
        )
    if micro % layout.microbatches:
        raise ValueError(
            f"the per-stage batch of {micro} does not split into "
            f"parallel.microbatches={layout.microbatches}; use a divisor of it"
        )
    return per_rank, micro


def resolve_plan(spec: JobSpec) -> Plan:
    """Validate how the sections fit together and derive the plan; raises ValueError naming the fix."""
    parallel = spec.parallel
    gpus = _gpu_count(parallel)
    device = "cuda" if gpus else "cpu"
    if gpus and parallel.nproc_per_node not in (None, gpus) and parallel.strategy is not Strategy.DP:
        raise ValueError(
            f"parallel.nproc_per_node={parallel.nproc_per_node} must equal the {gpus} GPUs asked for "
            "(one process per GPU); leave it out"
        )
    strategy, reason = _pick_strategy(spec, gpus)
    per_host = _layout(strategy, parallel, gpus)
    layout = _spanning(per_host, strategy, parallel.nnodes)
    check_combinations(spec, strategy, device)
    per_rank, micro = _batches(spec.train, layout)
    return Plan(
        strategy=strategy,
        strategy_reason=reason,
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
    )


class RunConfig(BaseModel):
    """Written by the worker to runs/<job>/spec.json and read by every rank of the trainer."""

    job_id: int
    attempt: int
    spec: JobSpec
    plan: Plan
