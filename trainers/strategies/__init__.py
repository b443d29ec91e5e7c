"""Pick the parallel strategy the plan names."""

from __future__ import annotations

from collections.abc import Callable

from trainers.dist_env import DistEnv
from trainers.spec import ParallelSpec, Strategy
from trainers.strategies.base import ParallelStrategy, Reduce
from trainers.strategies.ddp import DDPStrategy
from trainers.strategies.dp import DataParallelStrategy
from trainers.strategies.fsdp import FSDPStrategy
from trainers.strategies.hogwild import HogwildStrategy
from trainers.strategies.model_parallel import ModelParallelStrategy
from trainers.strategies.pipeline import PipelineStrategy
from trainers.strategies.single import SingleDeviceStrategy

_STRATEGIES: dict[Strategy, Callable[[DistEnv, ParallelSpec], ParallelStrategy]] = {
    Strategy.SINGLE: lambda env, parallel: SingleDeviceStrategy(env, parallel.placement),
    Strategy.DP: lambda env, parallel: DataParallelStrategy(env),
    # The loop fills in split_at (per-arch defaults) and microbatches from the plan before building these.
    Strategy.MODEL_PARALLEL: lambda env, parallel: ModelParallelStrategy(env, parallel.split_at or []),
    Strategy.PIPELINE: lambda env, parallel: PipelineStrategy(
        env, parallel.split_at or [], parallel.microbatches or 1
    ),
    Strategy.DDP: lambda env, parallel: DDPStrategy(env, sync_batchnorm=parallel.sync_batchnorm),
    Strategy.FSDP: lambda env, parallel: FSDPStrategy(env),
    Strategy.HOGWILD: lambda env, parallel: HogwildStrategy(env),
}


def build_strategy(strategy: Strategy, parallel: ParallelSpec, env: DistEnv) -> ParallelStrategy:
    if strategy not in _STRATEGIES:
        names = ", ".join(_STRATEGIES)
        raise ValueError(f"strategy {strategy!r} is not implemented by the trainer; use one of {names}")
    return _STRATEGIES[strategy](env, parallel)


__all__ = ["ParallelStrategy", "Reduce", "build_strategy"]
