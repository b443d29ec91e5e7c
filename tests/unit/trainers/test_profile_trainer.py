"""torch.profiler on rank 0 writes a Chrome trace, a summary and an event, for the steps asked for."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from jobspec.events import EVENTS_FILE, ProfileEvent, parse_event
from jobspec.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE, ProfileSummary
from jobspec.spec import ProfileSpec
from trainers.dist_env import DistEnv
from trainers.metrics import EventLog
from trainers.profiling import StepProfiler

CPU = torch.device("cpu")


def _train(profiler: StepProfiler, steps: int) -> None:
    model = nn.Linear(32, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(16, 32)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss.item()  # a host sync, which the summary must count
        profiler.step()


def _run(tmp_path: Path, spec: ProfileSpec, steps: int, rank: int = 0, done: int = 0) -> StepProfiler:
    env = DistEnv(rank=rank, local_rank=rank, world_size=2, device=CPU)
    profiler = StepProfiler(spec, tmp_path, env, EventLog(tmp_path, env.is_main), done)
    _train(profiler, steps)
    profiler.close()
    return profiler


def _summary(run_dir: Path) -> ProfileSummary:
    return ProfileSummary.model_validate_json((run_dir / PROFILE_DIR / SUMMARY_FILE).read_text())


def test_rank0_writes_trace_summary_and_event_after_skipping(tmp_path: Path) -> None:
    _run(tmp_path, ProfileSpec(steps=3, skip_first=2), steps=8, done=100)

    trace = json.loads((tmp_path / PROFILE_DIR / TRACE_FILE).read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::addmm" in names and "aten::item" in names
    summary = _summary(tmp_path)
    assert (summary.first_step, summary.steps, summary.device) == (103, 3, "cpu")
    assert summary.cpu_total_us > 0 and summary.step_wall_us > 0 and summary.gpu_total_us == 0
    top = {op.name: op for op in summary.top_cpu_ops}
    assert top["aten::addmm"].calls == 3  # one forward matmul a step, three steps
    assert {op.name for op in summary.sync_ops} >= {"aten::item"}
    assert next(op for op in summary.sync_ops if op.name == "aten::item").calls == 3
    assert 0 < summary.sync_share_of_cpu < 1
    assert summary.memcpy_share_of_gpu == 0

    events = [parse_event(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    assert [(e.first_step, e.steps, e.summary, e.trace) for e in events if isinstance(e, ProfileEvent)] == [
        (103, 3, f"{PROFILE_DIR}/{SUMMARY_FILE}", f"{PROFILE_DIR}/{TRACE_FILE}")
    ]


def test_a_run_shorter_than_the_window_still_writes_what_it_profiled(tmp_path: Path) -> None:
    _run(tmp_path, ProfileSpec(steps=10, skip_first=0), steps=2)
    assert _summary(tmp_path).steps == 2


def test_other_ranks_and_unprofiled_jobs_write_nothing(tmp_path: Path) -> None:
    _run(tmp_path / "rank1", ProfileSpec(steps=2, skip_first=0), steps=3, rank=1)
    _run(tmp_path / "off", ProfileSpec(steps=0), steps=3)
    assert not (tmp_path / "rank1").exists() and not (tmp_path / "off").exists()
