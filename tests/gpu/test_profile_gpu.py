"""On a GPU: the profile summary sees host<->device copies and host syncs; activation checkpointing keeps
gradients equal on CUDA; cudnn.benchmark follows the spec. Skipped without CUDA."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from jobspec.profile_summary import PROFILE_DIR, SUMMARY_FILE, ProfileSummary
from jobspec.spec import PerformanceSpec, ProfileSpec
from trainers.dist_env import DistEnv
from trainers.metrics import EventLog
from trainers.models import build_model
from trainers.performance import checkpoint_activations, set_cudnn_benchmark
from trainers.profiling import StepProfiler

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_summary_counts_copies_and_syncs_on_cuda(tmp_path: Path) -> None:
    device = torch.device("cuda:0")
    env = DistEnv(rank=0, local_rank=0, world_size=1, device=device)
    profiler = StepProfiler(ProfileSpec(steps=3, skip_first=1), tmp_path, env, EventLog(tmp_path, True), 0)
    model = torch.nn.Linear(1024, 1024, device=device)
    host = torch.randn(4096, 1024)  # pageable: a synchronous-looking HtoD copy every step
    for _ in range(5):
        loss = model(host.to(device)).square().mean()
        loss.backward()
        loss.item()  # DtoH copy + stream sync
        profiler.step()
    profiler.close()

    summary = ProfileSummary.model_validate_json((tmp_path / PROFILE_DIR / SUMMARY_FILE).read_text())
    assert summary.device == "cuda" and summary.steps == 3
    assert summary.gpu_total_us > 0 and summary.top_gpu_ops
    assert summary.memcpy.htod_us > 0 and summary.memcpy.dtoh_us > 0
    assert 0 < summary.memcpy_share_of_gpu < 1
    assert "aten::item" in {op.name for op in summary.sync_ops} and summary.sync_share_of_cpu > 0


@pytest.mark.parametrize("arch", ["resnet18", "alexnet"])
def test_activation_checkpointing_keeps_gradients_on_cuda(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # cuDNN's default backward kernels add in a varying order and convolutions run in TF32: pin both so
    # the comparison measures the recomputation, not kernel choice.
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.manual_seed(0)
    plain = build_model(arch, {}, 3, 10, 64).cuda()
    checkpointed = checkpoint_activations(copy.deepcopy(plain))
    x, y = torch.randn(8, 3, 64, 64, device="cuda"), torch.randint(10, (8,), device="cuda")
    for model in (plain, checkpointed):
        torch.manual_seed(1)
        F.cross_entropy(model(x), y).backward()
    for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_cudnn_benchmark_follows_the_spec() -> None:
    set_cudnn_benchmark(PerformanceSpec(cudnn_benchmark=True), torch.device("cuda:0"))
    assert torch.backends.cudnn.benchmark
    set_cudnn_benchmark(PerformanceSpec(cudnn_benchmark=False), torch.device("cuda:0"))
    assert not torch.backends.cudnn.benchmark
    # DataParallel's replica threads would autotune again every step.
    set_cudnn_benchmark(
        PerformanceSpec(cudnn_benchmark=True), torch.device("cuda:0"), replicas_in_threads=True
    )
    assert not torch.backends.cudnn.benchmark
