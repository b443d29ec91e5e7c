"""Commands on jobs: submit, ls, status, cancel, retry, priority."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from app.cli.code import FolderArgument, with_code
from app.cli.follow import follow_job, outcome_line
from app.cli.forecast import print_forecast
from app.cli.render import (
    console,
    devices,
    duration,
    local_time,
    number,
    phrases,
    program_text,
    progress_text,
    ran_for,
    resumed_text,
    startup_text,
    waiting_or_message,
    warnings_console,
    wrap,
)
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
from app.retry_from import RetryFrom
from core.states import JobStatus

if TYPE_CHECKING:
    from app.schemas import JobPublic, JobSubmitted


def read_spec(path: Path) -> dict[str, Any]:
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{path} is not valid JSON ({exc}); fix the file and try again") from exc
    if not isinstance(spec, dict):
        raise click.ClickException(f"{path} holds a JSON {type(spec).__name__}; a spec is a JSON object")
    return spec


class JobIds(click.ParamType):
    name = "ids"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            return [int(part) for part in str(value).split(",") if part.strip()]
        except ValueError:
            self.fail(f"{value!r} is not a list of job ids; write them comma-separated, e.g. 3,4", param, ctx)


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
@click.option(
    "--depends-on",
    metavar="IDS",
    type=JobIds(),
    help="job ids, comma-separated, that must succeed before it starts (the spec's depends_on)",
)
@output_option
@click.pass_obj
def submit(
    client: TrainyardClient,
    spec_file: Path,
    follow: bool,
    dry_run: bool,
    code_folder: Path | None,
    depends_on: list[int] | None,
    output: Output,
) -> None:
    """Submit a job spec."""
    no_json_when_following(follow, output)
    spec = read_spec(spec_file)
    if depends_on is not None:
        spec["depends_on"] = depends_on
    with_code(client, spec, code_folder)
    submitted = client.submit(spec, dry_run=dry_run)
    if table_wanted(submitted, output):
        print_submitted(submitted)
    plan = submitted.plan
    for warning in [*plan.warnings, *plan.not_runnable_because]:
        warnings_console.print(f"warning: {warning}", style="yellow")
    if follow and submitted.job is not None:
        exit_with_outcome(follow_job(client, submitted.job.id))


def print_submitted(submitted: JobSubmitted) -> None:
    """A dry run's plan, whole, as JSON; a job's one line."""
    plan = submitted.plan
    if submitted.job is None:
        console.print_json(plan.model_dump_json())
        return
    job = submitted.job
    wrap(
        f"job {job.id} ({job.name}) {job.status}: "
        + phrases([f"{plan.strategy} x{plan.world_size} on {plan.device}", plan.precision])
    )


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
@output_option
@click.pass_obj
def status(client: TrainyardClient, job_id: int, follow: bool, output: Output) -> None:
    """Show one job: state, plan, progress, latest metrics."""
    no_json_when_following(follow, output)
    if follow:
        exit_with_outcome(follow_job(client, job_id))
        return
    job = client.get_job(job_id)
    if table_wanted(job, output):
        print_status(job)


def print_status(job: JobPublic) -> None:
    """A field a line, each wrapped under its first word, never inside a phrase ("ETA 1:02")."""
    plan = job.plan
    wrap(
        f"job {job.id} ({job.name}): "
        + phrases([str(job.status), f"attempt {job.attempt}", f"priority {job.priority}"])
    )
    if job.parent_id is not None:
        wrap(f"job {job.parent_id}{resumed_text(job)}", "parent")
    if depends_on := job.spec.get("depends_on"):
        wrap(", ".join(f"job {job_id}" for job_id in depends_on), "depends")
    if job.status_reason:
        wrap(job.status_reason, "reason")
    if note := waiting_or_message(job):
        wrap(note, "message")
    # A program job's script picks its own batch: the plan has none to show.
    batch = [] if job.spec.get("program") else [f"per-rank batch {plan.get('per_rank_batch')}"]
    wrap(phrases([f"{plan.get('strategy')} on {devices(job)}", str(plan.get("precision")), *batch]), "plan")
    if job.slurm_job_id is not None:
        wrap(f"job {job.slurm_job_id}{f' on {job.host}' if job.host else ''}", "slurm")
    if job.spec.get("code"):
        wrap(job.spec["code"], "code")
    if program := job.spec.get("program"):
        wrap(program_text(program), "program")
    if job.timings is not None:
        wrap(startup_text(job.timings), "start-up")
    wrap(phrases([progress_text(job), f"ETA {duration(job.progress.eta_s)}"]), "progress")
    print_forecast(job)
    latest = phrases(f"{name} {number(value)}" for name, value in sorted(job.latest_metrics.items()))
    wrap(latest or "-", "latest")


@click.command()
@click.argument("job_id", type=int)
@output_option
@click.pass_obj
def cancel(client: TrainyardClient, job_id: int, output: Output) -> None:
    """Cancel a job: a queued one at once, a running one after its worker stops it."""
    job = client.cancel(job_id)
    if table_wanted(job, output):
        console.print(outcome_line(job))


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
@output_option
@click.pass_obj
def retry(client: TrainyardClient, job_id: int, start: str, again: bool, output: Output) -> None:
    """Run a failed, timed-out or cancelled job again as a new job, from its latest checkpoint."""
    submitted, created = client.retry(job_id, start=RetryFrom(start), again=again)
    if not table_wanted(submitted, output):
        return
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
@output_option
@click.pass_obj
def priority(client: TrainyardClient, job_id: int, value: int, output: Output) -> None:
    """Change a queued job's priority (higher starts first)."""
    job = client.set_priority(job_id, value)
    if table_wanted(job, output):
        console.print(f"job {job.id} priority {job.priority}: {waiting_or_message(job)}")


@click.command()
@click.argument("job_id", type=int)
@click.pass_obj
def delete(client: TrainyardClient, job_id: int) -> None:
    """Delete a finished job: its row, events, metrics, checkpoints and run directory."""
    client.delete(job_id)
    console.print(f"deleted job {job_id}")
