"""Commands on jobs: submit, ls, status, cancel, retry, priority."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from app.cli.code import FolderArgument, with_code
from app.cli.follow import follow_job, outcome_line
from app.cli.render import (
    console,
    devices,
    duration,
    local_time,
    number,
    program_text,
    progress_text,
    ran_for,
    resumed_text,
    startup_text,
    waiting_or_message,
    warnings_console,
)
from app.cli.table import Column, Output, listing, print_table, table_wanted
from app.client import TrainyardClient
from app.schemas import JobPublic, RetryFrom
from core.states import JobStatus


def read_spec(path: Path) -> dict[str, Any]:
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{path} is not valid JSON ({exc}); fix the file and try again") from exc
    if not isinstance(spec, dict):
        raise click.ClickException(f"{path} holds a JSON {type(spec).__name__}; a spec is a JSON object")
    return spec


def exit_with_outcome(job: JobPublic) -> None:
    """Scripts chain on the exit status: anything but success is a failure."""
    if job.status is not JobStatus.SUCCEEDED:
        raise SystemExit(1)


@click.command()
@click.argument(
    "spec_file", metavar="SPEC.json", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--follow", "-f", is_flag=True, help="show live progress; exit non-zero unless it succeeds")
@click.option("--dry-run", is_flag=True, help="print the plan the job would run, store nothing")
@click.option(
    "--code", "code_folder", metavar="DIR", type=FolderArgument, help="push DIR first, as the spec's code"
)
@click.pass_obj
def submit(
    client: TrainyardClient, spec_file: Path, follow: bool, dry_run: bool, code_folder: Path | None
) -> None:
    """Submit a job spec."""
    spec = read_spec(spec_file)
    with_code(client, spec, code_folder)
    submitted = client.submit(spec, dry_run=dry_run)
    plan = submitted.plan
    if submitted.job is None:
        console.print_json(plan.model_dump_json())
    else:
        job = submitted.job
        console.print(
            f"job {job.id} ({job.name}) {job.status}: {plan.strategy} x{plan.world_size} on {plan.device}, "
            f"{plan.precision}"
        )
    for warning in [*plan.warnings, *plan.not_runnable_because]:
        warnings_console.print(f"warning: {warning}", style="yellow")
    if follow and submitted.job is not None:
        exit_with_outcome(follow_job(client, submitted.job.id))


JOB_COLUMNS = (
    Column("id"),
    Column("name"),
    Column("parent", rank=8),
    Column("status"),
    Column("progress"),
    Column("strategy", rank=4),
    Column("devices", rank=3),
    Column("precision", rank=6),
    Column("ran for", rank=2),
    Column("eval acc", rank=5),
    Column("created", rank=7),
    Column("note", rank=1, free_text=True),
)


def job_row(job: JobPublic) -> tuple[str, ...]:
    failed = job.status in (JobStatus.FAILED, JobStatus.TIMED_OUT) and job.status_reason
    return (
        str(job.id),
        job.name,
        "" if job.parent_id is None else str(job.parent_id),
        str(job.status),
        progress_text(job),
        str(job.plan.get("strategy", "-")),
        devices(job),
        str(job.plan.get("precision", "-")),
        ran_for(job),
        number(job.latest_metrics.get("eval_accuracy")),
        local_time(job.created_at),
        f"{job.status_reason}: {job.message or ''}" if failed else waiting_or_message(job),
    )


@click.command("ls")
@click.option("--status", "status", type=click.Choice([s.value for s in JobStatus]), help="only this state")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 200))
@listing
@click.pass_obj
def list_jobs(client: TrainyardClient, status: str | None, limit: int, wide: bool, output: Output) -> None:
    """List jobs, newest first."""
    jobs = client.list_jobs(JobStatus(status) if status else None, limit=limit)
    if not table_wanted(jobs, output):
        return
    print_table(JOB_COLUMNS, [job_row(job) for job in jobs.data], wide)


@click.command()
@click.argument("job_id", type=int)
@click.option("--follow", "-f", is_flag=True, help="show live progress until the job ends")
@click.pass_obj
def status(client: TrainyardClient, job_id: int, follow: bool) -> None:
    """Show one job: state, plan, progress, latest metrics."""
    if follow:
        exit_with_outcome(follow_job(client, job_id))
        return
    job = client.get_job(job_id)
    plan = job.plan
    console.print(f"job {job.id} ({job.name}): {job.status}, attempt {job.attempt}, priority {job.priority}")
    if job.parent_id is not None:
        console.print(f"  parent:   job {job.parent_id}{resumed_text(job)}")
    if job.status_reason or job.message:
        console.print(f"  reason:   {job.status_reason or '-'}: {waiting_or_message(job)}")
    # A program job's script picks its own batch: the plan has none to show.
    batch = "" if job.spec.get("program") else f", per-rank batch {plan.get('per_rank_batch')}"
    console.print(f"  plan:     {plan.get('strategy')} on {devices(job)}, {plan.get('precision')}{batch}")
    if job.slurm_job_id is not None:
        console.print(f"  slurm:    job {job.slurm_job_id}{f' on {job.host}' if job.host else ''}")
    if job.spec.get("code"):
        console.print(f"  code:     {job.spec['code']}")
    if program := job.spec.get("program"):
        console.print(f"  program:  {program_text(program)}")
    if job.timings is not None:
        console.print(f"  start-up: {startup_text(job.timings)}")
    console.print(f"  progress: {progress_text(job)}, ETA {duration(job.progress.eta_s)}")
    latest = ", ".join(f"{name} {number(value)}" for name, value in sorted(job.latest_metrics.items()))
    console.print(f"  latest:   {latest or '-'}")


@click.command()
@click.argument("job_id", type=int)
@click.pass_obj
def cancel(client: TrainyardClient, job_id: int) -> None:
    """Cancel a job: a queued one at once, a running one after its worker stops it."""
    console.print(outcome_line(client.cancel(job_id)))


@click.command()
@click.argument("job_id", type=int)
@click.option(
    "--from",
    "start",
    type=click.Choice([start.value for start in RetryFrom]),
    default=RetryFrom.LATEST.value,
    show_default=True,
    help="latest: continue from the job's latest checkpoint; scratch: run its spec as submitted",
)
@click.option("--again", is_flag=True, help="make another retry even if one with the same spec was made")
@click.pass_obj
def retry(client: TrainyardClient, job_id: int, start: str, again: bool) -> None:
    """Run a failed, timed-out or cancelled job again as a new job, from its latest checkpoint."""
    submitted, created = client.retry(job_id, start=RetryFrom(start), again=again)
    job = submitted.job
    assert job is not None  # a retry is never a dry run
    made = (
        f"a retry of job {job_id}{resumed_text(job)}"
        if created
        else f"job {job_id}'s retry, made before (--again makes another)"
    )
    console.print(f"job {job.id} ({job.name}) {job.status}: {made}")


@click.command()
@click.argument("job_id", type=int)
@click.argument("value", type=click.IntRange(-100, 100))
@click.pass_obj
def priority(client: TrainyardClient, job_id: int, value: int) -> None:
    """Change a queued job's priority (higher starts first)."""
    job = client.set_priority(job_id, value)
    console.print(f"job {job.id} priority {job.priority}: {waiting_or_message(job)}")


@click.command()
@click.argument("job_id", type=int)
@click.pass_obj
def delete(client: TrainyardClient, job_id: int) -> None:
    """Delete a finished job: its row, events, metrics, checkpoints and run directory."""
    client.delete(job_id)
    console.print(f"deleted job {job_id}")
