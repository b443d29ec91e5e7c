"""What a language model's training costs: model FLOPs per token, the GPU's peak rate, and the tokens/s and
model FLOPs utilisation (MFU) reported from them. No torch import: the planner and docs share it.

FLOPs per token follow PaLM (appendix B) and nanoGPT's estimate_mfu: 6N for the forward and backward
matrix multiplies of N parameters, plus 12 * n_layer * width * seq for attention's scores and weighted sum
over a context of seq tokens. MFU is achieved model FLOP/s over the GPUs' peak dense bf16 FLOP/s, whatever
precision the job trains in, so that figures compare across jobs; recomputation under activation
checkpointing is not counted (it is model FLOPs, not hardware FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


def flops_per_token(n_params: float, n_layer: int, width: int, seq: int) -> float:
    """Training FLOPs per token of a decoder of n_params parameters (those of position embeddings left
    out: a lookup multiplies nothing) and n_layer layers of `width`, over contexts of `seq` tokens."""
    return 6.0 * n_params + 12.0 * n_layer * width * seq


# Peak dense (not 2:4 sparse) bf16 tensor-core FLOP/s from the vendors' data sheets, by a fragment of the name
# torch.cuda.get_device_name reports. The first fragment found wins: the PCIe and NVL boards come before
# the SXM one whose name is the bare "H100".
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200", 989e12),
    ("GH200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A10G", 70e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("V100", 125e12),  # fp16: V100 has no bf16
)


def peak_flops(device_name: str) -> float | None:
    """The peak of one GPU of this name; None for a GPU not in the table (and so no mfu metric)."""
    return next((peak for fragment, peak in PEAK_BF16_FLOPS if fragment in device_name), None)


@runtime_checkable
class LanguageModel(Protocol):
    """A model that knows its cost: the built-in gpt, and wrappers of other causal LMs."""

    def flops_per_token(self) -> float: ...


@dataclass(frozen=True)
class Throughput:
    """Turns the samples/s the metrics measure into tokens/s and MFU. peak is the summed peak of every GPU
    the job holds; None on the CPU or an unknown GPU."""

    tokens_per_sample: int
    flops_per_token: float
    peak: float | None

    def values(self, samples_per_s: float) -> dict[str, float]:
        tokens_per_s = samples_per_s * self.tokens_per_sample
        mfu = {} if self.peak is None else {"mfu": tokens_per_s * self.flops_per_token / self.peak}
        return {"tokens_per_s": tokens_per_s, **mfu}
