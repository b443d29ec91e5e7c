"""A job's secret values are masked out of its logs as served, however the log is read: whole, in ranges
that cut a value in two, from an offset inside one, or while the job is still writing it."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from app.services.runs import _utf8_boundary
from core.log_mask import MASK, _held_back, masked_read, masked_text

SECRET = "hf_s3cr3t-Value-0123456789"
LOG = f"start\ntoken={SECRET}\nagain {SECRET}{SECRET} end\nü done\n".encode()


def reader(log: bytes) -> Callable[[int, int], bytes]:
    return lambda start, size: log[start : start + size]


def follow(log: bytes, chunk: int, live: bool = False) -> bytes:
    """What a client that follows the log by next_offset, `chunk` bytes at a time, is shown."""
    shown, offset = b"", 0
    while True:
        data, length, more = masked_read(reader(log), offset, chunk, [SECRET], _utf8_boundary, live)
        shown += data
        offset += length
        if not more:
            return shown


def test_a_whole_read_masks_every_occurrence() -> None:
    data, length, more = masked_read(reader(LOG), 0, 1 << 20, [SECRET], _utf8_boundary, live=False)
    assert data == LOG.replace(SECRET.encode(), MASK)
    assert (length, more) == (len(LOG), False)


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 11, 13, 26, 27, 64])
def test_ranges_that_cut_a_value_never_show_a_byte_of_it(chunk: int) -> None:
    shown = follow(LOG, chunk)
    assert SECRET.encode()[:4] not in shown
    assert shown == LOG.replace(SECRET.encode(), MASK)


@pytest.mark.parametrize("offset", range(LOG.index(b"=") + 1, LOG.index(b"=") + len(SECRET) + 1))
def test_a_read_from_inside_a_value_shows_none_of_its_rest(offset: int) -> None:
    data, _, _ = masked_read(reader(LOG), offset, 40, [SECRET], _utf8_boundary, live=False)
    assert data.startswith(MASK) and SECRET.encode()[-4:] not in data


def test_a_value_half_written_by_a_running_job_waits_for_its_end() -> None:
    partial = b"token=" + SECRET.encode()[:10]
    data, length, more = masked_read(reader(partial), 0, 1024, [SECRET], _utf8_boundary, live=True)
    assert (data, length, more) == (b"token=", 6, True)
    # Once the job has ended nothing more comes: what is there is not the value.
    data, length, _ = masked_read(reader(partial), 0, 1024, [SECRET], _utf8_boundary, live=False)
    assert (data, length) == (partial, len(partial))


def test_without_secrets_a_read_is_the_log_as_written() -> None:
    data, length, more = masked_read(reader(LOG), 3, 10, [], _utf8_boundary, live=False)
    assert (data, length, more) == (LOG[3:13], 10, True)


def test_a_text_the_worker_quotes_is_masked_by_the_same_rule() -> None:
    text = LOG.decode()
    assert masked_text(text, [SECRET, ""]) == text.replace(SECRET, MASK.decode())
    assert masked_text(text, []) == text


def test_the_tail_held_back_is_the_longest_that_begins_a_value() -> None:
    """Against the definition, tail by tail, on self-similar text where values overlap themselves."""
    rng = random.Random(7)
    for _ in range(2000):
        data = _random_ab(rng, 0, 12)
        values = [_random_ab(rng, 1, 8) for _ in range(rng.randrange(1, 3))]
        tails = (start for start in range(len(data)) if any(v.startswith(data[start:]) for v in values))
        assert _held_back(data, values) == next(tails, len(data)), (data, values)


def _random_ab(rng: random.Random, shortest: int, longest: int) -> bytes:
    return bytes(rng.choice(b"ab") for _ in range(rng.randrange(shortest, longest)))
