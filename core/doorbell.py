"""The doorbell: Celery messages that carry only a job id, sent by task name so that the sender (the API, or a
worker re-ringing) needs none of the worker's code. The database decides who runs what."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from functools import lru_cache
from pathlib import Path

from celery import Celery

from core.config import get_settings

RUN_JOB_TASK = "trainyard.run_job"  # on the shared queue: any worker places the job on hosts
RUN_NODE_TASK = "trainyard.run_node"  # on a host's own queue: only that host's worker runs its node
SHARED_QUEUE = "trainyard"
EMBEDDED_BROKER = "sqla+sqlite:///"


def host_queue(host: str) -> str:
    return f"{SHARED_QUEUE}.host.{host}"


def put_embedded_broker_in_wal(broker_url: str) -> None:
    """The SQLite broker in WAL mode, which the file keeps once set: a ring then never waits for a worker's
    poll to finish reading."""
    if not broker_url.startswith(EMBEDDED_BROKER):
        return
    path = Path(broker_url.removeprefix(EMBEDDED_BROKER))
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA journal_mode=WAL")


@lru_cache
def get_celery() -> Celery:
    settings = get_settings()
    put_embedded_broker_in_wal(settings.broker_url)
    app = Celery("trainyard")
    app.conf.update(
        broker_url=settings.broker_url,
        task_default_queue=SHARED_QUEUE,
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


def pending_rings() -> int:
    """Rings in the shared queue that no worker has taken yet."""
    app = get_celery()
    with app.pool.acquire(block=True) as connection:
        # Declared as Celery declares it, so no broker refuses the declaration; a declare answers with the
        # queue's length on every transport, where a passive one fails on Redis once the queue is empty.
        declared = app.amqp.queues[SHARED_QUEUE].queue_declare(channel=connection.default_channel)
    return int(declared.message_count)


def ring_unless_pending(job_id: int) -> bool:
    """Ring for `job_id` unless a ring already waits in the shared queue; whether it rang.

    Any ring wakes a worker thread that claims the queue in start order and, once it holds a job, rings for
    the rest (worker/executors/local/runner.py): one waiting ring fills every free slot in turn. Callers that
    look at the same moment may each find none waiting and each ring, so the rings waiting stay at most the
    number of threads that ring at once, however long the queue."""
    if pending_rings():
        return False
    enqueue_job(job_id)
    return True


def dispatch_node(job_id: int, attempt: int, node_rank: int, host: str) -> None:
    """Hand one node of a placed job to the worker of the host that leased its GPUs, and to no other."""
    get_celery().send_task(RUN_NODE_TASK, args=[job_id, attempt, node_rank], queue=host_queue(host))
