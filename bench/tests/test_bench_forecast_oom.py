"""bench.forecast_oom's cases stay what the bench needs, on the CPU where the forecast is made: GPT-2's case
is forecast past an H200, and the service's quickest fix for it is forecast to fit (traced under fake tensors;
the runs themselves need the GPU)."""

from __future__ import annotations

import argparse

import pytest

import bench.forecast_oom as oom
from jobspec.spec import JobSpec
from trainers.forecast.estimate import Target

H200 = Target("NVIDIA H200", 150_109_880_320)


def test_the_gpt2_case_does_not_fit_an_h200_and_its_fix_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(oom, "target", lambda: H200)
    args = argparse.Namespace(gpus=1, warmup=1, steps=1, smoke=False)
    asked_gib, fix = oom._suggested(JobSpec.model_validate(oom.job_spec(oom.CASES["gpt2-b256-eager"], args)))
    assert asked_gib * 2**30 > H200.memory_bytes
    assert fix is not None and fix.plan.forecast is not None and fix.plan.forecast.fits
    assert fix.change.startswith("train.grad_accum_steps")
