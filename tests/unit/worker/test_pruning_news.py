"""A sweep's trial is judged when it reports the objective, not at every batch of its events: a trial's
training loss comes every few steps and its objective once an epoch, and each judgement reads the sweep's
rows on the worker that supervises all its trials (on a loaded box, those judgements kept the worker so
busy that pruned trials trained epochs past their verdicts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.states import JobStatus
from jobspec.events import EVENTS_FILE, MetricsEvent
from jobspec.pruner_gate import GATE_DIR, GATE_FILE, PrunerGate
from tests.unit.worker.test_pruning_cost import MEDIAN, report, running_trial
from tests.unit.worker.test_sweep_trials import end, job_of, make_sweep, run
from tests.unit.worker_fixtures import Doorbell, WorkerDb
from worker.attempts.events import AttemptEvents
from worker.pruning import TrialPruning
from worker.tail import EventTail
from worker.uploads import Uploads

pytest_plugins = ["tests.unit.worker_fixtures"]


def write(events: Path, step: int, **values: float) -> None:
    event = MetricsEvent(step=step, total_steps=100, epoch=0, values=values)
    with events.open("a") as f:
        f.write(event.model_dump_json() + "\n")


def test_only_a_report_of_the_objective_is_judged(
    database: WorkerDb, doorbell: Doorbell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, trial = running_trial(database, 10)  # its sweep's objective is `loss`
    judged: list[int] = []
    original = TrialPruning.verdict

    def counting(self: TrialPruning) -> str | None:
        judged.append(self.job_id)
        return original(self)

    monkeypatch.setattr(TrialPruning, "verdict", counting)
    events = tmp_path / EVENTS_FILE
    attempt = AttemptEvents(trial, EventTail(events), Uploads(trial, tmp_path, launcher_log=False))
    assert attempt.pruned() is None and judged == [trial], "a verdict kept from an earlier attempt"

    for step in range(1, 4):
        write(events, step, lr=0.1, throughput=100.0)
        assert attempt.pump()
        assert attempt.pruned() is None
    assert judged == [trial], "reports of other metrics are not judged"

    write(events, 4, lr=0.1, loss=0.5)
    assert attempt.pump()
    assert attempt.pruned() is None
    assert judged == [trial, trial], "the objective's report is"


def test_each_judgement_opens_the_trial_s_gate_to_the_step_judged(
    database: WorkerDb, doorbell: Doorbell, tmp_path: Path
) -> None:
    _, trial = running_trial(database, 10)
    events, gate = tmp_path / EVENTS_FILE, tmp_path / GATE_DIR / GATE_FILE
    attempt = AttemptEvents(trial, EventTail(events), Uploads(trial, tmp_path, launcher_log=False))
    assert attempt.pruned() is None
    assert PrunerGate.model_validate_json(gate.read_bytes()) == PrunerGate(metric="loss", judged=-1)
    for step in (5, 10):
        write(events, step, loss=1.0 / step)
        attempt.pump()
        attempt.pruned()
        assert PrunerGate.model_validate_json(gate.read_bytes()).judged == step


def test_a_link_planted_where_the_gate_goes_is_replaced_not_written_through(
    database: WorkerDb, doorbell: Doorbell, tmp_path: Path
) -> None:
    _, trial = running_trial(database, 10)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_text("the worker must not write here")
    (tmp_path / GATE_DIR).mkdir()
    (tmp_path / GATE_DIR / GATE_FILE).symlink_to(outside)
    attempt = AttemptEvents(
        trial, EventTail(tmp_path / EVENTS_FILE), Uploads(trial, tmp_path, launcher_log=False)
    )
    attempt.pruned()
    assert outside.read_text() == "the worker must not write here"
    assert not (tmp_path / GATE_DIR / GATE_FILE).is_symlink()


def test_a_report_another_trial_s_supervisor_read_first_is_still_judged(
    database: WorkerDb, doorbell: Doorbell, tmp_path: Path
) -> None:
    """Each supervisor of a sweep reads every trial's new reports into the shared study; a trial's report
    read by another's supervisor first was never judged for its own trial (nor its gate opened)."""
    sweep_id = make_sweep(database, parallel=2, max_trials=3, pruner="median", pruner_options=MEDIAN)
    end(job_of(sweep_id, 0), JobStatus.SUCCEEDED, {step: 1.0 for step in range(10)})
    mine, other = job_of(sweep_id, 1), job_of(sweep_id, 2)
    run(mine, {})
    run(other, {})
    pruning = {job: TrialPruning.for_job(job, tmp_path / str(job)) for job in (mine, other)}
    for each in pruning.values():
        assert each is not None and each.verdict() is None
    report(mine, range(5, 6))
    assert pruning[other] is not None and pruning[other].verdict() is None  # reads mine's report first
    assert pruning[mine] is not None and pruning[mine].verdict() is None
    gate = tmp_path / str(mine) / GATE_DIR / GATE_FILE
    assert PrunerGate.model_validate_json(gate.read_bytes()).judged == 5
