"""model.arch gpt: a decoder-only transformer as nanoGPT writes GPT-2. Pre-norm blocks of causal
self-attention (F.scaled_dot_product_attention, which takes the flash kernels on a GPU) and a 4x GELU MLP;
the output head shares the token embedding's weight unless tie_embeddings is off; GPT-2's initialisation, its
residual projections scaled down by sqrt(2 * n_layer) so that the residual stream's variance does not grow
with depth.

Its blocks live in one ModuleList, `blocks`: fsdp shards and activation checkpointing recomputes one block at
a time by default (trainers/blocks.py). Its children run one after another, each on the one before's output
(the position embedding adds itself to the token embeddings), so model_parallel and pipeline cut it into
stages between blocks (trainers/placement.py's stage units) with its own forward and state_dict keys.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trainers.lm import flops_per_token

INIT_STD = 0.02  # GPT-2's


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.n_head = n_head
        self.dropout = dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        # (batch, seq, 3 * width) -> three (batch, heads, seq, head width)
        q, k, v = (
            t.view(batch, seq, self.n_head, width // self.n_head).transpose(1, 2)
            for t in self.c_attn(x).split(width, dim=2)
        )
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(batch, seq, width)))


class MLP(nn.Module):
    def __init__(self, n_embd: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout, bias)
        self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = MLP(n_embd, dropout, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class PositionEmbedding(nn.Embedding):
    """Token embeddings (batch, seq, width) plus each position's: a step of the chain that stages split."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + super().forward(torch.arange(x.shape[1], device=x.device))


class GPT(nn.Module):
    """Token ids (batch, seq) -> next-token logits (batch, seq, vocab_size), seq at most block_size."""

    def __init__(
        self,
        vocab_size: int,
        n_layer: int,
        n_head: int,
        n_embd: int,
        block_size: int,
        dropout: float,
        bias: bool,
        tie_embeddings: bool,
    ) -> None:
        super().__init__()
        if n_embd % n_head:  # the planner refuses it; a direct caller learns the same
            raise ValueError(f"n_embd={n_embd} does not split into n_head={n_head} heads")
        self.n_layer, self.n_embd, self.block_size = n_layer, n_embd, block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = PositionEmbedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, dropout, bias) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        if tie_embeddings:  # one matrix embeds tokens and scores them
            self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=INIT_STD / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.wpe(self.wte(idx)))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def flops_per_token(self) -> float:
        # The matrices that multiply: the blocks' and the head's (a tied head's is the token embedding's);
        # embeddings are lookups.
        multiplied = (self.blocks, self.ln_f, self.lm_head)
        n_params = sum(p.numel() for part in multiplied for p in part.parameters())
        return flops_per_token(n_params, self.n_layer, self.n_embd, self.block_size)


def build_gpt(
    vocab_size: int,
    num_classes: int,
    n_layer: float,
    n_head: float,
    n_embd: float,
    block_size: float,
    dropout: float,
    bias: float,
    tie_embeddings: float,
) -> GPT:
    """num_classes is the data's vocabulary too: the model predicts a token."""
    sizes = int(n_layer), int(n_head), int(n_embd), int(block_size)
    return GPT(vocab_size, *sizes, dropout, bool(bias), bool(tie_embeddings))
