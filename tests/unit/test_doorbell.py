"""The embedded broker's lean doorbell (DoorbellChannel): the same messages kombu's own channel stores."""

from __future__ import annotations

from kombu import Connection

from app.core.config import Settings
from tests.unit.conftest import enqueued
from worker.celery_app import RUN_JOB_TASK, SHARED_QUEUE, enqueue_job, get_celery


def test_rings_are_messages_kombus_own_channel_delivers_in_order(settings: Settings) -> None:
    for job_id in (7, 8):  # the first ring creates the queue's row, the second uses the id kept from it
        enqueue_job(job_id)
    assert enqueued(settings) == [7, 8]
    with Connection(settings.broker_url) as stock:  # "sqla+sqlite://": kombu's own SQLAlchemy transport
        channel = stock.default_channel
        delivered = [channel.basic_get(SHARED_QUEUE, no_ack=True) for _ in range(3)]
    assert delivered[2] is None
    for message, job_id in zip(delivered[:2], (7, 8), strict=True):
        assert message.headers["task"] == RUN_JOB_TASK
        args, kwargs, _embed = message.decode()
        assert (args, kwargs) == ([job_id], {})


def test_the_broker_appends_to_its_log_without_an_fsync_per_ring(settings: Settings) -> None:
    enqueue_job(1)
    with get_celery().connection_for_write() as connection:
        engine, _ = connection.default_channel._open()
        with engine.connect() as sql:
            assert sql.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            assert sql.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
