"""Pipeline vs model parallel (issue 4, target 3): ResNet-50 over two GPUs, with and without micro-batches.

    python -m bench.pipeline [--microbatches 4,8] [--split-at default,layer2] [--compile] [--steps N]
        [--smoke]

One service runs, one after another: strategy model_parallel on GPUs [0, 1] (one process, the stages run in
turn, so one GPU idles while the other works), then strategy pipeline on the same GPUs with each micro-batch
count (stages overlap on successive micro-batches), at each --split-at module (the second stage starts
there; `default`, the default, is the planner's own split), so a better split shows up beside the one in use.
Same global batch (two GPUs' worth of bench.run's per-GPU batch), bf16, channels_last, data on the GPU.
With --compile the pipeline jobs set performance.compile (each stage compiles), and model_parallel runs
compiled too, beside the eager one that stays the base of every ratio.
Target: pipeline >= 1.4x naive (eager) model_parallel's img/s.
On the CPU (--smoke) the stages are CPU devices: model_parallel in one process, pipeline in two gloo ranks.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bench.budget import Budget
from bench.report import record, section
from bench.result import Result, exit_code
from bench.service import Service, run_series
from bench.table import markdown, name, number, ratio, times
from bench.trainyard_job import job_spec
from bench.workload import Workload, preset

STAGES = 2
JOB_CAP_S = 150
COMPILED_JOB_CAP_S = 300  # each stage compiles its forward and backward during the warm-up
BUDGET_S = 150
# Micro-batches of 32 and 64 images on the GPU; on the CPU the batch is 8, and a ResNet-50 BatchNorm at
# 32 px sees 1x1 maps, so a micro-batch needs at least 2 images.
GPU_MICROBATCHES, SMOKE_MICROBATCHES = (4, 8), (2, 4)
DEFAULT_SPLIT = "default"
COLUMNS = ("strategy", "img/s", "x eager model_parallel", "peak MB", "POST→first step s")


def split_spec(
    workload: Workload,
    strategy: str,
    microbatches: int | None,
    split_at: str | None = None,
    compile_model: bool = False,
) -> dict[str, Any]:
    """The bench job with its parallel section replaced: two GPUs (or two CPU stages) for one model."""
    spec = job_spec(workload, STAGES, compile_model)
    parallel: dict[str, Any] = {"strategy": strategy}
    if workload.device == "cuda":
        parallel["gpus"] = list(range(STAGES))
    elif strategy == "pipeline":
        parallel["nproc_per_node"] = STAGES  # one gloo process per stage
    if microbatches is not None:
        parallel["microbatches"] = microbatches
    if split_at is not None:
        parallel["split_at"] = [split_at]
    return {**spec, "name": f"bench-{workload.arch}-{strategy}", "parallel": parallel}


def counts(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def split_points(text: str) -> tuple[str | None, ...]:
    """Module names to start stage 2 at; `default` (None) leaves the split to the planner."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    return tuple(None if part == DEFAULT_SPLIT else part for part in parts)


def variant_name(strategy: str, microbatches: int | None, split_at: str | None, compiled: bool) -> str:
    details = [f"{microbatches} micro-batches"] if microbatches is not None else []
    details += [f"split at {split_at}"] if split_at is not None else []
    details += ["compiled"] if compiled else []
    return f"{strategy} ({', '.join(details)})" if details else strategy


def run_all(
    service: Service,
    workload: Workload,
    microbatches: tuple[int, ...],
    splits: tuple[str | None, ...],
    compile_model: bool,
    budget: Budget,
) -> list[Result]:
    """The naive eager model_parallel first, the base of every ratio; compiled, it runs again beside."""
    on_gpu = workload.device == "cuda"
    variants: list[tuple[str, int | None, str | None, bool]] = [("model_parallel", None, None, False)]
    variants += [("model_parallel", None, None, True)] if compile_model else []
    variants += [("pipeline", m, split, compile_model) for split in splits for m in microbatches]
    return [
        service.result(
            variant_name(strategy, m, split, compiled),
            split_spec(workload, strategy, m, split, compiled),
            budget,
            COMPILED_JOB_CAP_S if compiled else JOB_CAP_S,
            workload.warmup,
            on_gpu,
        )
        for strategy, m, split, compiled in variants
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatches", type=counts, help="micro-batch counts for the pipeline jobs")
    parser.add_argument(
        "--split-at",
        type=split_points,
        default=(None,),
        help=f"modules to start stage 2 at, one pipeline job each; {DEFAULT_SPLIT!r} is the planner's split",
    )
    parser.add_argument(
        "--compile", action="store_true", help="compile the pipelines; add compiled model_parallel"
    )
    parser.add_argument("--steps", type=int, help="timed steps (after warm-up) per job")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (gloo); prints only")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="skip jobs past this")
    args = parser.parse_args()
    workload = preset("resnet50", smoke=args.smoke, steps=args.steps)
    microbatches = args.microbatches or (SMOKE_MICROBATCHES if args.smoke else GPU_MICROBATCHES)
    budget = Budget(args.budget_s)
    device, results = run_series(
        STAGES,
        workload.device == "cuda",
        lambda service: run_all(service, workload, microbatches, args.split_at, args.compile, budget),
    )
    base = results[0].images_per_s
    rows = [
        [
            name(r),
            number(r.images_per_s, 0),
            times(ratio(r.images_per_s, base)),
            number(r.peak_mem_mb, 0),
            number(r.latency_s, 1),
        ]
        for r in results
    ]
    note = (
        f"resnet50 {workload.image_size} px, global batch {STAGES * workload.batch_per_rank}, bf16, "
        f"channels_last, default stage split unless named, {workload.warmup} warm-up + "
        f"{workload.steps} timed steps."
    )
    record(section(device, STAGES, f"{note}\n\n{markdown(COLUMNS, rows)}"), args.smoke)
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
