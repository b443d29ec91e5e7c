"""Issue 34: where the trainer's GPT-2 124M step loses tokens/s and memory against a nanoGPT-style loop.

    python -m bench.gpt_memory [--batch N] [--warmup N] [--steps N] [--only NAME,...] [--budget-s S] [--smoke]

One process per variant, one after another on GPU 0, each with its own CUDA context and allocator peak
(inductor's cache on disk is shared, so a graph compiled once compiles faster the next time):
  - bench/gpt_loop.py, the hand-written loop: the loss inside the compiled forward as nanoGPT computes it
    (the reference of every ratio), the loss compiled on its own, the loss eager on the compiled model's
    logits (what bench/gpt_loop.py did before), and the reference without gradient clipping;
  - the trainer's own loop (trainers.loop.train, in the child's process, on bench.gpt's job: synthetic_tokens
    through the DataLoader, metrics every 5 steps, clipping at 1.0) as built, and with one thing changed each:
    the loss eager as before issue 34 (compile_loss undone), the loss compiled in a graph of its own rather
    than in the forward's, no clipping, evaluation of a held-out 10 % at the end, the same evaluation casting
    the whole batch's logits to fp32 at once (as before issue 34), and metrics every 20 steps (the report's
    host sync paid a quarter as often).
tokens/s: the loop's timed steps after --warmup; the trainer's median tokens_per_s report after --warmup.
Peak: torch.cuda.max_memory_allocated over the whole process, evaluation included. --smoke runs a tiny GPT
in fp32, eager, on the CPU: every row fills, nothing is timed, nothing is recorded.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.budget import Budget
from bench.gpt import GPT2, SMOKE, after_warmup, trainer_spec
from bench.report import record, section
from bench.result import SKIPPED, Result, emit, parse
from bench.run import CHILD_TIMEOUT_S
from bench.table import markdown, number, ratio, times
from tests.integration.trainer_helpers import TrainerRun, spec_with, write_config

COLUMNS = ("variant", "tokens/s", "x reference", "peak GB", "x reference peak", "final loss")
EVAL_AT_END: dict[str, dict[str, Any]] = {"data": {"val_fraction": 0.1}, "train": {"eval_every_epochs": 1}}


@dataclass(frozen=True)
class LoopVariant:
    label: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class TrainerVariant:
    label: str
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)  # spec_with's updates
    eager_loss: bool = False
    loss_apart: bool = False
    eval_in_one_piece: bool = False


Variant = LoopVariant | TrainerVariant
VARIANTS: dict[str, Variant] = {
    "reference": LoopVariant(
        "hand-written, loss inside the compiled forward (nanoGPT)", ("--loss", "inside")
    ),
    "trainer": TrainerVariant("trainer as built"),
    "trainer-eager-loss": TrainerVariant("trainer, loss eager (before issue 34)", eager_loss=True),
    "trainer-loss-apart": TrainerVariant("trainer, loss compiled apart from the forward", loss_apart=True),
    "loop-outside": LoopVariant("hand-written, loss eager on the logits", ("--loss", "outside")),
    "loop-separate": LoopVariant("hand-written, loss compiled on its own", ("--loss", "separate")),
    "trainer-no-clip": TrainerVariant("trainer, no clipping", {"train": {"clip_grad_norm": None}}),
    "loop-no-clip": LoopVariant("hand-written, loss inside, no clipping", ("--loss", "inside", "--no-clip")),
    "trainer-eval": TrainerVariant("trainer, evaluation at the end", EVAL_AT_END),
    "trainer-eval-one-piece": TrainerVariant(
        "trainer, evaluation in one fp32 piece (before issue 34)", EVAL_AT_END, eval_in_one_piece=True
    ),
    "trainer-metrics-20": TrainerVariant(
        "trainer, metrics every 20 steps", {"metrics": {"every_n_steps": 20}}
    ),
}


@dataclass(frozen=True)
class Row:
    label: str
    tokens_per_s: float | None
    peak_mb: float | None
    final_loss: float | None


def shape_of(args: argparse.Namespace) -> dict[str, int]:
    return SMOKE if args.smoke else GPT2


def loop_argv(variant: LoopVariant, args: argparse.Namespace) -> list[str]:
    shape = shape_of(args)
    argv = [sys.executable, "-m", "bench.gpt_loop", "--batch", str(args.batch), *variant.flags]
    argv += ["--warmup", str(args.warmup), "--steps", str(args.steps)]
    argv += [
        "--layers",
        str(shape["n_layer"]),
        "--heads",
        str(shape["n_head"]),
        "--width",
        str(shape["n_embd"]),
    ]
    argv += ["--block", str(shape["block_size"]), "--vocab", str(shape["vocab_size"])]
    return argv + (["--device", "cpu", "--no-compile"] if args.smoke else [])


def trainer_argv(name: str, args: argparse.Namespace, run_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "bench.gpt_memory", "--child", name, "--run-dir", str(run_dir)]
    argv += ["--batch", str(args.batch), "--warmup", str(args.warmup), "--steps", str(args.steps)]
    return argv + (["--smoke"] if args.smoke else [])


def run_variant(name: str, args: argparse.Namespace, scratch: Path, budget: Budget) -> Row:
    variant = VARIANTS[name]
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return Row(f"{variant.label} ({SKIPPED}: out of time)", None, None, None)
    if isinstance(variant, LoopVariant):
        argv = loop_argv(variant, args)
    else:
        argv = trainer_argv(name, args, scratch / name)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"CUDA_VISIBLE_DEVICES": ""} if args.smoke else {})}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Row(f"{variant.label} (failed: over {timeout:.0f} s)", None, None, None)
    result = parse(done.stdout)
    if done.returncode or result is None or result.images_per_s is None:
        print(done.stdout[-3000:], done.stderr[-4000:], file=sys.stderr)
        return Row(f"{variant.label} (failed: exit {done.returncode})", None, None, None)
    tokens = result.images_per_s * shape_of(args)["block_size"]
    return Row(variant.label, tokens, result.peak_mem_mb, result.final_loss)


def change_trainer(variant: TrainerVariant) -> None:
    """Make, in this process, the one change to the trainer's code that the variant measures."""
    from trainers import objectives
    from trainers.strategies.single import SingleDeviceStrategy

    if variant.eager_loss:
        eager = objectives.Objective.compile_loss  # compiles nothing
        objectives.NextTokenCrossEntropy.compile_loss = eager  # type: ignore[method-assign]
    if variant.loss_apart:
        SingleDeviceStrategy.loss_in_forward_graph = False
    if variant.eval_in_one_piece:
        objectives.EVAL_CHUNK_ELEMENTS = 2**62


def trainer_child(name: str, args: argparse.Namespace) -> None:
    """Train bench.gpt's job with the variant's changes in this process, then print its Result line."""
    import torch

    from jobspec.datadir import RUN_DIR_ENV
    from trainers.dist_env import rank_env
    from trainers.loop import train

    variant = VARIANTS[name]
    assert isinstance(variant, TrainerVariant)
    run_dir = args.run_dir
    os.environ[RUN_DIR_ENV] = str(run_dir)  # synthetic_tokens writes its ids there
    config = write_config(run_dir, spec_with(trainer_spec(shape_of(args), args), **variant.sections))
    change_trainer(variant)
    train(config, run_dir, rank_env(config.plan))
    run = TrainerRun(run_dir, 1)
    cuda = torch.cuda.is_available()
    tokens = after_warmup(run, "tokens_per_s", args.warmup)
    losses = run.metric("loss")
    emit(
        Result(
            variant=variant.label,
            images_per_s=None if tokens is None else tokens / shape_of(args)["block_size"],
            peak_mem_mb=torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
            device=torch.cuda.get_device_name(0) if cuda else "cpu",
            final_loss=losses[-1][1] if losses else None,
        )
    )


def table(rows: list[Row]) -> str:
    reference = rows[0]
    body = [
        [
            row.label,
            number(row.tokens_per_s, 0),
            times(ratio(row.tokens_per_s, reference.tokens_per_s)),
            number(None if row.peak_mb is None else row.peak_mb / 1024, 2),
            times(ratio(row.peak_mb, reference.peak_mb)),
            number(row.final_loss, 3),
        ]
        for row in rows
    ]
    return markdown(COLUMNS, body)


def device_name(smoke: bool) -> str:
    if smoke:
        return "cpu"
    import torch

    return torch.cuda.get_device_name(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="windows of 1024 tokens per step")
    # 20: reporting every 20 steps (trainer-metrics-20), no timed window starts before the warm-up ended.
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps (compilation happens here)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps")
    parser.add_argument(
        "--only", default=",".join(VARIANTS), help="variants to run, in order: " + ", ".join(VARIANTS)
    )
    parser.add_argument("--budget-s", type=float, default=540, help="no variant starts past it")
    parser.add_argument("--smoke", action="store_true", help="a tiny GPT on the CPU, eager, fp32")
    parser.add_argument("--child", choices=[n for n, v in VARIANTS.items() if isinstance(v, TrainerVariant)])
    parser.add_argument("--run-dir", type=Path)
    args = parser.parse_args()
    if args.smoke:
        args.batch, args.warmup, args.steps = 4, 5, 5
    if args.child is not None:
        trainer_child(args.child, args)
        return 0
    names = ["reference", *(n for n in args.only.split(",") if n != "reference")]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"--only names {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    budget = Budget(args.budget_s)
    with tempfile.TemporaryDirectory(prefix="bench-gpt-memory-") as scratch:
        rows = []
        for name in names:
            rows.append(run_variant(name, args, Path(scratch), budget))
            print(f"{rows[-1]}", flush=True)
    body = table(rows) + (
        "\n\nTarget (issue 34): the trainer at >= 0.97x the reference's tokens/s and <= 1.15x its peak."
    )
    record(section(device_name(args.smoke), 1, body), args.smoke)
    return 0 if all(row.tokens_per_s is not None for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
