"""Celery glue: the one task, and the worker signals that start and stop the reaper and the supervisors."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown, worker_shutting_down

from core.config import Executor, get_settings
from core.doorbell import RUN_JOB_TASK, RUN_NODE_TASK
from worker import runner
from worker.reaper import ReaperThread
from worker.slurm import follow

_reapers: list[ReaperThread] = []


@shared_task(name=RUN_JOB_TASK)
def run_job(job_id: int) -> None:
    """A doorbell, "there may be work": the runner claims from SQL in start order, whichever job rang, so
    jobs start in the queue's order, not the broker's, and a repeated or stale message changes nothing. With
    Slurm deciding, it only wakes the follower, which hands the job to Slurm."""
    if get_settings().executor is Executor.SLURM:
        follow.ring()
    else:
        runner.run_job(job_id)


@shared_task(name=RUN_NODE_TASK)
def run_node(job_id: int, attempt: int, node_rank: int) -> None:
    """Sent only to the queue of the host the node was placed on; stale or repeated messages do nothing."""
    runner.run_node(job_id, attempt, node_rank)


@worker_ready.connect
def start_reaper(**_: Any) -> None:
    if get_settings().executor is Executor.SLURM:
        # Slurm places, restarts and reaps: this worker only hands jobs over and follows them.
        follow.follower(runner.SHUTDOWN)
        return
    runner.warm_launcher().prepare()  # the first job's torchrun, importing torch ahead of it
    reaper = ReaperThread()
    reaper.start()
    _reapers.append(reaper)


@worker_shutting_down.connect
def stop_supervising(**_: Any) -> None:
    # Celery's warm shutdown waits for running tasks, and a training job may run for days: supervisors see
    # this, stop their jobs and requeue them, and their tasks return.
    runner.SHUTDOWN.set()


@worker_shutdown.connect
def stop_reaper(**_: Any) -> None:
    while _reapers:
        _reapers.pop().stop()
