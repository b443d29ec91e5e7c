"""`trainyard compare`: jobs side by side, a column each, the table one builds by hand to weigh strategies and
precisions; with --diff, how their specs differ, as the API works it out for the dashboard too, a row per
field."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import click
from rich.cells import cell_len

from app.cli.render import between, console, devices, duration, number
from app.cli.summary import Summary
from app.cli.table import FREE_TEXT_MIN, Column, Output, listing, print_table, table_wanted
from app.client import TrainyardClient
from core.gpu_series import GpuQuantity, split_series

if TYPE_CHECKING:
    from app.schemas import JobPublic, MetricPublic, SpecDiff


def _series(rows: list[MetricPublic], name: str) -> list[float]:
    return [row.value for row in sorted(rows, key=lambda row: row.step) if row.name == name]


def _utilisation(rows: list[MetricPublic]) -> list[float]:
    return [row.value for row in rows if (series := split_series(row.name)) and series[0] is GpuQuantity.UTIL]


def summarize(job: JobPublic, rows: list[MetricPublic]) -> Summary:
    throughput = _series(rows, "samples_per_s")
    loss = _series(rows, "loss")
    accuracy = _series(rows, "eval_accuracy")
    memory = _series(rows, "peak_mem_mb")
    utilisation = _utilisation(rows)
    tokens, mfu, perplexity = (_series(rows, name) for name in ("tokens_per_s", "mfu", "eval_perplexity"))
    return Summary(
        job_id=job.id,
        name=job.name,
        status=str(job.status),
        strategy=str(job.plan.get("strategy", "-")),
        precision=str(job.plan.get("precision", "-")),
        devices=devices(job),
        wall_s=between(job.running_at, job.finished_at),
        samples_per_s=statistics.median(throughput) if throughput else None,
        final_loss=loss[-1] if loss else None,
        final_eval_accuracy=accuracy[-1] if accuracy else None,
        peak_mem_mb=max(memory) if memory else None,
        gpu_util_pct=statistics.fmean(utilisation) if utilisation else None,
        tokens_per_s=statistics.median(tokens) if tokens else None,
        mfu=statistics.median(mfu) if mfu else None,
        final_eval_perplexity=perplexity[-1] if perplexity else None,
    )


# A row per quantity, a column per job, as the dashboard's Compare page lays them out: an 80-column terminal
# holds every number of two or three jobs, and a long name is what gives way.
QUANTITIES = (
    "name",
    "status",
    "strategy",
    "precision",
    "devices",
    "wall",
    "samples/s",
    "final loss",
    "eval acc",
    "peak MB",
    "GPU util %",
)
LANGUAGE_QUANTITIES = ("tokens/s", "MFU", "eval ppl")


def summary_cells(s: Summary, language: bool) -> tuple[str, ...]:
    """One job's column, in QUANTITIES' order (then LANGUAGE_QUANTITIES' when `language`)."""
    return (
        s.name,
        s.status,
        s.strategy,
        s.precision,
        s.devices,
        duration(s.wall_s),
        number(s.samples_per_s),
        number(s.final_loss),
        number(s.final_eval_accuracy),
        number(s.peak_mem_mb),
        number(s.gpu_util_pct),
        *((number(s.tokens_per_s), number(s.mfu), number(s.final_eval_perplexity)) if language else ()),
    )


def print_summaries(summaries: list[Summary], wide: bool) -> None:
    """The language-model rows appear when a job has their metrics. A job's column is never narrower than
    its widest cell below the name: only names are cut to fit."""
    language = any(s.tokens_per_s is not None for s in summaries)
    cells = [summary_cells(s, language) for s in summaries]
    columns = (
        Column(""),
        *(
            Column(f"job {s.job_id}", free_text=True, least=max(FREE_TEXT_MIN, *map(cell_len, job[1:])))
            for s, job in zip(summaries, cells, strict=True)
        ),
    )
    quantities = (*QUANTITIES, *(LANGUAGE_QUANTITIES if language else ()))
    rows = [(quantity, *(job[i] for job in cells)) for i, quantity in enumerate(quantities)]
    print_table(columns, rows, wide)


def print_differences(diff: SpecDiff, wide: bool) -> None:
    """A row per field that differs, a column per job: each job's value, whole with --wide."""
    if not diff.differences:
        console.print("the specs and plans do not differ")
        return
    columns = (Column("field"), *(Column(f"job {job.id}", free_text=True) for job in diff.jobs))
    rows = [(difference.field, *difference.values) for difference in diff.differences]
    print_table(columns, rows, wide)


@click.command()
@click.argument("job_ids", nargs=-1, required=True, type=int)
@click.option("--diff", is_flag=True, help="then how their specs and plans differ: field | job A | job B ...")
@listing
@click.pass_obj
def compare(
    client: TrainyardClient, job_ids: tuple[int, ...], diff: bool, wide: bool, output: Output
) -> None:
    """Compare jobs: strategy, precision, devices, wall time, throughput, final loss and accuracy, memory,
    mean GPU utilisation; for language models tokens/s, MFU and eval perplexity."""
    from app.cli.answers import Comparison  # pydantic: see app/cli/answers.py

    summaries = [summarize(client.get_job(job_id), client.all_metrics(job_id)) for job_id in job_ids]
    differences = client.compare(list(job_ids)) if diff else None
    if not table_wanted(Comparison(jobs=summaries, diff=differences), output):
        return
    print_summaries(summaries, wide)
    if differences is not None:
        print_differences(differences, wide)
