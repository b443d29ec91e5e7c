"""performance.cuda_graphs on launch-bound models (issue 21): the trainer with the whole step captured, the
trainer eager, and a hand-written eager loop, on four small workloads, one GPU or DDP over several.

    python -m bench.graphs [--workloads resnet18,small_cnn,mlp,gpt] [--gpus N] [--warmup N] [--steps N]
                           [--smoke]

Workloads (bench/graphs_loop.py SHAPES): ResNet-18 and a small BatchNorm convnet on 32 px images (batch 128),
a 3-layer MLP on 32 px images (batch 256), a 4-layer GPT of width 256 over 128 tokens (batch 32); bf16, fused
optimizers, batches resident on the GPU. Throughput is the median of the trainer's samples_per_s reports
after the warm-up (steps already taken between two reports, host included), and the loop's timed steps.
The loss column compares the captured run's reported losses with the eager run's, step for step, from the
same seed (the largest difference, over the first loss), and a second eager run's with the first: the
noise floor. With --gpus N > 1 every row is DDP over N GPUs with the per-GPU batch above (the job's
strategy ddp; the loop under torchrun, wrapped in DistributedDataParallel), so the captured step holds the
gradients' all-reduce.
Target: captured >= 1.3x the hand-written loop, same curve to bf16 tolerance. --smoke runs every row on the
CPU with cuda_graphs off (the planner refuses it there): nothing is timed, nothing is recorded.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.budget import Budget
from bench.graphs_loop import (
    CNN_CHANNELS,
    GPT_SHAPE,
    MLP_DEPTH,
    MLP_HIDDEN,
    NUM_CLASSES,
    SHAPES,
    SMOKE_SHAPES,
)
from bench.report import record, section
from bench.result import SKIPPED, parse
from bench.run import CHILD_TIMEOUT_S, launcher
from bench.table import markdown, number, ratio, times
from tests.integration.trainer_helpers import TrainerRun, launch, write_config

COLUMNS = (
    "workload",
    "variant",
    "samples/s",
    "x hand-written eager",
    "loss vs eager (max diff / first loss)",
)
METRICS_EVERY = 25


@dataclass(frozen=True)
class Row:
    workload: str
    variant: str
    samples_per_s: float | None
    losses: list[tuple[int, float]]
    device: str = "cpu"


def model_section(workload: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "resnet18": {},
        "small_cnn": {"channels": CNN_CHANNELS},
        "mlp": {"hidden": MLP_HIDDEN, "depth": MLP_DEPTH},
        "gpt": {k: GPT_SHAPE[k] for k in ("n_layer", "n_head", "n_embd")},
    }[workload]
    return {"arch": workload, "kwargs": kwargs}


def data_section(workload: str, size: int, samples: int) -> dict[str, Any]:
    if workload == "gpt":
        tokens = {"block_size": size, "vocab_size": GPT_SHAPE["vocab_size"]}
        return {"dataset": "synthetic_tokens", **tokens, "num_samples": samples, "val_fraction": 0.0}
    return {
        "dataset": "synthetic",
        "image_size": size,
        "channels": 3,
        "num_classes": NUM_CLASSES,
        "num_samples": samples,
        "val_fraction": 0.0,
    }


def trainer_spec(workload: str, graphs: str, args: argparse.Namespace) -> dict[str, Any]:
    size, per_rank = (SMOKE_SHAPES if args.smoke else SHAPES)[workload]
    batch = per_rank * args.gpus  # train.batch_size is global
    steps = args.warmup + args.steps
    gpt = workload == "gpt"
    train: dict[str, Any] = {"max_steps": steps, "batch_size": batch, "eval_every_epochs": 0}
    train |= {"optimizer": "adamw", "lr": 6e-4, "betas": [0.9, 0.95], "weight_decay": 0.1} if gpt else {}
    train |= {"clip_grad_norm": 1.0} if gpt else {"optimizer": "sgd", "lr": 0.01, "momentum": 0.9}
    return {
        "name": f"bench-graphs-{workload}",
        "model": model_section(workload),
        # One epoch covers the run: an epoch's end waits for the device once.
        "data": data_section(workload, size, max(16, steps * batch)),
        "train": train,
        "parallel": {
            "strategy": "ddp" if args.gpus > 1 else "single",
            **({"nproc_per_node": args.gpus} if args.smoke else {"num_gpus": args.gpus}),
        },
        "precision": "fp32" if args.smoke else "bf16",
        "performance": {"cuda_graphs": graphs, "channels_last": workload in ("resnet18", "small_cnn")},
        "checkpoint": {"every_n_steps": 0, "every_n_epochs": 0, "save_final": False},
        "metrics": {"every_n_steps": METRICS_EVERY},
    }


def trainer_row(
    workload: str, graphs: str, args: argparse.Namespace, scratch: Path, budget: Budget, again: bool = False
) -> Row:
    variant = f"Trainyard job, cuda_graphs={graphs}" + (", run again" if again else "")
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return Row(workload, f"{variant} ({SKIPPED}: out of time)", None, [])
    run_dir = scratch / f"{workload}-{graphs}{'-again' if again else ''}"
    write_config(run_dir, trainer_spec(workload, "off" if args.smoke else graphs, args))
    gpus = "" if args.smoke else ",".join(str(i) for i in range(args.gpus))
    done = launch(run_dir, nproc=args.gpus, timeout=timeout, cuda_devices=gpus)
    run = TrainerRun(run_dir, args.gpus)
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:], run.log(0)[-4000:], file=sys.stderr)
        return Row(workload, f"{variant} (failed: exit {done.returncode})", None, [])
    rates = [value for step, value in run.metric("samples_per_s") if step > args.warmup]
    return Row(workload, variant, statistics.median(rates) if rates else None, run.metric("loss"))


def loop_row(workload: str, args: argparse.Namespace, budget: Budget) -> Row:
    variant = "hand-written eager loop"
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return Row(workload, f"{variant} ({SKIPPED}: out of time)", None, [])
    argv = [*launcher(args.gpus), "-m", "bench.graphs_loop", "--workload", workload]
    argv += ["--warmup", str(args.warmup), "--steps", str(args.steps)] + (["--smoke"] if args.smoke else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    result = parse(done.stdout)
    if done.returncode or result is None or result.images_per_s is None:
        print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
        return Row(workload, f"{variant} (failed: exit {done.returncode})", None, [])
    return Row(workload, variant, result.images_per_s, [], result.device)


def max_relative_difference(ours: list[tuple[int, float]], eager: list[tuple[int, float]]) -> float | None:
    """The largest difference between two loss curves at the same steps, as a share of the eager run's first
    loss: relative to each step's own loss, a curve that falls near 0 would magnify rounding."""
    pairs = [(a, b) for (step_a, a), (step_b, b) in zip(ours, eager, strict=False) if step_a == step_b]
    scale = max(abs(eager[0][1]), 1e-12) if eager else 1.0
    return max((abs(a - b) / scale for a, b in pairs), default=None)


def workload_rows(
    workload: str, args: argparse.Namespace, scratch: Path, budget: Budget
) -> tuple[list[list[str]], str]:
    """The table's rows of one workload, and the device the loop ran on."""
    captured = trainer_row(workload, "on", args, scratch, budget)
    eager = trainer_row(workload, "off", args, scratch, budget)
    # Two eager runs from one seed differ too (cuDNN's autotuning picks per process): the noise floor.
    again = trainer_row(workload, "off", args, scratch, budget, again=True)
    loop = loop_row(workload, args, budget)
    print(f"{workload} losses, captured: {captured.losses}\neager: {eager.losses}", file=sys.stderr)
    body = []
    for row in (captured, eager, again, loop):
        compared = row is captured or row is again
        same = max_relative_difference(row.losses, eager.losses) if compared else None
        body.append(
            [
                workload,
                row.variant,
                number(row.samples_per_s, 0),
                times(ratio(row.samples_per_s, loop.samples_per_s)),
                "" if same is None else f"{same:.2%}",
            ]
        )
    return body, loop.device


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workloads", default=",".join(SHAPES), help="comma-separated, of " + ", ".join(SHAPES)
    )
    parser.add_argument(
        "--warmup", type=int, default=50, help="steps before the timed ones (capture included)"
    )
    parser.add_argument("--steps", type=int, default=500, help="timed steps")
    parser.add_argument("--gpus", type=int, default=1, help="more than 1: DDP over this many GPUs")
    parser.add_argument("--budget-s", type=float, default=560, help="no variant starts past it")
    parser.add_argument("--smoke", action="store_true", help="every row on the CPU, eager, tiny")
    args = parser.parse_args()
    if args.smoke:
        args.warmup, args.steps = 2, 4
    budget = Budget(args.budget_s)
    body: list[list[str]] = []
    device = "cpu"
    with tempfile.TemporaryDirectory(prefix="bench-graphs-") as scratch:
        for workload in args.workloads.split(","):
            rows, ran_on = workload_rows(workload, args, Path(scratch), budget)
            body, device = body + rows, ran_on if ran_on != "cpu" else device
    text = markdown(COLUMNS, body) + "\n\nTarget: cuda_graphs=on at >= 1.3x the hand-written eager loop."
    record(section(device, args.gpus, text), args.smoke)
    return 0 if all(row[2] for row in body) else 1


if __name__ == "__main__":
    sys.exit(main())
