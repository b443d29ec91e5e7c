"""The Celery app. The broker only rings a doorbell carrying a job id; the database decides who runs what."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from functools import lru_cache
from pathlib import Path
from typing import Any

from celery import Celery
from kombu.transport import sqlalchemy as kombu_sqla
from kombu.utils.json import dumps
from sqlalchemy import Engine, event, insert

from app.core.config import get_settings

RUN_JOB_TASK = "trainyard.run_job"  # on the shared queue: any worker places the job on hosts
RUN_NODE_TASK = "trainyard.run_node"  # on a host's own queue: only that host's worker runs its node
SHARED_QUEUE = "trainyard"


def host_queue(host: str) -> str:
    return f"{SHARED_QUEUE}.host.{host}"


EMBEDDED_BROKER = "sqla+sqlite:///"
# kombu picks its transport from a URL's "sqla+" prefix, over any transport it is given.
_KOMBU_SQLA_PREFIX = "sqla+"


def put_embedded_broker_in_wal(broker_url: str) -> None:
    """The SQLite broker in WAL mode, which the file keeps once set: ringing the doorbell then never waits
    for a worker's poll, and costs the API less per submission. (Its polling interval cannot be shortened:
    kombu hands every transport option of this transport to create_engine.)"""
    if not broker_url.startswith(EMBEDDED_BROKER):
        return
    path = Path(broker_url.removeprefix(EMBEDDED_BROKER))
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA journal_mode=WAL")


def _no_fsync_per_commit(dbapi_connection: Any, _record: Any) -> None:
    # In WAL mode a commit then only appends to the log. A power cut may lose the last rings; a lost ring is
    # what the reaper already re-rings (the database, not the broker, holds the job).
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


class DoorbellChannel(kombu_sqla.Channel):
    """kombu's SQLAlchemy channel with a leaner publish. kombu's own `_put` looks the queue's row up through
    the ORM and stores each message through an ORM unit of work and an fsync: ~1.5 of the ~2.2 ms of CPU a
    ring cost, the largest part of a submission. This one stores the same row (kombu's table, its column
    defaults, kombu's serialisation) with one Core insert, the queue's id looked up once per channel.
    Consuming is kombu's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queue_ids: dict[str, int] = {}
        self._insert_message = insert(self.message_cls.__table__)

    def _engine_from_config(self) -> Engine:
        engine: Engine = super()._engine_from_config()
        event.listen(engine, "connect", _no_fsync_per_commit)
        return engine

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        if queue not in self._queue_ids:
            self._queue_ids[queue] = self._get_or_create(queue).id
        engine, _ = self._open()
        with engine.begin() as connection:
            connection.execute(
                self._insert_message, {"payload": dumps(message), "queue_id": self._queue_ids[queue]}
            )


class EmbeddedBroker(kombu_sqla.Transport):
    Channel = DoorbellChannel


def broker_settings(broker_url: str) -> dict[str, Any]:
    """Celery's broker settings for `broker_url`: the embedded SQLite broker through EmbeddedBroker."""
    if not broker_url.startswith(EMBEDDED_BROKER):
        return {"broker_url": broker_url}
    return {"broker_url": broker_url.removeprefix(_KOMBU_SQLA_PREFIX), "broker_transport": EmbeddedBroker}


@lru_cache
def get_celery() -> Celery:
    settings = get_settings()
    put_embedded_broker_in_wal(settings.broker_url)
    app = Celery("trainyard", include=["worker.tasks"])
    app.conf.update(
        **broker_settings(settings.broker_url),
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


def dispatch_node(job_id: int, attempt: int, node_rank: int, host: str) -> None:
    """Hand one node of a placed job to the worker of the host that leased its GPUs, and to no other."""
    get_celery().send_task(RUN_NODE_TASK, args=[job_id, attempt, node_rank], queue=host_queue(host))
