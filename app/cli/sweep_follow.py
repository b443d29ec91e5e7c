"""`trainyard sweep ... --follow`: a sweep's summary and trials redrawn live in a terminal, or a line per
trial's change of state where stdout is a pipe or a file."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.text import Text

from app.cli import follow as job_follow
from app.cli.render import console
from app.cli.sweep_view import RUNNING, print_summary, print_trials, shown_state, steps_text
from app.client import TrainyardClient
from core.states import TrialState

if TYPE_CHECKING:
    from app.schemas import SweepPublic, TrialPublic

# Lines `--follow` keeps for the sweep's summary and the table's edges, above and below its trial rows.
FOLLOW_CHROME_LINES = 12


def live_frame(client: TrainyardClient, sweep_id: int, wide: bool, height: int) -> tuple[SweepPublic, Text]:
    """What `sweep status` prints, the trials cut to the latest that fit in `height` lines (the running
    ones are the newest), captured as text for rich's Live to redraw."""
    shown, trials = client.get_sweep(sweep_id), client.sweep_trials(sweep_id).data
    fit = max(height - FOLLOW_CHROME_LINES, 1)
    with console.capture() as captured:
        print_summary(shown, trials)
        print_trials(shown, trials[-fit:], wide)
        if len(trials) > fit:
            console.print(f"({len(trials) - fit} earlier trials: trainyard sweep status {sweep_id})")
    return shown, Text.from_ansi(captured.get().rstrip())


def follow_sweep(client: TrainyardClient, sweep_id: int, wide: bool) -> SweepPublic:
    """Redraws the sweep and its trials every poll until it ends; returns it as it ended."""
    # Live draws on a console of its own: the shared one is capturing each frame meanwhile.
    screen = Console(highlight=False, markup=False)
    if not screen.is_terminal:
        return follow_in_lines(client, sweep_id, wide)
    with Live(console=screen, auto_refresh=False) as live:
        while True:
            shown, frame = live_frame(client, sweep_id, wide, screen.height)
            live.update(frame, refresh=True)
            if shown.status != RUNNING:
                return shown
            time.sleep(job_follow.POLL_S)  # as often as a job's --follow asks


def trial_line(sweep_id: int, trial: TrialPublic) -> str:
    job = "" if trial.job_id is None else f" (job {trial.job_id})"
    ended = (
        f" at step {steps_text(trial.steps, trial.total_steps)}" if trial.state != TrialState.RUNNING else ""
    )
    note = f": {trial.message}" if trial.message else ""  # a completed trial's names its value
    return f"sweep {sweep_id} trial {trial.number}{job} {shown_state(trial)}{ended}{note}"


def follow_in_lines(client: TrainyardClient, sweep_id: int, wide: bool) -> SweepPublic:
    """Where stdout is no terminal (a pipe, a CI log), Live would print its last frame alone: instead, a
    line per trial whose state changed, then the sweep as it ended."""
    said: dict[int, str] = {}
    while True:
        shown, trials = client.get_sweep(sweep_id), client.sweep_trials(sweep_id).data
        for trial in trials:
            if said.get(trial.number) != (line := trial_line(sweep_id, trial)):
                console.print(line, soft_wrap=True)
                said[trial.number] = line
        if shown.status != RUNNING:
            print_summary(shown, trials)
            print_trials(shown, trials, wide)
            return shown
        time.sleep(job_follow.POLL_S)
