"""The bookkeeping both loops share: cadences over positions, and what a run writes for the worker."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jobspec.events import (
    EVENTS_FILE,
    CheckpointEvent,
    DoneEvent,
    Event,
    MetricsEvent,
    PhaseEvent,
    parse_event,
)
from jobspec.spec import CheckpointSpec, JobSpec, MetricsSpec, Precision, TrainSpec
from trainers.metrics import Report
from trainers.precision import MixedPrecision
from trainers.progress import Position, RunOutput, checkpoint_due, evaluation_due, report_due, total_steps

SPEC = JobSpec.model_validate({"name": "unit", "model": {"arch": "mlp"}, "data": {"dataset": "digits"}})
FP32 = MixedPrecision(Precision.FP32, torch.device("cpu"))


def positions(total: int, per_epoch: int) -> list[Position]:
    return [Position.of(step, per_epoch, total) for step in range(1, total + 1)]


def events(run_dir: Path) -> list[Event]:
    path = run_dir / EVENTS_FILE
    return [parse_event(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_position_knows_its_epoch_and_whether_it_ends_one_or_the_run() -> None:
    assert Position.of(5, steps_per_epoch=5, total=12) == Position(5, 1, epoch_end=True, last=False)
    assert Position.of(6, steps_per_epoch=5, total=12) == Position(6, 2, epoch_end=False, last=False)
    assert Position.of(12, steps_per_epoch=5, total=12) == Position(12, 3, epoch_end=False, last=True)


def test_length_is_max_steps_or_epochs_times_steps_per_epoch() -> None:
    assert total_steps(TrainSpec(epochs=3), steps_per_epoch=7) == 21
    assert total_steps(TrainSpec(epochs=3, max_steps=5), steps_per_epoch=7) == 5
    assert total_steps(TrainSpec(), steps_per_epoch=7) == 7


def test_reports_every_n_steps_and_at_the_last() -> None:
    assert [p.step for p in positions(12, 5) if report_due(MetricsSpec(every_n_steps=5), p)] == [5, 10, 12]


def test_evaluation_every_n_epochs_and_once_at_the_end() -> None:
    train = TrainSpec(eval_every_epochs=2)
    assert [p.step for p in positions(25, 5) if evaluation_due(train, p)] == [10, 20, 25]
    assert [p.step for p in positions(20, 5) if evaluation_due(train, p)] == [10, 20]
    assert not any(evaluation_due(TrainSpec(eval_every_epochs=0), p) for p in positions(20, 5))


def test_checkpoints_by_step_by_epoch_and_final_never_twice_a_step() -> None:
    both = CheckpointSpec(every_n_steps=4, every_n_epochs=1)
    assert [p.step for p in positions(12, 5) if checkpoint_due(both, p)] == [4, 5, 8, 10, 12]
    no_final = CheckpointSpec(every_n_steps=0, every_n_epochs=2, save_final=False)
    assert [p.step for p in positions(12, 5) if checkpoint_due(no_final, p)] == [10]


def test_rank0_writes_metrics_events_and_a_line_per_training_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = RunOutput(tmp_path, SPEC, total=12, is_main=True)
    output.running(Position.of(0, 5, 12))
    output.report_training(Position.of(8, 5, 12), Report({"loss": 0.25}, []))
    output.report(Position.of(8, 5, 12), {"eval_loss": 0.5})
    written = events(tmp_path)
    assert isinstance(written[0], PhaseEvent)
    assert [
        (e.step, e.total_steps, e.epoch, e.values) for e in written[1:] if isinstance(e, MetricsEvent)
    ] == [
        (8, 12, 2, {"loss": 0.25}),
        (8, 12, 2, {"eval_loss": 0.5}),
    ]
    assert capsys.readouterr().out == "step 8/12 loss=0.25\n"


def test_other_ranks_write_and_print_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = RunOutput(tmp_path, SPEC, total=12, is_main=False)
    output.running(Position.of(0, 5, 12))
    output.report_training(Position.of(12, 5, 12), Report({"loss": 0.25}, []))
    output.checkpoint({"w": torch.ones(1)}, {}, FP32, Position.of(12, 5, 12))
    output.close(finished=True)
    assert events(tmp_path) == [] and capsys.readouterr().out == ""
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("finished", [True, False])
def test_done_follows_the_durable_last_checkpoint_only_when_training_finished(
    tmp_path: Path, finished: bool
) -> None:
    output = RunOutput(tmp_path, SPEC, total=12, is_main=True)
    output.checkpoint({"w": torch.ones(1)}, {}, FP32, Position.of(10, 5, 12))
    output.close(finished=finished)
    written = events(tmp_path)
    assert isinstance(written[0], CheckpointEvent) and (tmp_path / written[0].path).exists()
    assert written[1:] == ([DoneEvent(time=written[-1].time, step=12)] if finished else [])


def epoch_times(run_dir: Path) -> list[tuple[int, float]]:
    return [
        (e.step, e.values["epoch_time_s"])
        for e in events(run_dir)
        if isinstance(e, MetricsEvent) and "epoch_time_s" in e.values
    ]


@pytest.mark.parametrize(("done", "timed"), [(0, [5, 10, 15]), (5, [10, 15]), (7, [15])])
def test_each_epoch_seen_from_its_start_reports_its_time_once(
    tmp_path: Path, done: int, timed: list[int]
) -> None:
    output = RunOutput(tmp_path, SPEC, total=15, is_main=True)
    # Resumed after step 7, this process saw only part of the second epoch.
    output.running(Position.of(done, 5, 15))
    for step in range(done + 1, 16):
        at = Position.of(step, 5, 15)
        if at.epoch_end:
            output.epoch_ended(at)
            output.epoch_ended(at)  # hogwild's main process sees an epoch's end twice: one time is reported
    times = epoch_times(tmp_path)
    assert [step for step, _ in times] == timed and all(t >= 0 for _, t in times)
