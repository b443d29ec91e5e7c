"""The pruner's cost per report: a trial that reports its objective thousands of times costs the database and
the worker what is new at each look, never every report so far (issue 42: re-reading every trial's reports
at each judgement held SQLite's one writer for minutes), and Optuna works while no write is held."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import pytest
from sqlalchemy import event

from core.config import get_settings
from core.db import get_engine, session_scope
from core.models import Metric, SweepTrial
from core.states import JobStatus
from jobspec.pruner_gate import GATE_DIR, GATE_FILE, PrunerGate
from tests.unit.worker.test_sweep_trials import end, job_of, make_sweep, run
from tests.unit.worker_fixtures import Doorbell, WorkerDb
from worker.pruning import TrialPruning

pytest_plugins = ["tests.unit.worker_fixtures"]

BATCH = 50  # reports the tail stores between two looks of the supervisor
MEDIAN = {"n_startup_trials": 1, "n_min_trials": 1}


def running_trial(database: WorkerDb, reports: int) -> tuple[int, int]:
    """A median-pruned sweep: trial 0 ended with `reports` reports, trial 1 running and never worse."""
    sweep_id = make_sweep(database, parallel=1, max_trials=2, pruner="median", pruner_options=MEDIAN)
    end(job_of(sweep_id, 0), JobStatus.SUCCEEDED, {step: 1.0 for step in range(reports)})
    trial = job_of(sweep_id, 1)
    run(trial, {})
    return sweep_id, trial


def report(job_id: int, steps: range) -> None:
    with session_scope() as session:
        session.add_all(Metric(job_id=job_id, name="loss", step=s, value=0.5) for s in steps)


@contextmanager
def sqlite_work() -> Iterator[list[int]]:
    """Counts the SQLite virtual machine's instructions (in thousands) of every new connection: the database's
    own measure of work, the same on every run."""
    counted = [0]

    def count() -> int:
        counted[0] += 1
        return 0

    def on_connect(connection: sqlite3.Connection, _: object) -> None:
        connection.set_progress_handler(count, 1000)

    engine = get_engine()
    engine.dispose()
    event.listen(engine, "connect", on_connect)
    try:
        yield counted
    finally:
        event.remove(engine, "connect", on_connect)
        engine.dispose()


def judge_all(trial: int, reports: int, run_dir: Path) -> int:
    """Every report judged as the supervisor would, a batch at a time; the SQLite work it took."""
    pruning = TrialPruning.for_job(trial, run_dir)
    assert pruning is not None
    with sqlite_work() as work:
        for start in range(0, reports, BATCH):
            report(trial, range(start, start + BATCH))
            assert pruning.verdict() is None
    return work[0]


def test_judging_costs_what_is_new(database: WorkerDb, doorbell: Doorbell, tmp_path: Path) -> None:
    """Four times the reports, about four times the database's work (it was sixteen: each judgement read
    every trial's every report), and each report judged once."""
    small = judge_all(running_trial(database, 400)[1], 400, tmp_path)
    judged: list[int] = []
    original = optuna.pruners.MedianPruner.prune

    def counting(
        self: optuna.pruners.MedianPruner, study: optuna.Study, trial: optuna.trial.FrozenTrial
    ) -> bool:
        judged.append(trial.number)
        return original(self, study, trial)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(optuna.pruners.MedianPruner, "prune", counting)
        sweep_id, trial = running_trial(database, 1600)
        large = judge_all(trial, 1600, tmp_path)
    assert large < 6 * small, (small, large)
    assert judged == [1] * 1600
    with session_scope() as session:
        assert session.get_one(SweepTrial, (sweep_id, 1)).judged_step == 1599


def test_optuna_works_while_no_write_is_held(database: WorkerDb, doorbell: Doorbell, tmp_path: Path) -> None:
    """Another writer (another user's submission, /healthz) gets SQLite's write lock at once while the
    pruner judges."""
    _, trial = running_trial(database, 100)
    path = get_settings().database_url.removeprefix("sqlite:///")
    writable: list[bool] = []
    original = optuna.pruners.MedianPruner.prune

    def probing(
        self: optuna.pruners.MedianPruner, study: optuna.Study, frozen: optuna.trial.FrozenTrial
    ) -> bool:
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            writable.append(True)
        except sqlite3.OperationalError:
            writable.append(False)
        finally:
            other.close()
        return original(self, study, frozen)

    report(trial, range(100))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(optuna.pruners.MedianPruner, "prune", probing)
        pruning = TrialPruning.for_job(trial, tmp_path)
        assert pruning is not None
        assert pruning.verdict() is None
    assert writable and all(writable), writable


@pytest.fixture
def past_the_bound(
    database: WorkerDb, doorbell: Doorbell, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[int, int]:
    """A sweep's running trial (sweep id, job id) whose 200 reports were judged against a bound of 120."""
    monkeypatch.setenv("TRAINYARD_SWEEP_PRUNER_MAX_REPORTS", "120")
    get_settings.cache_clear()
    sweep_id, trial = running_trial(database, 10)
    judge_all(trial, 200, tmp_path)
    return sweep_id, trial


def test_a_trial_past_the_bound_is_judged_no_more(past_the_bound: tuple[int, int]) -> None:
    sweep_id, _ = past_the_bound
    with session_scope() as session:
        assert session.get_one(SweepTrial, (sweep_id, 1)).judged_step == 119


def test_a_trial_past_the_bound_is_never_held_at_its_gate(
    past_the_bound: tuple[int, int], tmp_path: Path
) -> None:
    """A trial the pruner judges no more must not wait for verdicts that never come (30 s a report)."""
    _, trial = past_the_bound
    report(trial, range(200, 210))
    pruning = TrialPruning.for_job(trial, tmp_path)
    assert pruning is not None and pruning.verdict() is None
    gate = PrunerGate.model_validate_json((tmp_path / GATE_DIR / GATE_FILE).read_bytes())
    assert gate.judged >= 209
