"""Pick the parallel strategy the plan names."""

from __future__ import annotations

from collections.abc import Callable

import torch

from jobspec.spec import ParallelSpec, Precision, Strategy
from trainers.dist_env import DistEnv
from trainers.strategies.base import ParallelStrategy
from trainers.strategies.process_group import GroupOptions

Builder = Callable[[DistEnv, ParallelSpec, GroupOptions, Precision], ParallelStrategy]


def _single(
    env: DistEnv, parallel: ParallelSpec, group: GroupOptions, precision: Precision
) -> ParallelStrategy:
    from trainers.strategies.single import SingleDeviceStrategy

    return SingleDeviceStrategy(env, parallel.placement)


def _dp(env: DistEnv, parallel: ParallelSpec, group: GroupOptions, precision: Precision) -> ParallelStrategy:
    from trainers.strategies.dp import DataParallelStrategy

    return DataParallelStrategy(env)


def _model_parallel(
    env: DistEnv, parallel: ParallelSpec, group: GroupOptions, precision: Precision
) -> ParallelStrategy:
    from trainers.strategies.model_parallel import ModelParallelStrategy

    return ModelParallelStrategy(env, parallel.split_at or [])


def _pipeline(
    env: DistEnv, parallel: ParallelSpec, group: GroupOptions, precision: Precision
) -> ParallelStrategy:
    from trainers.strategies.pipeline import PipelineStrategy

    return PipelineStrategy(env, group, parallel.split_at or [], parallel.microbatches or 1)


def _ddp(env: DistEnv, parallel: ParallelSpec, group: GroupOptions, precision: Precision) -> ParallelStrategy:
    from trainers.strategies.ddp import DDPStrategy

    return DDPStrategy(env, group, sync_batchnorm=parallel.sync_batchnorm)


def _fsdp(
    env: DistEnv, parallel: ParallelSpec, group: GroupOptions, precision: Precision
) -> ParallelStrategy:
    from trainers.strategies.fsdp import FSDPStrategy

    # bf16 alone: blocks gathered and computed in bf16 (fsdp.py says why not fp16).
    param_dtype = torch.bfloat16 if precision is Precision.BF16 else None
    return FSDPStrategy(env, group, parallel.wrap, param_dtype)


def _hogwild(
    env: DistEnv, parallel: ParallelSpec, group: GroupOptions, precision: Precision
) -> ParallelStrategy:
    from trainers.strategies.hogwild import HogwildStrategy

    return HogwildStrategy(env)


# Each strategy's module is imported only when a job uses it: fsdp pulls in torch.distributed.checkpoint
# and DTensor, pipeline torch._dynamo, seconds of import that every other job would pay at start-up.
# The loop fills in split_at (per-arch defaults) and microbatches from the plan before building these;
# the group options serve the strategies whose ranks join a process group (ddp, fsdp, pipeline), the
# plan's precision fsdp's gathers.
_STRATEGIES: dict[Strategy, Builder] = {
    Strategy.SINGLE: _single,
    Strategy.DP: _dp,
    Strategy.MODEL_PARALLEL: _model_parallel,
    Strategy.PIPELINE: _pipeline,
    Strategy.DDP: _ddp,
    Strategy.FSDP: _fsdp,
    Strategy.HOGWILD: _hogwild,
}


def build_strategy(
    strategy: Strategy,
    parallel: ParallelSpec,
    env: DistEnv,
    group: GroupOptions,
    precision: Precision = Precision.FP32,
) -> ParallelStrategy:
    if strategy not in _STRATEGIES:
        names = ", ".join(_STRATEGIES)
        raise ValueError(f"strategy {strategy!r} is not implemented by the trainer; use one of {names}")
    return _STRATEGIES[strategy](env, parallel, group, precision)


__all__ = ["GroupOptions", "ParallelStrategy", "build_strategy"]
