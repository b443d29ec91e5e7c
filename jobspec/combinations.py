"""Options that are each valid alone but do not work together. Each is refused when the spec is planned, with
the field and the fix named, rather than failing once the job runs or being quietly ignored by it.

Checks here see the resolved strategy and device (auto already picked). What depends on the model or the
dataset is in jobspec/model_fit.py. No torch import.
"""

from __future__ import annotations

from collections.abc import Iterator

from jobspec.problems import Problem
from jobspec.spec import (
    CudaGraphs,
    DataPlacement,
    JobSpec,
    OnNonFinite,
    ParallelSpec,
    Precision,
    Schedule,
    Strategy,
)


def _devices(parallel: ParallelSpec) -> Iterator[Problem]:
    if (
        parallel.gpus is not None
        and parallel.num_gpus is not None
        and parallel.num_gpus != len(parallel.gpus)
    ):
        yield Problem("parallel.gpus", "parallel.gpus and parallel.num_gpus disagree", "give one of them")
    if parallel.host is not None and parallel.nnodes > 1:
        yield Problem(
            "parallel.host", "parallel.host pins a one-host job", "drop it, or set parallel.nnodes to 1"
        )


def _parallel_options(parallel: ParallelSpec, strategy: Strategy, device: str) -> Iterator[Problem]:
    if parallel.sync_batchnorm and strategy is not Strategy.DDP:
        yield Problem(
            "parallel.sync_batchnorm",
            "parallel.sync_batchnorm needs parallel.strategy=ddp",
            "drop it or switch to ddp",
        )
    elif parallel.sync_batchnorm and device == "cpu":
        yield Problem(
            "parallel.sync_batchnorm",
            "parallel.sync_batchnorm runs on GPUs only (torch's SyncBatchNorm has no CPU kernel)",
            "drop it or ask for parallel.gpus",
        )
    if parallel.placement and strategy is not Strategy.SINGLE:
        yield Problem(
            "parallel.placement",
            "parallel.placement (CPU/GPU hybrid) works with strategy single or auto",
            "drop parallel.placement or set parallel.strategy to single",
        )
    if parallel.split_at and strategy not in (Strategy.MODEL_PARALLEL, Strategy.PIPELINE):
        yield Problem(
            "parallel.split_at", "parallel.split_at is for strategy model_parallel or pipeline", "drop it"
        )
    if parallel.microbatches and strategy is not Strategy.PIPELINE:
        yield Problem("parallel.microbatches", "parallel.microbatches is for strategy pipeline", "drop it")


def _wrap(spec: JobSpec, strategy: Strategy) -> Iterator[Problem]:
    """Block classes are what fsdp shards and activation checkpointing recomputes, one at a time."""
    if spec.parallel.wrap and strategy is not Strategy.FSDP and not spec.performance.activation_checkpointing:
        yield Problem(
            "parallel.wrap",
            "parallel.wrap names the blocks that strategy fsdp shards and activation checkpointing "
            "recomputes, and this job does neither",
            "drop it, use strategy fsdp, or turn on performance.activation_checkpointing",
        )


def _device_options(spec: JobSpec, device: str) -> Iterator[Problem]:
    if device == "cpu" and spec.precision is Precision.FP16:
        written = spec.precision_written
        means = "" if written == Precision.FP16 else " (fp16 compute with loss scaling)"
        yield Problem(
            "precision",
            f"precision {written!r}{means} needs a GPU",
            "on CPU use fp32 (or bf16), or ask for parallel.gpus",
        )
    if device == "cpu" and spec.parallel.placement:
        yield Problem(
            "parallel.placement",
            "parallel.placement puts the modules it names on the CPU and the rest on a GPU, and this job has "
            "no GPU, so it would change nothing",
            "drop parallel.placement, or ask for parallel.gpus",
        )
    if device == "cpu" and spec.data is not None and spec.data.placement is DataPlacement.GPU:
        yield Problem(
            "data.placement",
            "data.placement=gpu needs a GPU, and this job runs on the CPU",
            "drop it (auto) or ask for parallel.gpus",
        )


def _plateau_evaluates(spec: JobSpec) -> Iterator[Problem]:
    """plateau decays on eval_loss alone: without evaluations it would keep the lr constant, unannounced.
    Whether there is anything to evaluate on is the dataset's question (jobspec/model_fit.py)."""
    if spec.train.schedule is Schedule.PLATEAU and spec.train.eval_every_epochs == 0:
        yield Problem(
            "train.eval_every_epochs",
            "train.eval_every_epochs=0 turns evaluation off, and train.schedule=plateau decays the lr only "
            "when eval_loss stops improving",
            "set train.eval_every_epochs to 1 or more (plateau_patience counts evaluations) "
            "or choose another train.schedule",
        )


def _hogwild_options(spec: JobSpec, strategy: Strategy) -> Iterator[Problem]:
    """What hogwild's worker processes (trainers/hogwild_worker.py) would not do, though the loop does."""
    if strategy is not Strategy.HOGWILD:
        return
    # (asked, field, the option as shown, why the workers cannot, the fix)
    unsupported = [
        (
            spec.train.schedule is Schedule.PLATEAU,
            "train.schedule",
            "train.schedule=plateau",
            "the workers set their lr from the step alone and never see the main process's evaluations",
            "choose another train.schedule",
        ),
        (
            spec.metrics.tensorboard,
            "metrics.tensorboard",
            "metrics.tensorboard",
            "no TensorBoard files are written",
            "drop it (metrics still reach GET /v1/jobs/{id}/metrics)",
        ),
        (
            spec.profile.steps > 0,
            "profile.steps",
            "profile.steps",
            "torch.profiler cannot follow the worker processes",
            "set it to 0",
        ),
        (
            spec.performance.compile,
            "performance.compile",
            "performance.compile",
            "the workers train the model uncompiled",
            "drop it",
        ),
    ]
    for asked, field, option, why, fix in unsupported:
        if asked:
            yield Problem(
                field,
                f"{option} is not supported by parallel.strategy=hogwild: {why}",
                f"{fix}, or use strategy ddp",
            )


def graph_blockers(spec: JobSpec, strategy: Strategy, device: str) -> list[tuple[str, str]]:
    """Why this job's training step cannot be captured whole in one CUDA graph, each as (why, fix). A graph
    replays a fixed sequence of GPU kernels: nothing in the step may run on the CPU, wait for the host or
    change shape, and a strategy's own scheduling (stages, shards, threads) would have to be captured too."""
    blockers = []
    if device != "cuda":
        blockers.append(("CUDA graphs need a GPU", "ask for parallel.gpus"))
    if strategy not in (Strategy.SINGLE, Strategy.DDP):
        blockers.append(
            (f"only strategies single and ddp are captured, not {strategy}", "use strategy single or ddp")
        )
    if spec.parallel.placement:
        blockers.append(("parallel.placement keeps modules on the CPU", "drop parallel.placement"))
    if spec.program is not None:
        blockers.append(("a program runs its own training loop", "capture inside the program"))
    if spec.precision is Precision.FP16:
        blockers.append(("fp16's loss scaler checks on the host for overflow every step", "use bf16"))
    if spec.train.on_nonfinite is OnNonFinite.SKIP_STEP:
        blockers.append(
            ("train.on_nonfinite=skip_step decides on the host whether to update", "use fail or warn")
        )
    if spec.performance.activation_checkpointing:
        blockers.append(
            (
                "activation checkpointing saves and restores the RNG state on the host",
                "turn performance.activation_checkpointing off",
            )
        )
    return blockers


def _cuda_graphs(spec: JobSpec, strategy: Strategy, device: str) -> Iterator[Problem]:
    if spec.performance.cuda_graphs is CudaGraphs.ON:
        for why, fix in graph_blockers(spec, strategy, device):
            yield Problem(
                "performance.cuda_graphs",
                f"performance.cuda_graphs=on cannot capture this job's training step: {why}",
                f"{fix}, or set performance.cuda_graphs to off or auto",
            )


def combination_problems(spec: JobSpec, strategy: Strategy, device: str) -> Iterator[Problem]:
    """Every option that does not fit the others, each with its fix."""
    yield from _devices(spec.parallel)
    yield from _parallel_options(spec.parallel, strategy, device)
    yield from _wrap(spec, strategy)
    yield from _device_options(spec, device)
    yield from _plateau_evaluates(spec)
    yield from _hogwild_options(spec, strategy)
    yield from _cuda_graphs(spec, strategy, device)


def plan_warnings(spec: JobSpec, strategy: Strategy, device: str) -> list[str]:
    """What runs as asked but probably not as the user hopes; the plan carries these to the dry run."""
    warnings = []
    if spec.performance.cuda_graphs is CudaGraphs.AUTO:
        warnings += [
            f"performance.cuda_graphs=auto: this job trains without CUDA graphs, as {why} ({fix})"
            for why, fix in graph_blockers(spec, strategy, device)
        ]
    if device == "cpu" and spec.precision is Precision.BF16:
        warnings.append(
            f"precision {spec.precision_written!r} on the CPU: most CPUs have no bf16 matrix units and "
            "emulate it, so this usually trains several times slower than fp32; use fp32 on the CPU"
        )
    return warnings
