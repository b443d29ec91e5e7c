"""The benchmark table's formatting and ratios: pure functions, nothing timed."""

from __future__ import annotations

import pytest

from bench.result import Result, emit, parse
from bench.table import HEADER, markdown_table, ratio

SEED = Result("seed loop (fp32)", images_per_s=1000.0, peak_mem_mb=2048.0)
CEILING = Result("ceiling", images_per_s=8000.0, peak_mem_mb=4096.4)
JOB = Result("Trainyard job", images_per_s=6000.0, peak_mem_mb=4500.0, latency_s=12.345)


def test_ratio_divides_and_gives_none_when_unknown() -> None:
    assert ratio(6000.0, 8000.0) == 0.75
    assert ratio(None, 8000.0) is None
    assert ratio(6000.0, None) is None
    assert ratio(6000.0, 0.0) is None


def test_table_rows_hold_throughput_ratios_memory_and_latency() -> None:
    lines = markdown_table([SEED, CEILING, JOB], seed=SEED, ceiling=CEILING).splitlines()
    assert "\n".join(lines[:2]) == HEADER
    assert lines[2] == "| seed loop (fp32) | 1,000 | 1.00x | 0.12x | 2,048 | — |"
    assert lines[3] == "| ceiling | 8,000 | 8.00x | 1.00x | 4,096 | — |"
    assert lines[4] == "| Trainyard job | 6,000 | 6.00x | 0.75x | 4,500 | 12.3 |"


def test_a_failed_variant_shows_why_and_leaves_its_ratios_empty() -> None:
    failed_ceiling = Result("ceiling", images_per_s=None, peak_mem_mb=None, error="exit 1, no result")
    lines = markdown_table([SEED, failed_ceiling, JOB], seed=SEED, ceiling=failed_ceiling).splitlines()
    assert lines[3] == "| ceiling (failed: exit 1, no result) | — | — | — | — | — |"
    assert lines[4] == "| Trainyard job | 6,000 | 6.00x | — | 4,500 | 12.3 |"


def test_the_last_result_line_wins_over_other_output(capsys: pytest.CaptureFixture[str]) -> None:
    emit(SEED)
    emit(JOB)
    printed = "NCCL INFO something\n" + capsys.readouterr().out + "trailing noise\n"
    assert parse(printed) == JOB
    assert parse("no result here\n") is None
