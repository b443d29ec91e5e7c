"""The worker learns that a forked standby ended from its pidfd being readable. A worker that supervises
many jobs holds a file per job's log, pipe and socket, so that descriptor may be past 1023, where select()
refuses it (ValueError: filedescriptor out of range): poll() takes any."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from worker.executors.local.warm.factory_handle import readable_now

PAST_SELECT = 1100


@pytest.fixture
def high_pipe() -> Iterator[tuple[int, int]]:
    """A pipe whose ends are numbered past select()'s last descriptor."""
    read_end, write_end = os.pipe()
    high = (os.dup2(read_end, PAST_SELECT), os.dup2(write_end, PAST_SELECT + 1))
    try:
        yield high
    finally:
        for fd in (read_end, write_end, *high):
            os.close(fd)


def test_a_descriptor_past_1023_is_read_as_any_other(high_pipe: tuple[int, int]) -> None:
    read_end, write_end = high_pipe
    assert not readable_now(read_end)
    os.write(write_end, b"x")
    assert readable_now(read_end)
