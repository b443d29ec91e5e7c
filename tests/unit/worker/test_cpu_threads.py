"""A CPU job's threads per process (OMP_NUM_THREADS, and torch.compile's TORCHINDUCTOR_COMPILE_THREADS) are
its share of the host's cores: the host's cores over TRAINYARD_CPU_OVERCOMMIT, which lets that many CPU
processes share each core, over the job's processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.config import Settings
from core.launch import build_launch
from jobspec.plan import resolve_plan
from jobspec.spec import JobSpec
from worker.executors.local.runner import cpu_share


def threads(overcommit: float, cores: int, nproc: int, monkeypatch: pytest.MonkeyPatch, gpus: int = 0) -> str:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    parallel = {"nproc_per_node": nproc, **({"num_gpus": gpus} if gpus else {})}
    job = JobSpec.model_validate(
        {"model": {"arch": "mlp"}, "data": {"dataset": "synthetic"}, "parallel": parallel}
    )
    plan = resolve_plan(job)
    gpus = list(range(plan.num_gpus))
    command = build_launch(
        plan,
        job_id=1,
        attempt=1,
        host="h",
        run_dir=Path("/runs/1"),
        data_dir=Path("/data"),
        gpu_ids=gpus,
        python="python",
        cpu_count=cpu_share(Settings(cpu_overcommit=overcommit), plan),
    )
    assert command.env["TORCHINDUCTOR_COMPILE_THREADS"] == command.env["OMP_NUM_THREADS"]
    return command.env["OMP_NUM_THREADS"]


def test_without_overcommit_a_cpu_job_s_processes_divide_every_core(monkeypatch: pytest.MonkeyPatch) -> None:
    assert threads(1, 16, 2, monkeypatch) == "8"


def test_overcommit_divides_the_cores_as_many_jobs_share_them(monkeypatch: pytest.MonkeyPatch) -> None:
    assert threads(4, 16, 2, monkeypatch) == "2"
    assert threads(4, 2, 1, monkeypatch) == "1"  # a share under one core is still a thread


def test_a_gpu_job_keeps_every_core_s_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    assert threads(4, 16, 2, monkeypatch, gpus=2) == "8"
