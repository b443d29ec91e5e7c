"""The doorbell: rings on the embedded broker are task messages by name, carrying only the job id."""

from __future__ import annotations

import threading

from kombu import Connection

from core.config import Settings
from core.doorbell import (
    RUN_JOB_TASK,
    SHARED_QUEUE,
    Ringer,
    enqueue_job,
    pending_rings,
    ring_unless_pending,
)
from tests.unit.conftest import enqueued


def test_rings_are_task_messages_delivered_in_order(settings: Settings) -> None:
    for job_id in (7, 8):
        enqueue_job(job_id)
    assert enqueued(settings) == [7, 8]
    with Connection(settings.broker_url) as stock:
        channel = stock.default_channel
        delivered = [channel.basic_get(SHARED_QUEUE, no_ack=True) for _ in range(3)]
    assert delivered[2] is None
    for message, job_id in zip(delivered[:2], (7, 8), strict=True):
        assert message.headers["task"] == RUN_JOB_TASK
        args, kwargs, _embed = message.decode()
        assert (args, kwargs) == ([job_id], {})


def test_a_ring_is_not_sent_while_one_waits(settings: Settings) -> None:
    assert ring_unless_pending(7)
    assert not ring_unless_pending(8)
    with Connection(settings.broker_url) as stock:
        stock.default_channel.basic_get(SHARED_QUEUE, no_ack=True)  # a worker takes it
    assert pending_rings() == 0
    assert ring_unless_pending(9)
    assert enqueued(settings) == [7, 9]  # the embedded broker keeps the one taken, marked delivered


def test_the_submissions_that_come_while_a_ring_is_sent_share_the_next_one() -> None:
    sent: list[int] = []
    started, release = threading.Event(), threading.Event()

    def slow_send(job_id: int) -> None:
        started.set()
        release.wait(10)
        sent.append(job_id)

    ringer = Ringer(slow_send, gap_s=0)
    ringer.ring(1)
    assert started.wait(10)  # the first ring is being sent
    for job_id in range(2, 51):
        ringer.ring(job_id)
    release.set()
    assert ringer.drain(10)
    assert sent == [1, 50]  # the newest names the one ring sent after all of them were committed


def test_a_failed_ring_leaves_the_ringer_ringing_for_later_ones() -> None:
    sent: list[int] = []

    def send(job_id: int) -> None:
        if job_id == 1:
            raise OSError("broker down")
        sent.append(job_id)

    ringer = Ringer(send, gap_s=0)
    ringer.ring(1)
    assert ringer.drain(10)
    ringer.ring(2)
    assert ringer.drain(10)
    assert sent == [2]
