"""The scaling, pipeline, overheads, profile and suite outputs: pure functions, nothing timed."""

from __future__ import annotations

import argparse

import pytest

from bench.api_load import Phase, results_table
from bench.overheads import COMPILED_TARGETS, latency_table, reporting_table
from bench.profile_stacks import summarize
from bench.result import Result, failed
from bench.scaling import gpu_counts, scaling_rows
from bench.suite import TOTAL_S, steps


def test_scaling_rows_divide_by_the_one_gpu_job() -> None:
    results = [
        Result("single", 1000.0, 5000.0, latency_s=9.0),
        Result("ddp", 3800.0, 5100.0, world_size=4),
        Result("dp", None, None, world_size=4, error="skipped: dp needs GPUs"),
    ]
    rows = scaling_rows(results, base=1000.0)
    assert rows[0] == ["single", "1", "1,000", "1.00x", "100.0 %", "5,000", "9.0"]
    assert rows[1][:5] == ["ddp", "4", "3,800", "3.80x", "95.0 %"]
    assert rows[2][:5] == ["dp (skipped: dp needs GPUs)", "4", "—", "—", "—"]


def test_gpu_counts_start_at_one() -> None:
    assert gpu_counts("4,1,2") == [1, 2, 4]
    with pytest.raises(argparse.ArgumentTypeError):
        gpu_counts("2,4")


def test_reporting_cost_is_against_the_run_that_never_reports() -> None:
    table = reporting_table([Result("quiet", 1000.0, None), Result("metrics", 990.0, None, tail_s=0.25)])
    assert table.splitlines()[3] == "| metrics | 1/1 | 990 | +1.00 % | — | 0.25 |"


def test_each_rounds_cost_is_against_that_rounds_quiet_run() -> None:
    """A slow round slows every variant in it: its cost is 1 %, not the 11 % against the fast quiet run."""
    rounds = [
        Result("quiet", 1000.0, None),
        Result("metrics", 995.0, None, tail_s=0.2),
        Result("quiet", 900.0, None),
        Result("metrics", 891.0, None, tail_s=0.4),
        Result("quiet", 1000.0, None),
        failed("metrics", "job failed"),
    ]
    quiet, metrics = reporting_table(rounds).splitlines()[2:]
    assert quiet == "| quiet | 3/3 | 1,000 | +0.00 % | +0.00 … +0.00 % | — |"
    assert metrics == "| metrics (job failed) | 2/3 | 943 | +0.75 % | +0.50 … +1.00 % | 0.30 |"


def test_latency_table_gives_p50_max_the_failures_and_each_phase() -> None:
    phases = (("queued", 0.5), ("imports", 2.0))
    first_steps = [(*phases, ("first_step", s)) for s in (3.0, 1.0, 2.0)]
    runs = [
        Result("1 GPU single", 1.0, None, latency_s=s, phases=p)
        for s, p in zip((8.0, 9.0, 12.0), first_steps, strict=True)
    ]
    runs.append(failed("2 GPU ddp", "job failed"))
    lines = latency_table(runs).splitlines()
    one, two = lines[2:4]
    assert one == "| 1 GPU single | 3/3 | 9.0 | 12.0 | p50 ≤ 5 | 8.0, 9.0, 12.0 | 2.0 |"
    assert two == "| 2 GPU ddp | 0/1 | — | — | p50 ≤ 7 | 2 GPU ddp (failed: job failed) | — |"
    assert lines[-3:] == ["| queued | 0.50 | — |", "| imports | 2.00 | — |", "| first_step | 2.00 | — |"]


def test_the_compiled_table_has_no_target_for_the_empty_cache_job() -> None:
    cold = Result("1 GPU compiled, empty cache", 1.0, None, latency_s=15.0, phases=(("first_step", 55.0),))
    warm = [Result("1 GPU compiled, repeated", 1.0, None, latency_s=s, phases=()) for s in (6.0, 7.0)]
    lines = latency_table([cold, *warm], COMPILED_TARGETS).splitlines()
    assert lines[2] == "| 1 GPU compiled, empty cache | 1/1 | 15.0 | 15.0 |  | 15.0 | 55.0 |"
    assert lines[3] == "| 1 GPU compiled, repeated | 2/2 | 6.5 | 7.0 | p50 ≤ 10 | 6.0, 7.0 | — |"


def test_profile_summary_counts_innermost_libraries_and_our_functions_once() -> None:
    raw = "\n".join(
        [
            "main (app/main.py:3);get_job (app/api/routes/jobs.py:70);"
            "execute (/v/site-packages/sqlalchemy/orm/session.py:9) 3",
            "main (app/main.py:3);dumps (json/encoder.py:5) 1",
            "not a sample line",
        ]
    )
    text = summarize(raw)
    assert "4 busy samples" in text
    assert "| sqlalchemy | 75.0 % |" in text
    assert "| main (main.py) | 100.0 % |" in text
    assert "| get_job (jobs.py) | 75.0 % |" in text
    assert summarize("") == ""


def test_phase_quantiles() -> None:
    latencies = [float(i) for i in range(1, 101)]
    phase = Phase("GET", sent=100, ok=100, seconds=1.0, latencies_ms=latencies, server_cpu_s=0.05)
    assert phase.quantile(0.5) == pytest.approx(50.5)
    assert phase.quantile(0.99) == pytest.approx(99.01)
    row = "| GET | 100/100 | 100 | 50.5 | 99.0 | 100.0 | 0.50 | — |"  # no client CPU given
    assert results_table([phase]).splitlines()[2] == row


@pytest.mark.parametrize("call", [1, 2])
def test_suite_steps_pass_smoke_and_budgets(call: int) -> None:
    for step in steps(call, smoke=True):
        argv = step.argv(100, smoke=True)
        assert "--smoke" in argv and "--steps" not in argv
        assert argv[-2:] == ["--budget-s", "100"]
        assert step.cap_s <= TOTAL_S
    assert steps(call, smoke=False)[-1].cap_s == TOTAL_S  # the last step takes what is left
