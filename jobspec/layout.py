"""How each strategy lays processes out on one host and across hosts: torchrun's world, the stages, the
data-parallel ranks. Each step raises a SpecError naming the field and the fix where the spec asks for a
layout the strategy cannot make. No torch import.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from jobspec.problems import refuse
from jobspec.spec import ParallelSpec, Strategy


class Layout(BaseModel):
    """How a strategy uses processes: torchrun's world, and what each process does with the batch."""

    world_size: int = 1
    data_parallel_size: int = 1  # ranks the global batch is split over
    stages: int = 1
    microbatches: int = 1
    workers: int = 1  # hogwild processes behind one torchrun rank


def _one_process(parallel: ParallelSpec, strategy: Strategy) -> None:
    if (parallel.nproc_per_node or 1) > 1:
        raise refuse(
            "parallel.strategy",
            f"parallel.strategy={strategy} runs one process",
            "drop parallel.nproc_per_node or use strategy ddp for several processes",
        )


def _stage_count(parallel: ParallelSpec, devices: int | None) -> int:
    """As many stages as devices; on CPU, as many as the split points give, else two."""
    given = len(parallel.split_at) + 1 if parallel.split_at else None
    if devices is not None and given is not None and given != devices:
        raise refuse(
            "parallel.split_at",
            f"parallel.split_at gives {given} stages but the job has {devices} devices for stages",
            f"give {devices - 1} split points or change the GPU count",
        )
    return devices or given or 2


def _single(parallel: ParallelSpec, gpus: int) -> Layout:
    asked = max(gpus, parallel.nproc_per_node or 1)
    if asked > 1:
        raise refuse(
            "parallel.strategy",
            f"parallel.strategy=single runs one process but {asked} were asked for",
            "use strategy ddp or ask for one GPU/process",
        )
    return Layout()


def _data_parallel(parallel: ParallelSpec, gpus: int) -> Layout:
    world = gpus or parallel.nproc_per_node or 1
    return Layout(world_size=world, data_parallel_size=world)


def _dp(parallel: ParallelSpec, gpus: int) -> Layout:
    if not gpus:
        raise refuse(
            "parallel.strategy",
            "parallel.strategy=dp drives GPUs from one process",
            "ask for parallel.gpus, or use strategy ddp with nproc_per_node on CPU",
        )
    _one_process(parallel, Strategy.DP)
    return Layout()


def _model_parallel(parallel: ParallelSpec, gpus: int) -> Layout:
    _one_process(parallel, Strategy.MODEL_PARALLEL)
    if gpus == 1:
        raise refuse(
            "parallel.strategy",
            "parallel.strategy=model_parallel needs at least 2 GPUs for its stages",
            "ask for more parallel.gpus or use strategy single",
        )
    return Layout(stages=_stage_count(parallel, gpus or None))


def _pipeline(parallel: ParallelSpec, gpus: int) -> Layout:
    stages = _stage_count(parallel, gpus or parallel.nproc_per_node)
    if stages < 2:
        raise refuse(
            "parallel.strategy",
            "parallel.strategy=pipeline needs at least 2 stages",
            "ask for 2 or more GPUs or CPU processes",
        )
    return Layout(world_size=stages, stages=stages, microbatches=parallel.microbatches or 2 * stages)


def _hogwild(parallel: ParallelSpec, gpus: int) -> Layout:
    if gpus:
        raise refuse(
            "parallel.strategy",
            "parallel.strategy=hogwild trains in CPU processes",
            "drop parallel.gpus/num_gpus",
        )
    return Layout(workers=parallel.nproc_per_node or 2)


# One host's layout per strategy, from the parallel section and the GPUs it asks for.
LAYOUTS: dict[Strategy, Callable[[ParallelSpec, int], Layout]] = {
    Strategy.SINGLE: _single,
    Strategy.DDP: _data_parallel,
    Strategy.FSDP: _data_parallel,
    Strategy.DP: _dp,
    Strategy.MODEL_PARALLEL: _model_parallel,
    Strategy.PIPELINE: _pipeline,
    Strategy.HOGWILD: _hogwild,
}


def spanning(layout: Layout, strategy: Strategy, nnodes: int) -> Layout:
    """Each of nnodes hosts runs the one-host layout; only data-parallel strategies span hosts."""
    if nnodes == 1:
        return layout
    if strategy not in (Strategy.DDP, Strategy.FSDP):
        raise refuse(
            "parallel.nnodes",
            f"parallel.nnodes={nnodes} spans hosts with strategy ddp or fsdp only, and "
            f"parallel.strategy={strategy} runs on one host",
            "use strategy ddp, or set parallel.nnodes to 1",
        )
    return layout.model_copy(
        update={
            "world_size": layout.world_size * nnodes,
            "data_parallel_size": layout.data_parallel_size * nnodes,
        }
    )
