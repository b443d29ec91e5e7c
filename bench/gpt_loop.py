"""The hand-written baseline of bench.gpt: nanoGPT's model and loop with torch alone, nothing of trainers/.

GPT-2 (pre-norm blocks, causal attention through F.scaled_dot_product_attention, which takes the flash kernel
on the GPU; tied embeddings; no biases), random token ids drawn on the device each step, bf16 autocast,
torch.compile, fused AdamW (betas 0.9/0.95, weight decay on matrices only), gradient clipping at 1.0 as the
trainer's job does; the loss is read only after the clock stops, so no step waits for the host. As in
nanoGPT, the model's forward takes the targets and returns the loss, so the loss is compiled with the model
and the (batch, seq, vocab) logits are never copied to fp32 (--loss inside, the default). --loss separate
compiles the loss on its own; --loss outside computes it eagerly on the compiled model's logits, where
autocast runs cross_entropy in fp32 (bench/gpt_memory.py measures what that costs). Prints bench.result's
line (images_per_s holds windows of --block tokens per second) and the model's parameters without position
embeddings (PARAMS_PREFIX), which bench.gpt turns into MFU.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from bench.runtime import joined
from bench.timing import measure, report

PARAMS_PREFIX = "BENCH_GPT_PARAMS "


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width, bias=False), nn.LayerNorm(width, bias=False)
        self.qkv, self.proj = nn.Linear(width, 3 * width, bias=False), nn.Linear(width, width, bias=False)
        self.fc, self.out = nn.Linear(width, 4 * width, bias=False), nn.Linear(4 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (
            z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
            for z in self.qkv(self.ln_1(x)).split(c, 2)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, layers: int, heads: int, width: int, block: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, bias=False)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / (2 * layers) ** 0.5 if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """The logits, or with targets the mean next-token loss."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return logits if targets is None else next_token_loss(logits, targets)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def loss_step(model: nn.Module, where: str, compile_model: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """ids (batch, block + 1) -> the mean loss of predicting each next id, the loss computed `where`."""
    forward = torch.compile(model) if compile_model else model
    if where == "inside":
        return lambda ids: forward(ids[:, :-1], ids[:, 1:])
    loss = torch.compile(next_token_loss) if where == "separate" and compile_model else next_token_loss
    return lambda ids: loss(forward(ids[:, :-1]), ids[:, 1:])


def nanogpt_adamw(params: list[nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
    """nanoGPT's AdamW: betas 0.9/0.95, weight decay on matrices only, fused on the GPU."""
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=6e-4,
        betas=(0.9, 0.95),
        fused=device.type == "cuda",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("layers", 12), ("heads", 12), ("width", 768), ("block", 1024), ("vocab", 50304)):
        parser.add_argument(f"--{flag}", type=int, default=default)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--loss", choices=("inside", "separate", "outside"), default="inside")
    parser.add_argument("--no-clip", action="store_true", help="leave out clip_grad_norm_ (1.0)")
    args = parser.parse_args()
    with joined(args.device) as rank:
        torch.manual_seed(0)
        model = GPT(args.vocab, args.layers, args.heads, args.width, args.block).to(rank.device)
        params = list(model.parameters())
        optimizer = nanogpt_adamw(params, rank.device)
        # Under torchrun, DDP as nanoGPT's train.py wraps it: the compiled model inside, gradients all-reduced
        # in buckets while the backward runs.
        gpu = None if rank.device.type == "cpu" else [rank.device.index]
        wrapped = model if rank.world_size == 1 else DistributedDataParallel(model, device_ids=gpu)
        step_loss = loss_step(wrapped, args.loss, not args.no_compile)
        loss = torch.zeros((), device=rank.device)

        def step() -> None:
            nonlocal loss
            ids = torch.randint(0, args.vocab, (args.batch, args.block + 1), device=rank.device)
            with torch.autocast(rank.device.type, dtype=torch.bfloat16):
                loss = step_loss(ids)
            loss.backward()
            if not args.no_clip:
                nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        measurement = measure(
            step, warmup=args.warmup, steps=args.steps, batch_per_rank=args.batch, rank=rank
        )
        counted = sum(p.numel() for p in params) - model.wpe.weight.numel()
        print(PARAMS_PREFIX + json.dumps(counted), flush=True)
        report("hand-written nanoGPT loop", measurement, rank, loss.item())


if __name__ == "__main__":
    main()
