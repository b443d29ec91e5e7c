"""`trainyard sweep`: submit a hyperparameter sweep (docs/sweeps.md), follow its trials live, list, show and
cancel sweeps."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel
from rich.console import Console
from rich.live import Live
from rich.text import Text

from app.cli import follow as job_follow
from app.cli.code import FolderArgument, with_code
from app.cli.jobs import read_spec
from app.cli.render import console, local_time, number
from app.cli.table import Column, Output, listing, print_table, table_wanted
from app.client import TrainyardClient
from app.schemas import SweepPublic, TrialPublic
from core.states import TrialState

# core.states.SweepStatus's values, spelled out: that module brings the database layer with it.
RUNNING, COMPLETED = "running", "completed"
# Lines `--follow` keeps for the sweep's summary and the table's edges, above and below its trial rows.
FOLLOW_CHROME_LINES = 12


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
    "--follow", "-f", is_flag=True, help="a live table of its trials; exit non-zero unless it completes"
)
@click.option("--wide", is_flag=True, help="with --follow: every column whole")
@click.pass_obj
def submit(
    client: TrainyardClient, sweep_file: Path, code_folder: Path | None, follow: bool, wide: bool
) -> None:
    """Submit a sweep: SWEEP.json is the body POST /v1/sweeps takes, its job spec under "spec"."""
    body = read_spec(sweep_file)
    spec = body.get("spec")
    if not isinstance(spec, dict):
        raise click.ClickException(
            f'{sweep_file} has no "spec" object; put the job spec its trials run under "spec" '
            "(docs/sweeps.md)"
        )
    with_code(client, spec, code_folder)
    made = client.create_sweep(body)
    console.print(
        f"sweep {made.id} ({made.name}) {made.status}: {made.max_trials} trials, {made.parallel} at a time, "
        f"sampler {made.sampler}, pruner {made.pruner}, {objective_text(made)}"
    )
    if follow:
        exit_with_outcome(follow_sweep(client, made.id, wide))


def exit_with_outcome(sweep: SweepPublic) -> None:
    """Scripts chain on the exit status: a cancelled sweep is a failure."""
    if sweep.status != COMPLETED:
        raise SystemExit(1)


def objective_text(sweep: SweepPublic) -> str:
    return f"{sweep.objective['goal']} {sweep.objective['metric']}"


def ended_text(sweep: SweepPublic) -> str:
    counts = sweep.trials
    return f"{counts.completed + counts.pruned + counts.failed}/{sweep.max_trials}"


def short_names(paths: Iterable[str]) -> dict[str, str]:
    """Each parameter's last part ("lr" for train.lr), or its whole path where two would read the same."""
    paths = list(paths)
    last = [path.rsplit(".", 1)[-1] for path in paths]
    return {path: name if last.count(name) == 1 else path for path, name in zip(paths, last, strict=True)}


def params_text(params: dict[str, Any], names: dict[str, str]) -> str:
    return ", ".join(
        f"{names.get(path, path)}={number(value) if isinstance(value, float) else value}"
        for path, value in params.items()
    )


def steps_text(done: int | None, total: int | None) -> str:
    return f"{done or 0}/{total}" if total else str(done or "-")


TRIAL_COLUMNS = (
    Column("trial", justify="right"),
    Column("job", justify="right"),
    Column("state"),
    Column("latest", rank=3, justify="right"),
    Column("best", rank=1, justify="right"),
    Column("steps", rank=4, justify="right"),
    Column("parameters", rank=2, free_text=True),
    Column("note", rank=5, free_text=True),
)


def trial_row(trial: TrialPublic, names: dict[str, str]) -> tuple[str, ...]:
    # A running trial's job may still be queued or starting: its job's state says more than Optuna's.
    state = trial.job_status if trial.state == TrialState.RUNNING and trial.job_status else trial.state
    return (
        str(trial.number),
        "-" if trial.job_id is None else str(trial.job_id),
        str(state),
        number(trial.latest),
        number(trial.best),
        steps_text(trial.steps, trial.total_steps),
        params_text(trial.params, names),
        trial.message or "",
    )


def print_trials(sweep: SweepPublic, trials: Sequence[TrialPublic], wide: bool) -> None:
    if not trials:
        console.print("no trials yet")
        return
    names = short_names(sweep.config.get("parameters", {}))
    print_table(TRIAL_COLUMNS, [trial_row(trial, names) for trial in trials], wide)


def best_text(sweep: SweepPublic) -> str:
    best = sweep.best
    if best is None:
        return "- (no trial has completed yet)"
    job = "" if best.job_id is None else f" (job {best.job_id})"
    names = short_names(best.params)
    return f"trial {best.trial}{job}: {number(best.value)} with {params_text(best.params, names)}"


def steps_saved_text(sweep: SweepPublic) -> str:
    used, unpruned = sweep.steps_used, sweep.steps_if_unpruned
    saved = f" ({1 - used / unpruned:.0%} saved by pruning)" if unpruned else ""
    return f"{used:,} used of {unpruned:,} had none been pruned{saved}"


def print_summary(sweep: SweepPublic) -> None:
    counts = sweep.trials
    console.print(f"sweep {sweep.id} ({sweep.name}): {sweep.status}, {ended_text(sweep)} trials ended")
    console.print(f"  objective: {objective_text(sweep)}")
    console.print(f"  search:    sampler {sweep.sampler}, pruner {sweep.pruner}, {sweep.parallel} at a time")
    console.print(f"  best:      {best_text(sweep)}")
    console.print(
        f"  trials:    {counts.running} running, {counts.completed} completed, {counts.pruned} pruned, "
        f"{counts.failed} failed"
    )
    console.print(f"  steps:     {steps_saved_text(sweep)}")


class SweepDetail(BaseModel):
    """`sweep status --output json`: the two API answers the command shows, together."""

    sweep: SweepPublic
    trials: list[TrialPublic]


@sweep.command()
@click.argument("sweep_id", type=int)
@click.option(
    "--follow", "-f", is_flag=True, help="redraw it live until it ends; exit non-zero unless it completes"
)
@listing
@click.pass_obj
def status(client: TrainyardClient, sweep_id: int, follow: bool, wide: bool, output: Output) -> None:
    """One sweep: status, best trial and value, trials by state, steps used, then every trial."""
    if follow:
        exit_with_outcome(follow_sweep(client, sweep_id, wide))
        return
    shown, trials = client.get_sweep(sweep_id), client.sweep_trials(sweep_id).data
    if not table_wanted(SweepDetail(sweep=shown, trials=trials), output):
        return
    print_summary(shown)
    print_trials(shown, trials, wide)


def live_frame(client: TrainyardClient, sweep_id: int, wide: bool, height: int) -> tuple[SweepPublic, Text]:
    """What `sweep status` prints, the trials cut to the latest that fit in `height` lines (the running
    ones are the newest), captured as text for rich's Live to redraw."""
    shown, trials = client.get_sweep(sweep_id), client.sweep_trials(sweep_id).data
    fit = max(height - FOLLOW_CHROME_LINES, 1)
    with console.capture() as captured:
        print_summary(shown)
        print_trials(shown, trials[-fit:], wide)
        if len(trials) > fit:
            console.print(f"({len(trials) - fit} earlier trials: trainyard sweep status {sweep_id})")
    return shown, Text.from_ansi(captured.get().rstrip())


def follow_sweep(client: TrainyardClient, sweep_id: int, wide: bool) -> SweepPublic:
    """Redraws the sweep and its trials every poll until it ends; returns it as it ended."""
    # Live draws on a console of its own: the shared one is capturing each frame meanwhile.
    screen = Console(highlight=False, markup=False)
    with Live(console=screen, auto_refresh=False) as live:
        while True:
            shown, frame = live_frame(client, sweep_id, wide, screen.height)
            live.update(frame, refresh=True)
            if shown.status != RUNNING:
                return shown
            time.sleep(job_follow.POLL_S)  # as often as a job's --follow asks


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
@click.pass_obj
def cancel(client: TrainyardClient, sweep_id: int) -> None:
    """Cancel a sweep: no more trials are made, and its running trials are cancelled."""
    shown = client.cancel_sweep(sweep_id)
    console.print(f"sweep {shown.id} ({shown.name}) {shown.status}; best so far: {best_text(shown)}")
