"""What the benchmarks read from a finished job and how they vary its spec: pure functions, nothing timed."""

from __future__ import annotations

from bench.budget import Budget
from bench.result import exit_code, failed
from bench.service import Finished, job_result
from bench.trainyard_job import job_spec, with_sections
from bench.workload import preset
from jobspec.events import DoneEvent, MetricsEvent, PhaseEvent
from jobspec.spec import JobSpec

CREATED = "2026-11-22T07:00:00+00:00"
T0 = 1_795_330_800.0  # CREATED as a POSIX timestamp


def report(step: int, at: float, rate: float, peak: float) -> MetricsEvent:
    values = {"samples_per_s": rate, "peak_mem_mb": peak, "loss": 2.0}
    return MetricsEvent(time=at, step=step, total_steps=40, epoch=1, values=values)


FINISHED = Finished(
    job={"created_at": CREATED, "latest_metrics": {"loss": 1.5}},
    events=[
        PhaseEvent(time=T0 + 9.5, phase="running"),
        report(10, T0 + 11, 100.0, 900.0),
        report(20, T0 + 12, 300.0, 1000.0),
        report(30, T0 + 13, 200.0, 1000.0),
        report(40, T0 + 14, 400.0, 1000.0),
        DoneEvent(time=T0 + 14.5, step=40),
    ],
)


def test_steady_rate_is_the_median_after_warm_up_or_the_last_report() -> None:
    assert FINISHED.steady_rate(warmup=15) == 300.0
    assert FINISHED.steady_rate(warmup=40) == 400.0
    assert Finished(FINISHED.job, []).steady_rate(warmup=0) is None


def test_times_come_from_the_trainer_events_against_the_post() -> None:
    assert FINISHED.start_latency_s() == 9.5
    assert FINISHED.seconds_between(20, 40) == 2.0
    assert FINISHED.seconds_between(15, 40) is None
    assert FINISHED.seconds_to_done(40) == 0.5
    assert FINISHED.peak_mem_mb() == 1000.0
    assert Finished(FINISHED.job, FINISHED.events[1:]).start_latency_s() is None


def test_job_result_leaves_memory_out_on_the_cpu() -> None:
    on_gpu = job_result("job", FINISHED, warmup=15, on_gpu=True, world_size=2)
    assert (on_gpu.images_per_s, on_gpu.peak_mem_mb, on_gpu.world_size, on_gpu.final_loss) == (
        300.0,
        1000.0,
        2,
        1.5,
    )
    assert job_result("job", FINISHED, warmup=15, on_gpu=False, world_size=1).peak_mem_mb is None


def test_variants_of_the_bench_job_are_valid_specs() -> None:
    base = job_spec(preset("resnet50", smoke=False), 2, False)
    dp = with_sections(base, parallel={"strategy": "dp"})
    assert dp["parallel"] == {"strategy": "dp", "gpus": [0, 1]}
    assert base["parallel"]["strategy"] == "ddp"  # the base is left alone
    quiet = with_sections(base, metrics={"every_n_steps": 100_000}, checkpoint={"every_n_epochs": 1})
    for spec in (dp, quiet):
        JobSpec.model_validate(spec)


def test_skipped_rows_do_not_fail_the_command() -> None:
    assert exit_code([failed("dp", "skipped: dp needs GPUs")]) == 0
    assert exit_code([failed("ddp", "job failed")]) == 1


def test_a_budget_too_short_for_a_variant_gives_none() -> None:
    assert Budget(3600).timeout(cap=120) == 120
    assert Budget(0).timeout(cap=120) is None
