"""The same workload as a Trainyard job, through the real service: API, SQL, Celery worker, torchrun, trainer.

`job_spec` is the one spelling of the workload as a job; the other benchmarks vary it with `with_sections`.
Run as a child of `bench.run`, this starts a service (bench.service), runs the job and reports the median
samples/s after warm-up, the peak GPU memory, and how long the job took from POST to its first step.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.result import Result, emit
from bench.service import JobFailed, Service, job_result
from bench.workload import LR, MOMENTUM, NUM_CLASSES, Workload, add_workload_args, workload_from_args

# Starting torchrun, building the data set and compiling fit well inside this; a hung job fails the run.
JOB_TIMEOUT_S = 480
# Epochs of several steps at least; cheap, since the trainer stores 32 px images and resizes each batch.
MIN_SAMPLES = 4096


def job_spec(workload: Workload, gpus: int, compile_model: bool) -> dict[str, Any]:
    """The Trainyard spelling of the workload the loops run; on the CPU (--smoke) `gpus` counts processes."""
    on_gpu = workload.device == "cuda"
    global_batch = workload.batch_per_rank * gpus
    devices: dict[str, Any] = {"gpus": list(range(gpus))} if on_gpu else {"nproc_per_node": gpus}
    return {
        "name": f"bench-{workload.arch}-{gpus}{'gpu' if on_gpu else 'cpu'}",
        "model": {"arch": workload.arch},
        "data": {
            "dataset": "synthetic",
            "image_size": workload.image_size,
            "num_samples": max(MIN_SAMPLES, 8 * global_batch),
            "num_classes": NUM_CLASSES,
            "val_fraction": 0.0,
            # Resident on the GPU; on the CPU (--smoke) auto keeps it in host memory, where it is anyway.
            "placement": "gpu" if on_gpu else "auto",
        },
        "train": {
            "max_steps": workload.warmup + workload.steps,
            "batch_size": global_batch,
            "optimizer": "sgd",
            "lr": LR,
            "momentum": MOMENTUM,
            "seed": 0,
            "eval_every_epochs": 0,
        },
        "parallel": {"strategy": "ddp" if gpus > 1 else "single", **devices},
        "precision": "bf16",
        "performance": {"channels_last": True, "compile": compile_model},
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 0, "save_final": False},
        # Every step on the CPU, so a smoke run of a few steps still reports after its warm-up.
        "metrics": {"every_n_steps": 10 if on_gpu else 1},
    }


def with_sections(spec: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    """The spec with some sections' fields replaced: how the other benchmarks vary this one job."""
    return {**spec, **{key: {**spec.get(key, {}), **fields} for key, fields in sections.items()}}


def run_job(workload: Workload, gpus: int, compile_model: bool) -> Result:
    on_gpu = workload.device == "cuda"
    variant = "Trainyard job" + (" (compile)" if compile_model else "")
    spec = job_spec(workload, gpus, compile_model)
    with Service.started(gpus, on_gpu) as service:
        try:
            finished = service.run(spec, JOB_TIMEOUT_S)
        except JobFailed:
            raise SystemExit(1) from None  # the parent records the failed row; the diagnostics are printed
        return job_result(variant, finished, workload.warmup, on_gpu, gpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(parser)
    parser.add_argument("--gpus", type=int, default=1, help="GPUs (processes on the CPU) for the job")
    parser.add_argument("--compile", action="store_true", help="performance.compile in the spec")
    args = parser.parse_args()
    emit(run_job(workload_from_args(args), args.gpus, args.compile))


if __name__ == "__main__":
    main()
