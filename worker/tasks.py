"""Celery glue: the one task, and the worker signals that start and stop the executor and the reconcilers.

Which executor runs the jobs is chosen once (worker/executors/__init__.py::executor_for); this module speaks
to it through its Protocol alone (worker/executors/api.py)."""

from __future__ import annotations

import functools
from typing import Any

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down

from core.config import get_settings
from core.doorbell import RUN_JOB_TASK, RUN_NODE_TASK
from worker.executors import executor_for
from worker.executors.api import Background, JobExecutor
from worker.reconcilers import ReconcilerThread

_background: list[Background] = []


@functools.cache
def executor() -> JobExecutor:
    """This worker's executor, one for its life."""
    return executor_for(get_settings())


@shared_task(name=RUN_JOB_TASK)
def run_job(job_id: int) -> None:
    """A doorbell, "there may be work": the local executor claims from SQL in start order, whichever job
    rang, so jobs start in the queue's order, not the broker's, and a repeated or stale message changes
    nothing; the Slurm executor's follower hands the job to Slurm."""
    executor().submit(job_id)


@shared_task(name=RUN_NODE_TASK)
def run_node(job_id: int, attempt: int, node_rank: int) -> None:
    """Sent only to the queue of the host the node was placed on; stale or repeated messages do nothing."""
    executor().run_node(job_id, attempt, node_rank)


@worker_ready.connect
def start_reaper(**_: Any) -> None:
    reconciler = ReconcilerThread()  # whatever the executor: a sweep's trials end under Slurm too
    reconciler.start()
    _background.append(reconciler)
    _background.extend(executor().start())


@worker_shutting_down.connect
def stop_supervising(**_: Any) -> None:
    # Celery's warm shutdown waits for running tasks, and a training job may run for days.
    executor().shutting_down()


@worker_shutdown.connect
def stop_reaper(**_: Any) -> None:
    while _background:
        _background.pop().stop()
