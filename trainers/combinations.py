"""Options that are each valid alone but do not work together. Each is refused when the spec is planned, with
the field and the fix named, rather than failing once the job runs or being quietly ignored by it.

Checks here see the resolved strategy and device (auto already picked), so a check that depends on the
layout (processes, nodes, GPUs) belongs here too. No torch import.
"""

from __future__ import annotations

from trainers.catalog import DATASETS_WITH_TEST_SPLIT, SPARSE_ARCHS, TOKEN_ARCHS, TOKEN_DATASETS
from trainers.spec import DataPlacement, JobSpec, Optimizer, Precision, Schedule, Strategy


def _parallel_options(spec: JobSpec, strategy: Strategy, device: str) -> None:
    parallel = spec.parallel
    if parallel.sync_batchnorm and strategy is not Strategy.DDP:
        raise ValueError("parallel.sync_batchnorm needs parallel.strategy=ddp; drop it or switch to ddp")
    if parallel.sync_batchnorm and device == "cpu":
        raise ValueError(
            "parallel.sync_batchnorm runs on GPUs only (torch's SyncBatchNorm has no CPU kernel); "
            "drop it or ask for parallel.gpus"
        )
    if parallel.placement and strategy is not Strategy.SINGLE:
        raise ValueError("parallel.placement (CPU/GPU hybrid) works with strategy single or auto")
    if parallel.split_at and strategy not in (Strategy.MODEL_PARALLEL, Strategy.PIPELINE):
        raise ValueError("parallel.split_at is for strategy model_parallel or pipeline; drop it")
    if parallel.microbatches and strategy is not Strategy.PIPELINE:
        raise ValueError("parallel.microbatches is for strategy pipeline; drop it")


def _device_options(spec: JobSpec, device: str) -> None:
    if device == "cpu" and spec.precision is Precision.FP16:
        raise ValueError("precision fp16 needs a GPU; on CPU use bf16 or fp32, or ask for parallel.gpus")
    if device == "cpu" and spec.data.placement is DataPlacement.GPU:
        raise ValueError(
            "data.placement=gpu needs a GPU, and this job runs on the CPU; "
            "drop it (auto) or ask for parallel.gpus"
        )


def _model_fits_data(spec: JobSpec) -> None:
    arch, dataset = spec.model.arch, spec.data.dataset
    if arch in TOKEN_ARCHS and dataset not in TOKEN_DATASETS:
        raise ValueError(
            f"model.arch {arch} takes bags of token ids, but data.dataset {dataset} holds images; "
            f"use data.dataset {' or '.join(TOKEN_DATASETS)}, or an image model"
        )
    if dataset in TOKEN_DATASETS and arch not in TOKEN_ARCHS:
        raise ValueError(
            f"data.dataset {dataset} holds bags of token ids, which {arch} cannot read; "
            f"use model.arch {' or '.join(TOKEN_ARCHS)}, or an image dataset"
        )
    if arch in TOKEN_ARCHS and spec.data.image_size is not None:
        raise ValueError(f"data.image_size sizes images, and {arch} reads token ids; drop it")


def _model_fits_strategy(spec: JobSpec, strategy: Strategy) -> None:
    arch, optimizer = spec.model.arch, spec.train.optimizer
    if arch not in SPARSE_ARCHS:
        return
    if strategy is Strategy.PIPELINE:
        raise ValueError(
            f"parallel.strategy=pipeline cannot split {arch} (its sparse table and dense head "
            "train with different optimizers); use strategy single with parallel.placement"
        )
    # fsdp trains the table with dense gradients (sparse ones have no sharded form): any optimizer fits.
    if optimizer is not Optimizer.SGD and strategy is not Strategy.FSDP:
        raise ValueError(
            f"train.optimizer={optimizer} cannot take the sparse gradients of {arch}'s embedding table "
            "(Adam keeps two dense moments, tripling the table's memory); use train.optimizer sgd, "
            "or parallel.strategy fsdp, which trains the table with dense gradients"
        )


def _plateau_has_evaluations(spec: JobSpec) -> None:
    """plateau decays on eval_loss alone: without evaluations it would keep the lr constant, unannounced."""
    train, data = spec.train, spec.data
    if train.schedule is not Schedule.PLATEAU:
        return
    if train.eval_every_epochs == 0:
        raise ValueError(
            "train.eval_every_epochs=0 turns evaluation off, and train.schedule=plateau decays the lr only "
            "when eval_loss stops improving; set train.eval_every_epochs to 1 or more "
            "(plateau_patience counts evaluations) or choose another train.schedule"
        )
    if data.val_fraction == 0 and data.dataset not in DATASETS_WITH_TEST_SPLIT:
        raise ValueError(
            f"data.val_fraction=0 holds nothing of {data.dataset} out to evaluate on, and "
            "train.schedule=plateau decays the lr only when eval_loss stops improving; set "
            "data.val_fraction above 0 or choose another train.schedule"
        )


def _hogwild_options(spec: JobSpec, strategy: Strategy) -> None:
    """What hogwild's worker processes (trainers/hogwild_worker.py) would not do, though the loop does."""
    if strategy is not Strategy.HOGWILD:
        return
    unsupported = {
        "train.schedule=plateau": (
            spec.train.schedule is Schedule.PLATEAU,
            "the workers set their lr from the step alone and never see the main process's evaluations; "
            "choose another train.schedule",
        ),
        "metrics.tensorboard": (
            spec.metrics.tensorboard,
            "no TensorBoard files are written; drop it (metrics still reach GET /v1/jobs/{id}/metrics)",
        ),
        "profile.steps": (
            spec.profile.steps > 0,
            "torch.profiler cannot follow the worker processes; set it to 0",
        ),
        "performance.compile": (
            spec.performance.compile,
            "the workers train the model uncompiled; drop it",
        ),
    }
    for option, (asked, why) in unsupported.items():
        if asked:
            raise ValueError(
                f"{option} is not supported by parallel.strategy=hogwild: {why}, or use strategy ddp"
            )


def check_combinations(spec: JobSpec, strategy: Strategy, device: str) -> None:
    """Raises ValueError naming the first option that does not fit the others, and the fix."""
    _parallel_options(spec, strategy, device)
    _device_options(spec, device)
    _model_fits_data(spec)
    _model_fits_strategy(spec, strategy)
    _plateau_has_evaluations(spec)
    _hogwild_options(spec, strategy)
