"""Watching what a job produces: its logs and its metric series, once or live, and its history of states."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import click

from app.cli.follow import outcome_line
from app.cli.render import console, local_time, number
from app.cli.table import (
    Column,
    Output,
    listing,
    no_json_when_following,
    output_option,
    print_table,
    table_wanted,
)
from app.client import TrainyardClient

if TYPE_CHECKING:
    from app.schemas import LogChunk, MetricPublic

LOG_POLL_S = 1.0


@click.command()
@click.argument("job_id", type=int)
@click.option("--rank", type=click.IntRange(0, 4095), help="whose output; default: rank 0")
@click.option(
    "--launcher",
    is_flag=True,
    help="the launcher's log instead: each attempt's torchrun command and messages",
)
@click.option("--follow", "-f", is_flag=True, help="keep printing until the job ends")
@output_option
@click.pass_obj
def logs(
    client: TrainyardClient, job_id: int, rank: int | None, launcher: bool, follow: bool, output: Output
) -> None:
    """Print a job's log: rank 0's by default, where training prints its steps."""
    if launcher and rank is not None:
        raise click.UsageError("--rank and --launcher name two different logs; give one of them")
    no_json_when_following(follow, output)
    if not launcher:
        rank = rank or 0
    if output is Output.JSON:
        table_wanted(whole_log(client, job_id, rank), output)
        return
    offset = 0
    while True:
        chunk = client.logs(job_id, rank, offset)
        sys.stdout.write(chunk.text)
        sys.stdout.flush()
        offset = chunk.next_offset
        if chunk.eof or (not follow and chunk.next_offset == chunk.offset):
            return
        if chunk.next_offset == chunk.offset:
            time.sleep(LOG_POLL_S)


def whole_log(client: TrainyardClient, job_id: int, rank: int | None) -> LogChunk:
    """The log so far as one chunk, as the API would send it were its pages unlimited: a script reads it
    whole, and resumes at its next_offset."""
    first = last = client.logs(job_id, rank, 0)
    texts = [first.text]
    while not last.eof and last.next_offset != last.offset:
        last = client.logs(job_id, rank, last.next_offset)
        texts.append(last.text)
    return first.model_copy(update={"text": "".join(texts), "next_offset": last.next_offset, "eof": last.eof})


def metric_line(row: MetricPublic) -> str:
    return f"step {row.step:>7}  epoch {row.epoch:>3}  {row.name:<16} {number(row.value, 6)}"


METRIC_COLUMNS = (
    Column("step", justify="right"),
    Column("epoch", justify="right"),
    Column("name"),
    Column("value", justify="right"),
)


@click.command()
@click.argument("job_id", type=int)
@click.option("--name", help="one series, e.g. loss")
@click.option("--follow", "-f", is_flag=True, help="print new rows as the job reports them, until it ends")
@click.option("--max-points", type=click.IntRange(2, 10_000), help="shorten each series to this many points")
@listing
@click.pass_obj
def metrics(
    client: TrainyardClient,
    job_id: int,
    name: str | None,
    follow: bool,
    max_points: int | None,
    wide: bool,
    output: Output,
) -> None:
    """Print a job's metrics."""
    # Imported here, as the client does: the schemas (pydantic) are most of a call's start-up.
    from app.schemas import MetricsPublic, StreamEnd

    no_json_when_following(follow, output)
    if follow:
        for event in client.stream_metrics(job_id, name):
            if isinstance(event, StreamEnd):
                console.print(outcome_line(client.get_job(job_id)))
            else:
                console.print(metric_line(event))
        return
    if max_points is not None:
        page = client.metrics(job_id, name, max_points=max_points)
    else:
        page = MetricsPublic(data=client.all_metrics(job_id, name), next_after_step=None)
    if not table_wanted(page, output):
        return
    rows = [(str(row.step), str(row.epoch), row.name, number(row.value, 6)) for row in page.data]
    print_table(METRIC_COLUMNS, rows, wide)


EVENT_COLUMNS = (
    Column("at", rank=1),
    Column("from", rank=5),
    Column("to"),
    Column("attempt", rank=4, justify="right"),
    Column("reason", rank=2),
    Column("message", rank=3, free_text=True),
)


@click.command()
@click.argument("job_id", type=int)
@listing
@click.pass_obj
def events(client: TrainyardClient, job_id: int, wide: bool, output: Output) -> None:
    """A job's history: every change of state, when, why, and in which attempt."""
    history = client.events(job_id)
    if not table_wanted(history, output):
        return
    rows = [
        (
            local_time(event.at),
            str(event.from_status or "-"),
            str(event.to_status),
            str(event.attempt),
            event.reason or "-",
            event.message or "",
        )
        for event in history.data
    ]
    print_table(EVENT_COLUMNS, rows, wide)
