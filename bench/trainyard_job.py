"""The same workload as a Trainyard job, through the real service: API, SQL, Celery worker, torchrun, trainer.

Starts the embedded stack (SQLite database and broker, a real uvicorn and Celery worker) in a temporary
directory, submits the job, waits for it to succeed, and reads back what the trainer reported: the median
samples/s after warm-up, the peak GPU memory, and how long the job took from POST to its first step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.result import Result, emit
from bench.workload import LR, MOMENTUM, NUM_CLASSES, Workload, add_workload_args, workload_from_args
from tests.integration.jobs import metric_values, submit, wait_status
from tests.integration.servers import Stack
from trainers.spec import JobSpec

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
            "placement": "gpu",  # resident on the compute device: the CPU itself in --smoke
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


def steady_rate(rates: list[tuple[int, float]], warmup: int) -> float | None:
    """The median of the reports after warm-up (the first windows hold cudnn autotuning and compilation);
    the last report when none comes after it."""
    steady = [value for step, value in rates if step > warmup] or [value for _, value in rates[-1:]]
    return statistics.median(steady) if steady else None


def start_latency_s(client: httpx.Client, job: dict[str, Any]) -> float | None:
    """From the job's creation (the POST) to its first `running` transition, which the worker records when
    the trainer says it is about to take its first step."""
    events = client.get(f"/v1/jobs/{job['id']}/events").json()["data"]
    running = [event["at"] for event in events if event["to_status"] == "running"]
    if not running:
        return None
    started = datetime.fromisoformat(running[0]) - datetime.fromisoformat(job["created_at"])
    return started.total_seconds()


def print_diagnostics(stack: Stack, client: httpx.Client, job_id: int) -> None:
    """What the person at the GPU machine needs to see why the job did not succeed."""
    job = client.get(f"/v1/jobs/{job_id}").json()
    status = f"{job.get('status')} ({job.get('status_reason')}): {job.get('message')}"
    print(f"job {job_id}: {status}", file=sys.stderr)
    log = client.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0})
    if log.status_code == 200:
        print("rank 0 log:\n" + log.json().get("text", "")[-4000:], file=sys.stderr)
    print("worker log:\n" + stack.log("worker")[-4000:], file=sys.stderr)


def run_job(workload: Workload, gpus: int, compile_model: bool) -> Result:
    spec = job_spec(workload, gpus, compile_model)
    JobSpec.model_validate(spec)  # a spec that drifted from trainers/spec.py fails here, naming the field
    visible = ",".join(str(i) for i in range(gpus)) if workload.device == "cuda" else ""
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        workdir = Path(tmp)
        stack = Stack.start(
            workdir,
            f"sqlite:///{workdir}/trainyard.db",
            f"sqla+sqlite:///{workdir}/broker.db",
            CUDA_VISIBLE_DEVICES=visible,
        )
        try:
            with stack.client() as client:
                job = submit(client, spec)
                try:
                    job = wait_status(client, job["id"], {"succeeded"}, timeout=JOB_TIMEOUT_S)
                except AssertionError:
                    print_diagnostics(stack, client, job["id"])
                    raise
                peaks = [value for _, value in metric_values(client, job["id"], "peak_mem_mb")]
                return Result(
                    variant="Trainyard job" + (" (compile)" if compile_model else ""),
                    images_per_s=steady_rate(
                        metric_values(client, job["id"], "samples_per_s"), workload.warmup
                    ),
                    peak_mem_mb=max(peaks) if peaks and workload.device == "cuda" else None,
                    latency_s=start_latency_s(client, job),
                    world_size=gpus,
                    final_loss=job["latest_metrics"].get("loss"),
                )
        finally:
            stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(parser)
    parser.add_argument("--gpus", type=int, default=1, help="GPUs (processes on the CPU) for the job")
    parser.add_argument("--compile", action="store_true", help="performance.compile in the spec")
    args = parser.parse_args()
    emit(run_job(workload_from_args(args), args.gpus, args.compile))


if __name__ == "__main__":
    main()
