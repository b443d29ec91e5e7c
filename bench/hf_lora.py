"""Hugging Face causal LMs (issues 17 and 34): a ~1B Llama-style model built from config.json alone
(model.config_only: TinyLlama-1.1B's shape, random weights), fine-tuned in full and with LoRA under fsdp in
bf16: with activation checkpointing per decoder layer and eager (issue 17's runs), and compiled without
checkpointing (issue 34's). --only picks variants (VARIANTS); the first row is the base of the ratios.

    python -m bench.hf_lora [--gpus N] [--batch N] [--block N] [--warmup N] [--steps N] [--only V,...]
                            [--budget-s S] [--smoke]

Each variant runs the Trainyard trainer under torchrun as the worker starts it
(tests/integration/trainer_helpers.py), without the service, on random token ids; its tokens/s and MFU are
the medians of its reports after --warmup steps, its peak memory the largest reported. MFU counts model
FLOPs (trainers/lm.py: 6N + 12 * layers * width * context per token, N every parameter) for every variant,
so LoRA's (which skips the frozen weights' gradients) reads low by design. --smoke runs a 2-layer Llama in
fp32 on the CPU: every row fills, nothing is timed, nothing is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.budget import Budget
from bench.report import record, section
from bench.run import CHILD_TIMEOUT_S
from bench.runtime import device_name
from bench.table import markdown, number, percent, ratio, times
from bench.warm_start import launch_run
from jobspec.datadir import DATA_DIR_ENV
from tests.integration.trainer_helpers import TrainerRun, write_config

# TinyLlama-1.1B's shape: 22 layers of 2048 with grouped-query attention (4 key/value heads).
LLAMA_1B = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "vocab_size": 32000,
}
SMOKE = {**LLAMA_1B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
SMOKE.update(num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
COLUMNS = ("variant", "tokens/s", "x first", "MFU", "peak memory (MB)", "x first", "final loss")


@dataclass(frozen=True)
class Variant:
    label: str
    lora: bool
    performance: dict[str, bool]
    strategy: str = "fsdp"


AC = {"activation_checkpointing": True}
COMPILED = {"compile": True}
FULL, ADAPTED = "full fine-tune", "LoRA (r 16, attention)"
# The first two are issue 17's configuration, the next two issue 34's; the rest take one lever at a time.
VARIANTS = {
    "ac": Variant(f"{FULL}, fsdp + AC", False, AC),
    "lora-ac": Variant(f"{ADAPTED}, fsdp + AC", True, AC),
    "compiled": Variant(f"{FULL}, fsdp, compiled", False, COMPILED),
    "lora-compiled": Variant(f"{ADAPTED}, fsdp, compiled", True, COMPILED),
    "eager": Variant(f"{FULL}, fsdp", False, {}),
    "ac-compiled": Variant(f"{FULL}, fsdp + AC, compiled", False, {**AC, **COMPILED}),
    "single-compiled": Variant(f"{FULL}, single, compiled", False, COMPILED, strategy="single"),
}
DEFAULT = "ac,lora-ac,compiled,lora-compiled"


@dataclass(frozen=True)
class Row:
    variant: str
    tokens_per_s: float | None
    mfu: float | None
    peak_mem_mb: float | None
    final_loss: float | None


def write_model_and_data(data_dir: Path, shape: dict[str, int], tokens: int) -> None:
    """config.json alone (config_only), and a train.bin of random ids below the vocabulary."""
    model = data_dir / "llama"
    model.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "tie_word_embeddings": False}
    (model / "config.json").write_text(json.dumps({**config, **shape}))
    ids = np.random.default_rng(0).integers(0, shape["vocab_size"], tokens, dtype=np.uint16)
    (data_dir / "ids").mkdir()
    ids.tofile(data_dir / "ids" / "train.bin")


def trainer_spec(shape: dict[str, int], args: argparse.Namespace, variant: Variant) -> dict[str, Any]:
    devices = {"nproc_per_node": args.gpus} if args.smoke else {"num_gpus": args.gpus}
    lora = variant.lora
    return {
        "name": "bench-hf-lora" if lora else "bench-hf-full",
        "model": {
            "arch": "hf_causal_lm",
            "path": "llama",
            "config_only": True,
            "export": False,
            **({"lora": LORA} if lora else {}),
        },
        "data": {
            "dataset": "tokens",
            "root": "ids",
            "block_size": args.block,
            "vocab_size": shape["vocab_size"],
            "val_fraction": 0.0,
        },
        "train": {
            "max_steps": args.warmup + args.steps,
            "batch_size": args.batch * args.gpus,
            "optimizer": "adamw",
            "lr": 2e-4 if lora else 3e-5,
            "clip_grad_norm": 1.0,
            "eval_every_epochs": 0,
        },
        "parallel": {"strategy": variant.strategy, **devices},
        "precision": "fp32" if args.smoke else "bf16",
        "performance": variant.performance,
        "checkpoint": {"every_n_steps": 0, "every_n_epochs": 0, "save_final": False},
        "metrics": {"every_n_steps": 5},
    }


def after_warmup(run: TrainerRun, name: str, warmup: int) -> float | None:
    values = [value for step, value in run.metric(name) if step > warmup]
    return statistics.median(values) if values else None


def trainer_row(
    shape: dict[str, int], args: argparse.Namespace, run_dir: Path, variant: Variant, budget: Budget
) -> Row:
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return Row(f"{variant.label} (skipped: out of time)", None, None, None, None)
    write_config(run_dir, trainer_spec(shape, args, variant))
    gpus = "" if args.smoke else ",".join(str(i) for i in range(args.gpus))
    done = launch_run(run_dir, nproc=args.gpus, timeout=timeout, cuda_devices=gpus)
    run = TrainerRun(run_dir, args.gpus)
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:], run.log(0)[-4000:], file=sys.stderr)
        return Row(f"{variant.label} (failed: exit {done.returncode})", None, None, None, None)
    losses, memory = run.metric("loss"), [value for _, value in run.metric("peak_mem_mb")]
    return Row(
        variant.label,
        after_warmup(run, "tokens_per_s", args.warmup),
        after_warmup(run, "mfu", args.warmup),
        max(memory) if memory else None,
        losses[-1][1] if losses else None,
    )


def table(rows: list[Row], full: Row) -> str:
    body = [
        [
            row.variant,
            number(row.tokens_per_s, 0),
            times(ratio(row.tokens_per_s, full.tokens_per_s)),
            percent(row.mfu),
            number(row.peak_mem_mb, 0),
            times(ratio(row.peak_mem_mb, full.peak_mem_mb)),
            number(row.final_loss, 3),
        ]
        for row in rows
    ]
    return markdown(COLUMNS, body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1, help="fsdp ranks, one per GPU")
    parser.add_argument("--batch", type=int, default=8, help="windows per GPU per step")
    parser.add_argument("--block", type=int, default=2048, help="tokens per window")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--only", default=DEFAULT, help="variants, in order: " + ", ".join(VARIANTS))
    parser.add_argument("--budget-s", type=float, default=540, help="no variant starts past it")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer Llama on the CPU, fp32")
    args = parser.parse_args()
    names = args.only.split(",")
    if unknown := [n for n in names if n not in VARIANTS]:
        parser.error(f"--only names {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    budget = Budget(args.budget_s)
    if args.smoke:
        args.batch, args.block, args.warmup, args.steps = 2, 16, 1, 4  # one report after warm-up
    shape = SMOKE if args.smoke else LLAMA_1B
    tokens = (args.warmup + args.steps) * args.batch * args.gpus * args.block + args.block + 1
    with tempfile.TemporaryDirectory(prefix="bench-hf-") as scratch:
        data_dir = Path(scratch) / "data"
        write_model_and_data(data_dir, shape, tokens)
        os.environ[DATA_DIR_ENV] = str(data_dir)
        rows = []
        for name in names:
            rows.append(trainer_row(shape, args, Path(scratch) / name, VARIANTS[name], budget))
            print(rows[-1], flush=True)
    device = "cpu" if args.smoke else device_name(torch.device("cuda", 0))
    record(section(device, None if args.smoke else args.gpus, table(rows, rows[0])), args.smoke)
    return 0 if all(row.tokens_per_s is not None for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
