"""train.on_nonfinite over the real loop in one CPU process: a loss that goes NaN at chosen steps (the model's
output poisoned there) fails the run naming the first such step, is counted and warned of once, or has its
update skipped so that training goes on from finite weights."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from jobspec.events import MetricsEvent, WarningEvent, parse_event
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from trainers import loop
from trainers.dist_env import DistEnv
from trainers.progress import NonFiniteLoss

SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))


def poison(monkeypatch: pytest.MonkeyPatch, steps: set[int]) -> None:
    """The model's output turns NaN at these steps (one forward per step: no accumulation, no evaluation)."""
    build = loop.build

    def poisoned_build(config: RunConfig, env: DistEnv) -> Any:
        c = build(config, env)
        forwards = itertools.count(1)

        def forward(x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = c.forward(x)
            return out * math.nan if next(forwards) in steps else out

        return dataclasses.replace(c, forward=forward)

    monkeypatch.setattr(loop, "build", poisoned_build)


def run(tmp_path: Path, on_nonfinite: str) -> bool:
    spec = JobSpec.model_validate(
        {
            "model": {"arch": "mlp"},
            "data": {"dataset": "synthetic", "num_samples": 512},
            "train": {
                "max_steps": 15,
                "batch_size": 32,
                "eval_every_epochs": 0,
                "on_nonfinite": on_nonfinite,
            },
            "parallel": {"strategy": "single"},
            "checkpoint": {"every_n_epochs": 0, "save_final": True},
            "metrics": {"every_n_steps": 5},
        }
    )
    config = RunConfig(job_id=1, attempt=1, spec=spec, plan=resolve_plan(spec))
    return loop.train(config, tmp_path, SOLO)


def reported(tmp_path: Path) -> tuple[list[MetricsEvent], list[WarningEvent]]:
    events = [parse_event(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    metrics = [e for e in events if isinstance(e, MetricsEvent)]
    return metrics, [e for e in events if isinstance(e, WarningEvent)]


def test_fail_stops_the_run_at_the_report_naming_the_first_bad_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    poison(monkeypatch, {7, 9})
    with pytest.raises(NonFiniteLoss, match=r"not finite \(NaN or inf\) at step 7;"):
        run(tmp_path, "fail")
    metrics, warnings = reported(tmp_path)
    assert [e.step for e in metrics] == [5], "the window holding step 7 is never reported as a success"
    assert warnings == [] and "nonfinite_steps" not in metrics[0].values


def test_warn_trains_on_counting_bad_steps_and_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    poison(monkeypatch, {7})
    assert run(tmp_path, "warn")
    metrics, warnings = reported(tmp_path)
    # The NaN gradients of step 7 reach the weights, so every later loss is NaN as well.
    assert [(e.step, e.values["nonfinite_steps"]) for e in metrics] == [(5, 0.0), (10, 4.0), (15, 5.0)]
    assert [(w.step, w.reason) for w in warnings] == [(7, "nonfinite_loss")]
    assert "training went on (train.on_nonfinite=warn)" in warnings[0].message


def test_skip_step_keeps_the_weights_finite_and_counts_the_skipped_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    poison(monkeypatch, {7, 9, 12})
    assert run(tmp_path, "skip_step")
    metrics, warnings = reported(tmp_path)
    assert [(e.step, e.values["nonfinite_steps"]) for e in metrics] == [(5, 0.0), (10, 2.0), (15, 1.0)]
    assert all(math.isfinite(e.values["loss"]) for e in metrics), "a skipped step's loss is not averaged in"
    assert [w.step for w in warnings] == [7] and "its update was skipped" in warnings[0].message
    final = torch.load(tmp_path / "checkpoints/step-00000015.pt", weights_only=True)
    assert all(torch.isfinite(value).all() for value in final["model"].values())
