"""Precision: autocast for bf16/fp16, nothing for fp32; a GradScaler for fp16 only."""

from __future__ import annotations

import torch

from jobspec.spec import Precision
from trainers.precision import MixedPrecision

CPU = torch.device("cpu")


def test_fp32_runs_in_fp32_without_a_scaler() -> None:
    precision = MixedPrecision(Precision.FP32, CPU)
    with precision.autocast():
        out = torch.randn(2, 3) @ torch.randn(3, 2)
    assert out.dtype == torch.float32
    assert precision.scaler is None and precision.state_dict() is None
    loss = torch.tensor(2.0)
    assert precision.scale(loss) is loss


def test_bf16_autocasts_matmuls_and_needs_no_scaler() -> None:
    precision = MixedPrecision(Precision.BF16, CPU)
    with precision.autocast():
        out = torch.randn(2, 3) @ torch.randn(3, 2)
    assert out.dtype == torch.bfloat16
    assert precision.scaler is None


def test_step_without_a_scaler_is_the_optimizer_step() -> None:
    param = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([param], lr=0.5)
    param.grad = torch.ones(2)
    MixedPrecision(Precision.BF16, CPU).step(optimizer)
    assert param.tolist() == [0.5, 0.5]
