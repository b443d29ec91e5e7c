"""The Celery app. The broker only rings a doorbell carrying a job id; the database decides who runs what."""

from __future__ import annotations

from functools import lru_cache

from celery import Celery

from app.core.config import get_settings

RUN_JOB_TASK = "trainyard.run_job"


@lru_cache
def get_celery() -> Celery:
    settings = get_settings()
    app = Celery("trainyard", broker=settings.broker_url, include=["worker.tasks"])
    app.conf.update(
        task_default_queue="trainyard",
        task_ignore_result=True,
        # Ack on receipt: a job's life is tracked in SQL with heartbeats, so a long job must not depend on
        # the broker's visibility timeout, and a lost message is re-sent by the reaper.
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )
    return app


def enqueue_job(job_id: int) -> None:
    """Ring the doorbell for a job; call only after the job row is committed."""
    get_celery().send_task(RUN_JOB_TASK, args=[job_id])
