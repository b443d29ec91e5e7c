"""`trainyard sweep`: submit a hyperparameter sweep (docs/sweeps.md), follow its trials live, list, show and
cancel sweeps."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from app.cli.code import FolderArgument, with_code
from app.cli.jobs import read_spec
from app.cli.render import console, local_time, number, phrases, wrap
from app.cli.sweep_follow import follow_sweep
from app.cli.sweep_view import (
    COMPLETED,
    best_text,
    ended_text,
    objective_text,
    print_summary,
    print_trials,
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

if TYPE_CHECKING:
    from app.schemas import SweepPublic


@click.group("sweep")
def sweep() -> None:
    """Hyperparameter sweeps: one job spec run as many trials with parameters Optuna picks, the ones doing
    worse stopped early (docs/sweeps.md)."""


@sweep.command()
@click.argument(
    "sweep_file", metavar="SWEEP.json", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--code", "code_folder", metavar="DIR", type=FolderArgument, help="push DIR first, as the spec's code"
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="a live table of its trials (a line per change where stdout is no terminal); exit non-zero "
    "unless it completes",
)
@click.option("--wide", is_flag=True, help="with --follow: every column whole")
@output_option
@click.pass_obj
def submit(
    client: TrainyardClient,
    sweep_file: Path,
    code_folder: Path | None,
    follow: bool,
    wide: bool,
    output: Output,
) -> None:
    """Submit a sweep: SWEEP.json is the body POST /v1/sweeps takes, its job spec under "spec"."""
    no_json_when_following(follow, output)
    body = read_spec(sweep_file)
    spec = body.get("spec")
    if not isinstance(spec, dict):
        raise click.ClickException(
            f'{sweep_file} has no "spec" object; put the job spec its trials run under "spec" '
            "(docs/sweeps.md)"
        )
    with_code(client, spec, code_folder)
    made = client.create_sweep(body)
    if table_wanted(made, output):
        search = [
            f"{made.max_trials} trials",
            f"{made.parallel} at a time",
            f"sampler {made.sampler}",
            f"pruner {made.pruner}",
            objective_text(made),
        ]
        wrap(f"sweep {made.id} ({made.name}) {made.status}: {phrases(search)}")
    if follow:
        exit_with_outcome(follow_sweep(client, made.id, wide))


def exit_with_outcome(sweep: SweepPublic) -> None:
    """Scripts chain on the exit status: a cancelled sweep is a failure."""
    if sweep.status != COMPLETED:
        raise SystemExit(1)


@sweep.command()
@click.argument("sweep_id", type=int)
@click.option(
    "--follow", "-f", is_flag=True, help="redraw it live until it ends; exit non-zero unless it completes"
)
@listing
@click.pass_obj
def status(client: TrainyardClient, sweep_id: int, follow: bool, wide: bool, output: Output) -> None:
    """One sweep: status, best trial and value, trials by state, steps used, then every trial."""
    from app.cli.answers import SweepDetail  # pydantic: see app/cli/answers.py

    no_json_when_following(follow, output)
    if follow:
        exit_with_outcome(follow_sweep(client, sweep_id, wide))
        return
    shown, trials = client.get_sweep(sweep_id), client.sweep_trials(sweep_id).data
    if not table_wanted(SweepDetail(sweep=shown, trials=trials), output):
        return
    print_summary(shown, trials)
    print_trials(shown, trials, wide)


SWEEP_COLUMNS = (
    Column("id", justify="right"),
    Column("name"),
    Column("status"),
    Column("ended", justify="right"),
    Column("best", rank=1, justify="right"),
    Column("trials by state", rank=2, free_text=True),
    Column("objective", rank=3),
    Column("steps (unpruned)", rank=4, justify="right"),
    Column("created", rank=5),
)


def sweep_row(shown: SweepPublic) -> tuple[str, ...]:
    counts = shown.trials
    by_state = ", ".join(f"{count} {state}" for state, count in counts.model_dump().items() if count)
    return (
        str(shown.id),
        shown.name,
        shown.status,
        ended_text(shown),
        number(shown.best.value if shown.best else None),
        by_state or "-",
        objective_text(shown),
        f"{shown.steps_used:,} ({shown.steps_if_unpruned:,})",
        local_time(shown.created_at),
    )


@sweep.command("ls")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@listing
@click.pass_obj
def list_sweeps(client: TrainyardClient, limit: int, wide: bool, output: Output) -> None:
    """List sweeps, newest first (an admin's: everyone's)."""
    sweeps = client.list_sweeps(limit=limit)
    if not table_wanted(sweeps, output, "no sweeps; submit one with `trainyard sweep submit SWEEP.json`"):
        return
    print_table(SWEEP_COLUMNS, [sweep_row(shown) for shown in sweeps.data], wide)


@sweep.command()
@click.argument("sweep_id", type=int)
@output_option
@click.pass_obj
def cancel(client: TrainyardClient, sweep_id: int, output: Output) -> None:
    """Cancel a sweep: no more trials are made, and its running trials are cancelled."""
    shown = client.cancel_sweep(sweep_id)
    if table_wanted(shown, output):
        console.print(f"sweep {shown.id} ({shown.name}) {shown.status}; best so far: {best_text(shown)}")
