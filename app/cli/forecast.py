"""A job's forecast (issue 44) beside what it measured, in `trainyard status`, and `trainyard forecast
accuracy`: how close the forecasts of recent finished jobs came."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from app.cli.render import duration, number, phrases, wrap
from app.cli.table import Column, Output, listing, print_table, table_wanted
from app.client import TrainyardClient

if TYPE_CHECKING:
    from app.schemas import ForecastComparison, ForecastSummary, JobPublic
    from jobspec.forecast import Forecast

GiB = 2**30


def gib(count: int | None) -> str:
    return "-" if count is None else f"{count / GiB:.1f} GiB"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{number(value, 3)} s"


def times(value: float | None) -> str:
    """A forecast / measured ratio: 1.02x."""
    return "-" if value is None else f"{value:.2f}x"


def forecast_text(forecast: Forecast) -> str:
    """ "peak 5.4 GiB of 139.8 GiB, fits, step 0.016 s, job 0:05, basis: …": the basis last and free to
    wrap, being a sentence."""
    device = forecast.device_memory_bytes
    peak = f"peak {gib(forecast.peak_memory_bytes)}" + ("" if device is None else f" of {gib(device)}")
    parts = [peak, "fits" if forecast.fits else "does not fit", f"step {seconds(forecast.step_time_s)}"]
    if forecast.job_time_s is not None:
        parts.append(f"job {duration(forecast.job_time_s)}")
    return f"{phrases(parts)}, basis: {forecast.basis}"


def measured_text(forecast: Forecast) -> str:
    """ "peak 5.3 GiB (forecast 1.02x), step 0.018 s (forecast 0.88x)", or "" before any was reported."""
    # The schemas (pydantic) are imported where a job's answer is shown: every call loads this module.
    from app.schemas import forecast_ratio

    peak, step = forecast.measured_peak_memory_bytes, forecast.measured_step_time_s
    parts = []
    if peak is not None:
        parts.append(f"peak {gib(peak)} (forecast {times(forecast_ratio(forecast.peak_memory_bytes, peak))})")
    if step is not None:
        parts.append(f"step {seconds(step)} (forecast {times(forecast_ratio(forecast.step_time_s, step))})")
    return phrases(parts)


def print_forecast(job: JobPublic) -> None:
    """`status`'s forecast: and measured: lines; a job without a forecast says why, when it knows."""
    shown, note = job.plan.get("forecast"), job.plan.get("forecast_note")
    if shown is None:
        wrap("none" + (f": {note}" if note else ""), "forecast")
        return
    from jobspec.forecast import Forecast

    forecast = Forecast.model_validate(shown)
    wrap(forecast_text(forecast), "forecast")
    if measured := measured_text(forecast):
        wrap(measured, "measured")


ACCURACY_COLUMNS = (
    Column("job"),
    Column("name", free_text=True),
    Column("model", rank=2),
    Column("gpu", rank=1, free_text=True),
    Column("peak GiB", justify="right"),
    Column("measured", justify="right"),
    Column("ratio", justify="right"),
    Column("step s", justify="right"),
    Column("measured", justify="right"),
    Column("ratio", justify="right"),
)


def accuracy_row(row: ForecastComparison) -> tuple[str, ...]:
    def in_gib(count: int | None) -> str:
        return "-" if count is None else f"{count / GiB:.1f}"

    return (
        str(row.job_id),
        row.name,
        row.model_kind or "-",
        row.gpu or "cpu",
        in_gib(row.forecast_peak_memory_bytes),
        in_gib(row.measured_peak_memory_bytes),
        times(row.peak_ratio),
        number(row.forecast_step_time_s, 3),
        number(row.measured_step_time_s, 3),
        times(row.step_ratio),
    )


def summary_text(summary: ForecastSummary) -> str:
    return (
        f"{summary.jobs} jobs; forecast / measured, median: peak {times(summary.peak_ratio_median)} "
        f"({summary.within_10pct_peak} within 10 %), step {times(summary.step_ratio_median)} "
        f"({summary.within_20pct_step} within 20 %)"
    )


@click.group("forecast")
def forecast() -> None:
    """Forecasts of peak memory and step time (plan.forecast) against what jobs measured."""


@forecast.command()
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 500))
@listing
@click.pass_obj
def accuracy(client: TrainyardClient, limit: int, wide: bool, output: Output) -> None:
    """Recent finished jobs' forecast against measured peak memory and step time (ratio: forecast /
    measured, above 1 the forecast was high), newest first, and their medians."""
    answer = client.forecast_accuracy(limit)
    empty = "no finished job of yours has both a forecast and measured figures yet"
    if not table_wanted(answer, output, empty):
        return
    print_table(ACCURACY_COLUMNS, [accuracy_row(row) for row in answer.data], wide)
    wrap(summary_text(answer.summary))
