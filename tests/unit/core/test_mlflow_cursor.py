"""Which jobs become MLflow runs, found in SQL alone (core/integrations/mlflow_outbox.py): those that ask, or
all when the server says so; not the history from before the export first ran; a job that commits after one
with a higher id is still found; and the metric rows past the watermark, name by name."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from core.db import session_scope
from core.integrations.mlflow_outbox import SETTLE, discover, due_exports, through, unsent_metrics
from core.models import Job, Metric, MlflowCursor, MlflowExport, utcnow

if TYPE_CHECKING:
    from tests.unit.worker_fixtures import WorkerDb

pytest_plugins = ["tests.unit.worker_fixtures"]


def tracked(database: WorkerDb) -> dict[str, Any]:
    return {**database.spec(), "tracking": {"mlflow": {}}}


def exported(all_jobs: bool = False) -> list[int]:
    with session_scope() as session:
        discover(session, all_jobs, utcnow())
        return list(session.scalars(select(MlflowExport.job_id).order_by(MlflowExport.job_id)))


def cursor() -> int | None:
    with session_scope() as session:
        return session.scalar(select(MlflowCursor.job_id))


def test_only_jobs_that_ask_are_exported_unless_the_server_exports_all(database: WorkerDb) -> None:
    plain, asking = database.add_job(), database.add_job(tracked(database))
    assert exported() == [asking]
    assert exported() == [asking]  # read again while recent: made once
    later = database.add_job()
    assert exported(all_jobs=True) == [plain, asking, later]
    with session_scope() as session:
        assert set(due_exports(session, utcnow(), 10)) == {plain, asking, later}


def test_the_first_look_skips_the_history_and_the_cursor_waits_for_recent_jobs(database: WorkerDb) -> None:
    old = utcnow() - SETTLE - timedelta(seconds=5)
    history = database.add_job(tracked(database), created_at=old)
    recent = database.add_job(tracked(database))
    assert exported() == [recent]
    assert cursor() == history
    # Job 10 shows up only now, though job 12 was seen first: it committed later, as PostgreSQL allows.
    twelve = database.add_job(tracked(database), id=12)
    assert exported() == [recent, twelve]
    assert cursor() == history  # recent jobs are read again until they settle
    ten = database.add_job(tracked(database), id=10)
    assert exported() == [recent, ten, twelve]
    with session_scope() as session:
        for job in session.scalars(select(Job)):
            job.created_at = old
    assert exported() == [recent, ten, twelve]
    assert cursor() == twelve  # settled: never read again


def test_unsent_rows_are_those_past_each_names_watermark(database: WorkerDb) -> None:
    job_id = database.add_job(tracked(database))
    now = utcnow()
    with session_scope() as session:
        session.add_all(
            Metric(job_id=job_id, name=name, step=step, value=float(step), at=now)
            for name, steps in (("loss", range(1, 6)), ("eval_loss", (2, 4)), ("gpu0/util", (3,)))
            for step in steps
        )
    with session_scope() as session:
        first = unsent_metrics(session, job_id, {}, limit=4)
        assert [(p.name, p.step) for p in first] == [
            ("eval_loss", 2),
            ("eval_loss", 4),
            ("gpu0/util", 3),
            ("loss", 1),
        ]
        sent = through({}, first)
        assert sent == {"eval_loss": 4, "gpu0/util": 3, "loss": 1}
        rest = unsent_metrics(session, job_id, sent, limit=100)
        assert [(p.name, p.step) for p in rest] == [("loss", s) for s in range(2, 6)]
        assert unsent_metrics(session, job_id, through(sent, rest), limit=100) == []
