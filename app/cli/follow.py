"""`--follow`: a live progress bar for one job, until it ends."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Column
from rich.text import Text

from app.cli.render import console, duration, number, waiting_or_message
from app.client import TrainyardClient
from core.states import JobStatus

if TYPE_CHECKING:
    from app.schemas import JobPublic

POLL_S = 1.0
BAR_WIDTH = 12  # narrow, so that an 80-column line has room for the loss and throughput


def live_detail(job: JobPublic) -> str:
    """What the bar shows beside the count: why it waits, or the reduced loss and the throughput."""
    if job.status is not JobStatus.RUNNING:
        return waiting_or_message(job)
    metrics = job.latest_metrics
    return f"loss {number(metrics.get('loss'))} • {number(metrics.get('samples_per_s'))} samples/s"


def outcome_line(job: JobPublic) -> Text:
    style = "green" if job.status is JobStatus.SUCCEEDED else "red" if job.status.is_terminal else "yellow"
    reason = f" ({job.status_reason})" if job.status_reason else ""
    message = f": {job.message}" if job.message else ""
    return Text.assemble(f"job {job.id} ", (str(job.status), style), reason + message)


def follow_job(client: TrainyardClient, job_id: int) -> JobPublic:
    """Poll the job until it ends; returns it as it ended. The job row carries everything the bar needs
    (status, step/total, ETA, latest metrics), so one small request a second is enough."""
    # The job, its count and ETA are never cut: the detail alone takes what width is left (the one ratio
    # column of a line as wide as the terminal) and ends in "…" when it needs more.
    columns = (
        TextColumn("{task.description}", markup=False, table_column=Column(no_wrap=True)),
        BarColumn(bar_width=BAR_WIDTH, table_column=Column(no_wrap=True)),
        MofNCompleteColumn(table_column=Column(no_wrap=True)),
        TextColumn("ETA {task.fields[eta]}", markup=False, table_column=Column(no_wrap=True)),
        TextColumn(
            "{task.fields[detail]}",
            markup=False,
            table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"),
        ),
    )
    with Progress(*columns, console=console, expand=True) as bar:
        task = bar.add_task(f"job {job_id}", total=None, eta="-", detail="")
        while True:
            job = client.get_job(job_id)
            bar.update(
                task,
                description=f"job {job.id} {job.status}",
                completed=job.progress.step,
                total=job.progress.total,
                eta=duration(job.progress.eta_s),
                detail=live_detail(job),
            )
            if job.status.is_terminal:
                break
            time.sleep(POLL_S)
    console.print(outcome_line(job))
    return job
