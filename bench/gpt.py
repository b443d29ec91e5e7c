"""A built-in GPT (issue 17): GPT-2 124M (12 layers, 12 heads, 768 wide, context 1024, vocab 50304), bf16,
compiled, on one GPU (or under ddp on --gpus N), against a hand-written nanoGPT loop (under DDP there too).

    python -m bench.gpt [--gpus N] [--batch N] [--warmup N] [--steps N] [--budget-s S] [--smoke]

One after another on GPU 0:
  - the Trainyard trainer (model.arch gpt on synthetic_tokens, performance.compile, AdamW with fused kernels,
    clip_grad_norm 1.0), under torchrun as the worker starts it (tests/integration/trainer_helpers.py),
    without the service; its tokens/s and mfu are the medians of its reports after --warmup steps;
  - bench/gpt_loop.py: the same model and optimizer written by hand on random ids drawn on the GPU, the loss
    computed inside the compiled forward as nanoGPT does.
MFU is model FLOPs (trainers/lm.py: 6N + 12 * layers * width * context per token) over the GPU's peak dense
bf16 rate, the same for both rows. Peak memory is torch.cuda.max_memory_allocated: the largest peak_mem_mb the
trainer reported, the loop's after its timed steps. Target (issue 34): the trainer at >= 0.97x the loop's
tokens/s and <= 1.15x its peak memory. --smoke runs a tiny GPT in fp32, eager, on the CPU: every row fills,
nothing is timed, nothing is recorded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.budget import Budget
from bench.gpt_loop import PARAMS_PREFIX
from bench.report import record, section
from bench.result import SKIPPED, parse
from bench.run import CHILD_TIMEOUT_S
from bench.table import markdown, number, percent, ratio, times
from bench.warm_start import launch_run
from tests.integration.trainer_helpers import TrainerRun, write_config
from trainers.lm import flops_per_token, peak_flops

GPT2 = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "vocab_size": 50304}
SMOKE = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "vocab_size": 256}
COLUMNS = ("variant", "tokens/s", "x hand-written", "peak GB", "x hand-written peak", "MFU", "final loss")


@dataclass(frozen=True)
class Row:
    variant: str
    tokens_per_s: float | None
    mfu: float | None
    final_loss: float | None
    device: str = "cpu"
    peak_mb: float | None = None


def trainer_spec(shape: dict[str, int], args: argparse.Namespace) -> dict[str, Any]:
    steps = args.warmup + args.steps
    return {
        "name": "bench-gpt",
        "model": {"arch": "gpt", "kwargs": {k: shape[k] for k in ("n_layer", "n_head", "n_embd")}},
        "data": {
            "dataset": "synthetic_tokens",
            "block_size": shape["block_size"],
            "vocab_size": shape["vocab_size"],
            "num_samples": max(16, steps * args.batch * args.gpus),
            "val_fraction": 0.0,
        },
        "train": {
            "max_steps": steps,
            "batch_size": args.batch * args.gpus,  # global: --batch windows per GPU, as the loop's
            "optimizer": "adamw",
            "lr": 6e-4,
            "betas": [0.9, 0.95],
            "weight_decay": 0.1,
            "clip_grad_norm": 1.0,
            "eval_every_epochs": 0,
        },
        "parallel": (
            {"strategy": "single", **({} if args.smoke else {"num_gpus": 1})}
            if args.gpus == 1
            else {
                "strategy": "ddp",
                **({"nproc_per_node": args.gpus} if args.smoke else {"num_gpus": args.gpus}),
            }
        ),
        "precision": "fp32" if args.smoke else "bf16",
        "performance": {"compile": not args.smoke},
        "checkpoint": {"every_n_steps": 0, "every_n_epochs": 0, "save_final": False},
        "metrics": {"every_n_steps": 5},
    }


def after_warmup(run: TrainerRun, name: str, warmup: int) -> float | None:
    values = [value for step, value in run.metric(name) if step > warmup]
    return statistics.median(values) if values else None


def trainer_row(shape: dict[str, int], args: argparse.Namespace, run_dir: Path, budget: Budget) -> Row:
    variant = "Trainyard trainer (model.arch gpt)"
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return Row(f"{variant} ({SKIPPED}: out of time)", None, None, None)
    write_config(run_dir, trainer_spec(shape, args))
    gpus = ",".join(str(gpu) for gpu in range(args.gpus))
    done = launch_run(run_dir, nproc=args.gpus, timeout=timeout, cuda_devices="" if args.smoke else gpus)
    run = TrainerRun(run_dir, args.gpus)
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:], run.log(0)[-4000:], file=sys.stderr)
        return Row(f"{variant} (failed: exit {done.returncode})", None, None, None)
    losses = run.metric("loss")
    tokens = after_warmup(run, "tokens_per_s", args.warmup)
    peak = max((value for _, value in run.metric("peak_mem_mb")), default=None)
    mfu = after_warmup(run, "mfu", args.warmup)
    return Row(variant, tokens, mfu, losses[-1][1] if losses else None, peak_mb=None if args.smoke else peak)


def loop_row(shape: dict[str, int], args: argparse.Namespace, budget: Budget) -> Row:
    variant = "hand-written nanoGPT loop"
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return Row(f"{variant} ({SKIPPED}: out of time)", None, None, None)
    flags = {
        "layers": "n_layer",
        "heads": "n_head",
        "width": "n_embd",
        "block": "block_size",
        "vocab": "vocab_size",
    }
    # Under torchrun on --gpus GPUs, as the trainer runs; a world of one needs no launcher.
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.gpus)]
    argv = [
        sys.executable,
        *(torchrun if args.gpus > 1 else []),
        "-m",
        "bench.gpt_loop",
        "--batch",
        str(args.batch),
    ]
    argv += ["--warmup", str(args.warmup), "--steps", str(args.steps)]
    argv += [arg for flag, key in flags.items() for arg in (f"--{flag}", str(shape[key]))]
    argv += ["--device", "cpu", "--no-compile"] if args.smoke else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    result = parse(done.stdout)
    params = [line for line in done.stdout.splitlines() if line.startswith(PARAMS_PREFIX)]
    if done.returncode or result is None or result.images_per_s is None or not params:
        print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
        return Row(f"{variant} (failed: exit {done.returncode})", None, None, None)
    tokens_per_s = result.images_per_s * shape["block_size"]  # windows of block_size tokens per second
    model_flops = flops_per_token(
        json.loads(params[0][len(PARAMS_PREFIX) :]), shape["n_layer"], shape["n_embd"], shape["block_size"]
    )
    peak = peak_flops(result.device)
    mfu = None if peak is None else tokens_per_s * model_flops / (peak * args.gpus)
    return Row(variant, tokens_per_s, mfu, result.final_loss, result.device, result.peak_mem_mb)


def table(rows: list[Row], loop: Row) -> str:
    body = [
        [
            row.variant,
            number(row.tokens_per_s, 0),
            times(ratio(row.tokens_per_s, loop.tokens_per_s)),
            number(None if row.peak_mb is None else row.peak_mb / 1024, 2),
            times(ratio(row.peak_mb, loop.peak_mb)),
            percent(row.mfu),
            number(row.final_loss, 3),
        ]
        for row in rows
    ]
    return markdown(COLUMNS, body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="windows of 1024 tokens per step")
    parser.add_argument("--warmup", type=int, default=15, help="untimed steps (compilation happens here)")
    parser.add_argument("--steps", type=int, default=60, help="timed steps")
    parser.add_argument("--budget-s", type=float, default=560, help="no variant starts past it")
    parser.add_argument("--smoke", action="store_true", help="a tiny GPT on the CPU, eager, fp32")
    parser.add_argument("--gpus", type=int, default=1, help="both rows under ddp on this many GPUs")
    args = parser.parse_args()
    budget = Budget(args.budget_s)
    if args.smoke:
        args.batch, args.warmup, args.steps = 4, 1, 4  # one report (every 5th step) after warm-up
    shape = SMOKE if args.smoke else GPT2
    with tempfile.TemporaryDirectory(prefix="bench-gpt-") as scratch:
        trainer = trainer_row(shape, args, Path(scratch) / "run", budget)
    loop = loop_row(shape, args, budget)
    body = (
        table([trainer, loop], loop)
        + "\n\nTarget (issue 34): the trainer at >= 0.97x the loop's tokens/s and <= 1.15x its peak memory."
    )
    record(section(loop.device, args.gpus, body), args.smoke)
    return 0 if trainer.tokens_per_s is not None and loop.tokens_per_s is not None else 1


if __name__ == "__main__":
    sys.exit(main())
