"""A sweep's trials through the worker's own path: asking for the next trial is idempotent, also when two
trials end at once (the same scenario runs on PostgreSQL in tests/integration/test_sweeps.py), a trial is
told its end in the transaction that ends its job, one that never reports the objective fails naming it, and
one the pruner gives up on is stopped as a cancel stops a job, keeping its final checkpoint, and ends
`pruned`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from core.db import session_scope
from core.models import Checkpoint, Job, Metric, Sweep, SweepTrial
from core.states import JobStatus, SweepStatus
from core.sweeps import asks
from core.sweeps.asks import reconcile_sweeps, top_up
from core.sweeps.spec import SweepSpec
from core.transitions import move
from tests.unit.worker.test_kill import run_in_thread
from tests.unit.worker_fixtures import Doorbell, WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def make_sweep(database: WorkerDb, **changes: Any) -> int:
    body = {
        "name": "lr",
        "spec": database.spec(),
        "parameters": {"train.lr": {"type": "float", "low": 1e-3, "high": 1.0, "log": True}},
        "objective": {"metric": "loss"},
        "max_trials": 3,
        "parallel": 2,
        "pruner": "none",
        **changes,
    }
    with session_scope() as session:
        sweep = Sweep(
            name="lr", owner="local", status=SweepStatus.RUNNING, config=SweepSpec(**body).model_dump()
        )
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    top_up(sweep_id)  # as the API does once the sweep's row has committed
    return sweep_id


def trials(sweep_id: int) -> list[tuple[int, str, int | None, str | None]]:
    with session_scope() as session:
        rows = session.scalars(
            select(SweepTrial).where(SweepTrial.sweep_id == sweep_id).order_by(SweepTrial.number)
        )
        return [(t.number, t.state, t.job_id, t.message) for t in rows]


def job_of(sweep_id: int, number: int) -> int:
    job_id = trials(sweep_id)[number][2]
    assert job_id is not None
    return job_id


def run(job_id: int, reports: dict[int, float]) -> None:
    """The job starts and reports the objective at these steps, as the worker would record it."""
    with session_scope() as session:
        session.add_all(Metric(job_id=job_id, name="loss", step=s, value=v) for s, v in reports.items())
        move(session, job_id, JobStatus.QUEUED, JobStatus.STARTING)
        move(session, job_id, JobStatus.STARTING, JobStatus.RUNNING)


def end(job_id: int, status: JobStatus, reports: dict[int, float]) -> None:
    """The job runs, reports the objective at these steps, and ends; then the worker's reconciler takes its
    next pass."""
    run(job_id, reports)
    with session_scope() as session:
        move(session, job_id, JobStatus.RUNNING, status)
    reconcile_sweeps()


def test_asking_again_makes_no_second_trial(database: WorkerDb, doorbell: Doorbell) -> None:
    sweep_id = make_sweep(database)
    made = trials(sweep_id)
    assert [(n, state) for n, state, _, _ in made] == [(0, "running"), (1, "running")]
    # Rung once committed, by the ringing thread, which sends one ring for those asked for while it sends
    # one (core/doorbell.py Ringer): the newest trial's ring, and perhaps the first's before it.
    ids = sorted(job_id for _, _, job_id, _ in made)
    assert doorbell.rung[-1:] == ids[-1:] and set(doorbell.rung) <= set(ids), "rung once committed"
    assert top_up(sweep_id) == []  # `parallel` trials run already
    assert trials(sweep_id) == made
    end(job_of(sweep_id, 0), JobStatus.SUCCEEDED, {5: 0.3})
    after = trials(sweep_id)
    assert [(n, state) for n, state, _, _ in after] == [(0, "completed"), (1, "running"), (2, "running")]
    assert top_up(sweep_id) == []  # asked again: max_trials are made, and running ones fill `parallel`
    assert trials(sweep_id) == after
    with pytest.raises(IntegrityError), session_scope() as session:  # a second job for trial 2: refused
        job = session.get_one(Job, job_of(sweep_id, 2))
        session.add(Job(name="dup", spec=job.spec, plan=job.plan, sweep_id=sweep_id, trial=2))
        session.flush()


def two_trials_end_at_once(database: WorkerDb) -> None:
    """Trials 0 and 1 end; two reconcilers (two workers, or a worker and a late API) then ask at once. Each
    asks Optuna on what it read and records a trial only if no other recorded that number first: trials 2
    and 3 are made once each, where both askers would otherwise record trial 2 and the second fail on the
    unique trial number."""
    sweep_id = make_sweep(database, max_trials=4)
    first, second = job_of(sweep_id, 0), job_of(sweep_id, 1)
    run(first, {5: 0.3})
    run(second, {5: 0.2})
    with session_scope() as session:
        move(session, first, JobStatus.RUNNING, JobStatus.SUCCEEDED)
        move(session, second, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def reconcile() -> None:
        try:
            start.wait()
            top_up(sweep_id)
        except BaseException as exc:  # kept for the test's thread, which asserts there was none
            failures.append(exc)

    askers = [threading.Thread(target=reconcile) for _ in range(2)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(timeout=60)
    assert not any(asker.is_alive() for asker in askers) and not failures, failures
    states = [(n, state) for n, state, _, _ in trials(sweep_id)]
    assert states == [(0, "completed"), (1, "completed"), (2, "running"), (3, "running")]
    assert top_up(sweep_id) == []
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(Job).where(Job.sweep_id == sweep_id)) == 4


def test_two_trials_ending_at_once_ask_for_one_successor_each(database: WorkerDb, doorbell: Doorbell) -> None:
    two_trials_end_at_once(database)


def test_the_sweep_completes_once_every_trial_ended(database: WorkerDb, doorbell: Doorbell) -> None:
    sweep_id = make_sweep(database, max_trials=2)
    end(job_of(sweep_id, 0), JobStatus.SUCCEEDED, {5: 0.3})
    end(job_of(sweep_id, 1), JobStatus.FAILED, {})
    with session_scope() as session:
        sweep = session.get_one(Sweep, sweep_id)
        assert sweep.status == SweepStatus.COMPLETED
        (first, second) = session.scalars(select(SweepTrial).order_by(SweepTrial.number))
        assert (first.state, first.value) == ("completed", 0.3)
        assert second.state == "failed" and "ended failed" in (second.message or "")


def test_a_trial_that_never_reports_the_objective_fails_naming_it(
    database: WorkerDb, doorbell: Doorbell
) -> None:
    sweep_id = make_sweep(database, objective={"metric": "eval_loss"})
    end(job_of(sweep_id, 0), JobStatus.SUCCEEDED, {5: 0.3})  # reports loss only
    _, state, _, message = trials(sweep_id)[0]
    assert state == "failed"
    assert "never reported the objective metric 'eval_loss'" in (message or "")
    assert "it reported: " in (message or "")


def test_a_pruned_trial_stops_at_a_checkpoint_and_ends_pruned(
    database: WorkerDb, doorbell: Doorbell, fake_trainer: Callable[[str], None]
) -> None:
    """The median pruner stops trial 1 at its first report (0.5 at step 5, where trial 0 had 0.1); SIGTERM
    makes the fake trainer save step 10 and exit, as the ranks stop after a cancel."""
    median = {"n_startup_trials": 1, "n_min_trials": 1}
    sweep_id = make_sweep(database, parallel=1, max_trials=2, pruner="median", pruner_options=median)
    end(job_of(sweep_id, 0), JobStatus.SUCCEEDED, {5: 0.1})
    fake_trainer("stop_on_term")
    pruned = job_of(sweep_id, 1)
    thread = run_in_thread(pruned)
    thread.join(timeout=60)
    assert not thread.is_alive()
    reconcile_sweeps()  # the worker's next pass settles the sweep
    job = database.job(pruned)
    assert (job.status, job.status_reason) == (JobStatus.PRUNED, "pruned"), job.message
    assert "pruned at step 5: loss=0.5" in (job.message or "")
    with session_scope() as session:
        steps = session.scalars(select(Checkpoint.step).where(Checkpoint.job_id == pruned)).all()
        assert 10 in steps, "the checkpoint written as it stopped is kept"
        trial = session.get_one(SweepTrial, (sweep_id, 1))
        assert (trial.state, trial.steps) == ("pruned", 5)  # its last report
        assert session.get_one(Sweep, sweep_id).status == SweepStatus.COMPLETED
        assert session.scalar(select(func.count()).select_from(Job)) == 2


def test_a_trial_ending_while_the_sweep_settles_still_completes_it(
    database: WorkerDb, doorbell: Doorbell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconciler settles the sweep for its first trial's end while the last trial ends: the settle must not
    read the last trial running and then clear the `trials_due` its end set meanwhile, which left the sweep
    running for good (a make test run hung on it)."""
    sweep_id = make_sweep(database, max_trials=2)
    first, last = job_of(sweep_id, 0), job_of(sweep_id, 1)
    run(first, {5: 0.3})
    with session_scope() as session:  # the first's end marks the sweep due; the reconciler settles it below
        move(session, first, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    run(last, {5: 0.2})
    read, told = threading.Event(), threading.Event()
    real_trials_of = asks.trials_of

    def trials_read_before_the_end(session: Any, sweep_id: int) -> Any:
        rows = real_trials_of(session, sweep_id)
        read.set()
        told.wait(2)  # the end commits now, or waits for this settle where the settle holds the sweep
        return rows

    monkeypatch.setattr(asks, "trials_of", trials_read_before_the_end)
    settling = threading.Thread(target=asks._settle, args=(sweep_id,))
    settling.start()
    assert read.wait(30)
    with session_scope() as session:
        move(session, last, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    told.set()
    settling.join(30)
    monkeypatch.undo()
    reconcile_sweeps()
    with session_scope() as session:
        assert session.get_one(Sweep, sweep_id).status == SweepStatus.COMPLETED
