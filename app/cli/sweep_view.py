"""How `trainyard sweep` shows a sweep: its summary (best trial, trials by state, the steps pruning saved)
and its trials' table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from app.cli.render import console, number, phrases, wrap
from app.cli.table import Column, print_table
from core.states import TrialState

if TYPE_CHECKING:
    from app.schemas import SweepPublic, TrialPublic

# core.states.SweepStatus's values, spelled out: that module brings the database layer with it.
RUNNING, COMPLETED = "running", "completed"
SUMMARY_LABEL_WIDTH = 11  # "objective: "


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


def shown_state(trial: TrialPublic) -> str:
    # A running trial's job may still be queued or starting: its job's state says more than Optuna's.
    return str(trial.job_status if trial.state == TrialState.RUNNING and trial.job_status else trial.state)


def trial_row(trial: TrialPublic, names: dict[str, str]) -> tuple[str, ...]:
    return (
        str(trial.number),
        "-" if trial.job_id is None else str(trial.job_id),
        shown_state(trial),
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
    used, saved = sweep.steps_used, sweep.steps_if_unpruned - sweep.steps_used
    if not saved:
        return phrases([f"{used:,} used", "none saved by pruning"])
    # The share of what the trials would have run by now had none been pruned.
    return phrases([f"{used:,} used", f"{saved:,} saved by pruning ({saved / (used + saved):.0%})"])


def print_summary(sweep: SweepPublic, trials: Sequence[TrialPublic]) -> None:
    """A field a line, each wrapped under its first word, never inside a phrase."""
    counts = sweep.trials
    wrap(f"sweep {sweep.id} ({sweep.name}): " + phrases([sweep.status, f"{ended_text(sweep)} trials ended"]))
    wrap(objective_text(sweep), "objective", SUMMARY_LABEL_WIDTH)
    search = [f"sampler {sweep.sampler}", f"pruner {sweep.pruner}", f"{sweep.parallel} at a time"]
    wrap(phrases(search), "search", SUMMARY_LABEL_WIDTH)
    wrap(best_text(sweep), "best", SUMMARY_LABEL_WIDTH)
    by_state = [
        f"{counts.running} running",
        f"{counts.completed} completed",
        f"{counts.pruned} pruned",
        f"{counts.failed} failed",
    ]
    wrap(phrases(by_state), "trials", SUMMARY_LABEL_WIDTH)
    wrap(steps_saved_text(sweep), "steps", SUMMARY_LABEL_WIDTH)
