"""Multi-GPU scaling (issue 8): the workload as Trainyard jobs on 1, 2, 4 (8) GPUs, DDP and DataParallel.

    python -m bench.scaling --workload alexnet|resnet50 --gpus 1,2,4[,8] [--steps N] [--smoke]

One service runs every job, one after another, so no two share a GPU. Each job keeps the per-GPU batch of
bench.run (global batch = per-GPU batch x GPUs: weak scaling), bf16, channels_last, data resident on the GPU.
The 1-GPU job (strategy single) is the base of both columns: speed-up = img/s(n) / img/s(1) and efficiency =
img/s(n) / (n x img/s(1)). DataParallel (strategy dp: one process scattering each batch over the GPUs) runs
beside DDP for contrast. Target: >= 95 % efficiency for ResNet-50 on 8 GPUs.
"""

from __future__ import annotations

import argparse
import sys

from bench.budget import Budget
from bench.report import record, section
from bench.result import SKIPPED, Result, exit_code
from bench.service import Service, run_series
from bench.table import markdown, name, number, percent, ratio, times
from bench.trainyard_job import job_spec, with_sections
from bench.workload import ARCHS, Workload, preset

JOB_CAP_S = 150  # one job: start (~15 s), warm-up, timed steps; a hung job must not eat the whole call
BUDGET_S = 270
COLUMNS = ("strategy", "GPUs", "img/s", "speed-up", "efficiency", "peak MB", "POST→first step s")


def gpu_counts(text: str) -> list[int]:
    counts = sorted({int(part) for part in text.split(",") if part.strip()})
    if not counts or counts[0] != 1 or any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"--gpus {text!r}: give a list that starts at 1, like 1,2,4")
    return counts


def scaling_rows(results: list[Result], base: float | None) -> list[list[str]]:
    """Speed-up and efficiency against the 1-GPU job, for every row of either strategy."""
    rows = []
    for result in results:
        speedup = ratio(result.images_per_s, base)
        rows.append(
            [
                name(result),
                str(result.world_size),
                number(result.images_per_s, 0),
                times(speedup),
                percent(None if speedup is None else speedup / result.world_size),
                number(result.peak_mem_mb, 0),
                number(result.latency_s, 1),
            ]
        )
    return rows


def run_all(service: Service, workload: Workload, counts: list[int], budget: Budget) -> list[Result]:
    on_gpu = workload.device == "cuda"

    def job(strategy: str, gpus: int) -> Result:
        if strategy == "dp" and not on_gpu:
            # DataParallel drives GPUs from one process; the plan refuses it on the CPU.
            return Result(strategy, None, None, world_size=gpus, error=f"{SKIPPED}: dp needs GPUs")
        spec = with_sections(job_spec(workload, gpus, False), parallel={"strategy": strategy})
        if strategy == "dp":
            spec["parallel"].pop("nproc_per_node", None)
        return service.result(strategy, spec, budget, JOB_CAP_S, workload.warmup, on_gpu)

    results = [job("single", 1)]
    for strategy in ("ddp", "dp"):
        results += [job(strategy, n) for n in counts if n > 1]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=ARCHS, required=True)
    parser.add_argument("--gpus", type=gpu_counts, default=[1, 2, 4], help="GPU counts, like 1,2,4,8")
    parser.add_argument("--steps", type=int, help="timed steps (after warm-up) per job")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, CPU processes (gloo); prints only")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="skip jobs past this")
    args = parser.parse_args()
    workload = preset(args.workload, smoke=args.smoke, steps=args.steps)
    budget = Budget(args.budget_s)
    device, results = run_series(
        max(args.gpus),
        workload.device == "cuda",
        lambda service: run_all(service, workload, args.gpus, budget),
    )
    base = results[0].images_per_s
    note = (
        f"{workload.arch} {workload.image_size} px, {workload.batch_per_rank} images per GPU, bf16, "
        f"channels_last, {workload.warmup} warm-up + {workload.steps} timed steps; speed-up and efficiency "
        "against the 1-GPU job (strategy single)."
    )
    table = markdown(COLUMNS, scaling_rows(results, base))
    record(section(device, max(args.gpus), f"{note}\n\n{table}"), args.smoke)
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
