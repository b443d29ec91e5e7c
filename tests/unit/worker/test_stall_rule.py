"""limits.stall_timeout_s's rule (worker/attempts/stall.py): the start-up allowance until the step counter
first advances (which a longer set value extends), then the set value, or else 20x the median time between
the counter's advances, never less than 600 s (for NCCL, nor than its collective timeout and the flight
recorder's dump)."""

from __future__ import annotations

from worker.attempts.stall import FLIGHT_DUMP_S, STALL_FLOOR_S, StallWatch, flight_dump_floor

ALLOWANCE = 900.0


def watch(timeout_s: float | None = None) -> StallWatch:
    return StallWatch(timeout_s, ALLOWANCE, since=0.0)


def test_until_the_first_step_the_start_up_allowance_which_a_longer_set_value_extends() -> None:
    assert watch().stalled_for(0, now=ALLOWANCE - 1) is None
    assert watch().stalled_for(0, now=ALLOWANCE) == ALLOWANCE
    assert watch(30).stalled_for(0, now=ALLOWANCE - 1) is None, "a slow start-up is no stall"
    assert watch(2000).stalled_for(0, now=1999) is None
    assert watch(2000).stalled_for(0, now=2000) == 2000


def test_a_set_value_counts_from_each_advance() -> None:
    stall = watch(30)
    stall.stalled_for(0, now=0)
    assert stall.stalled_for(1, now=500) is None, "the first step after a long start-up"
    for at in range(520, 700, 20):
        assert stall.stalled_for(at, now=at) is None
    assert stall.stalled_for(680, now=709) is None
    assert stall.stalled_for(680, now=710) == 30


def test_the_rule_is_20_median_gaps_after_the_first_step_never_under_the_floor() -> None:
    stall = watch()
    stall.stalled_for(0, now=0)
    assert stall.limit_s() == ALLOWANCE, "no step yet: the start-up allowance"
    # The first advance's gap is start-up, not a step: 500 s must not count.
    stall.stalled_for(10, now=500)
    assert stall.limit_s() == ALLOWANCE, "one advance: no step time known yet"
    for n in range(1, 6):
        stall.stalled_for(10 + n * 10, now=500 + n * 60)
    assert stall.limit_s() == 20 * 60
    assert stall.stalled_for(60, now=800 + 20 * 60 - 1) is None
    assert stall.stalled_for(60, now=800 + 20 * 60) == 20 * 60
    fast = watch()
    fast.stalled_for(0, now=0)
    for n in range(1, 6):
        fast.stalled_for(n, now=n * 1.0)
    assert fast.limit_s() == STALL_FLOOR_S


def test_an_earlier_attempts_count_is_no_step_and_a_resume_below_it_is_one() -> None:
    stall = watch(30)
    stall.stalled_for(40, now=0)
    assert stall.stalled_for(40, now=100) is None, "the count an earlier attempt left: still start-up"
    assert stall.stalled_for(20, now=120) is None
    assert stall.stalled_for(20, now=149) is None
    assert stall.stalled_for(20, now=150) == 30


def test_a_resumed_attempts_first_step_is_an_advance_though_its_count_was_reached_before() -> None:
    stall = watch(30)
    stall.stalled_for((False, 3), now=0)  # attempt 2 starts where attempt 1 had counted 3
    assert stall.stalled_for((True, 3), now=200) is None, "its first step: start-up is over"
    assert stall.stalled_for((True, 3), now=229) is None
    assert stall.stalled_for((True, 3), now=230) == 30


def test_for_nccl_the_rule_waits_past_the_collective_timeout_and_its_dump() -> None:
    """NCCL's flight recorder, which alone names the missing rank, is dumped when a collective times out:
    the rule's stall comes after that, and a value the user set is kept as set."""
    assert flight_dump_floor("gloo", 600) == 0.0
    floor = flight_dump_floor("nccl", 600)
    assert floor == 600 + FLIGHT_DUMP_S
    rule = StallWatch(None, ALLOWANCE, since=0.0, floor_s=floor)
    chosen = StallWatch(30, ALLOWANCE, since=0.0, floor_s=floor)
    for stall in (rule, chosen):
        stall.stalled_for(0, now=0)
        for at in range(10, 40, 10):  # a step every 10 s: 20 of them make 200 s, under the floor
            stall.stalled_for(at, now=at)
    assert rule.limit_s() == floor
    assert rule.stalled_for(30, now=30 + floor - 1) is None
    assert chosen.limit_s() == 30
