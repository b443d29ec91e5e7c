"""The doorbell: Celery messages that carry only a job id, sent by task name so that the sender (the API, or a
worker re-ringing) needs none of the worker's code. The database decides who runs what."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from functools import lru_cache
from pathlib import Path

from celery import Celery

from core.config import get_settings

RUN_JOB_TASK = "trainyard.run_job"  # on the shared queue: any worker places the job on hosts
RUN_NODE_TASK = "trainyard.run_node"  # on a host's own queue: only that host's worker runs its node
SHARED_QUEUE = "trainyard"
EMBEDDED_BROKER = "sqla+sqlite:///"

log = logging.getLogger(__name__)
# The least time between two rings of one process: a submission's job starts that much later at most.
RING_GAP_S = 0.05
# How long a stopping process (the API, a worker's reconcilers) waits for its last rings to reach the broker.
EXIT_DRAIN_S = 5.0


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


class Ringer:
    """Rings for submissions, sent by a thread of its own: one ring for all the submissions that come while
    one is being sent. A ring only wakes a worker, which claims the queue in start order whatever job the
    ring names and rings again for the rest (worker/executors/local/runner.py::run_job), so a ring sent
    after a job's row was committed is all that job needs. A burst of submissions then sends a few rings
    rather than one each (a ring is a write and a commit on the embedded broker), and no submission waits
    for the broker. Rings follow each other at least `gap_s` apart, so a steady stream of submissions costs
    a few rings a second, and a job's start waits that much at most. A ring that fails is logged: the
    worker's reaper rings again for queued jobs."""

    def __init__(self, send: Callable[[int], None] = enqueue_job, gap_s: float = RING_GAP_S) -> None:
        self._send, self._gap_s = send, gap_s
        self._changed = threading.Condition()
        self._due: int | None = None  # the newest job whose ring is not sent yet
        self._sending = False
        self._thread: threading.Thread | None = None

    def ring(self, job_id: int) -> None:
        """Ring for `job_id`, whose row is committed, soon."""
        with self._changed:
            self._due = job_id
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_due, name="trainyard-doorbell", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def drain(self, timeout_s: float) -> bool:
        """Wait until every ring asked for is sent (or failed); whether that happened within `timeout_s`."""
        with self._changed:
            return self._changed.wait_for(lambda: self._due is None and not self._sending, timeout_s)

    def _send_due(self) -> None:
        while True:
            with self._changed:
                while self._due is None:
                    self._changed.wait()
                job_id, self._due, self._sending = self._due, None, True
            try:
                self._send(job_id)
            except Exception:  # the thread serves every later submission: it must not end here
                log.warning("no ring for job %s: it waits for the reaper's", job_id, exc_info=True)
            finally:
                with self._changed:
                    self._sending = False
                    self._changed.notify_all()
            time.sleep(self._gap_s)


_ringer = Ringer()


def _new_ringer_after_fork() -> None:
    """A forked child has none of its parent's threads: its rings need a sender of its own."""
    global _ringer
    _ringer = Ringer()


os.register_at_fork(after_in_child=_new_ringer_after_fork)


def ring_soon(job_id: int) -> None:
    """Ring for a job that may start now (submitted, a released dependant, a sweep's new trial), whose row is
    committed, from the process's ringing thread (Ringer)."""
    _ringer.ring(job_id)


def drain_rings(timeout_s: float) -> bool:
    """Wait for the rings asked for in this process to be sent: before it exits, and in tests."""
    return _ringer.drain(timeout_s)
