"""A program job's rank: the user's script (or module) run as `python train.py ARGS` would run it, with the
bundle as working directory and first import path, inside this process so that torch's error recording and
the stop agreement of trainers/job cover it."""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from pathlib import Path

from jobspec.events import PhaseEvent, StartupEvent
from jobspec.plan import RunConfig
from jobspec.startup import Mark, mark, marks
from trainers import job
from trainers.job.framework import stopped_early
from trainers.metrics import EventLog
from trainers.user_errors import UserCodeError, blaming


def _exit_status(exit: SystemExit) -> int:
    code = exit.code
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1, as the interpreter does
    return 1


def run_program(config: RunConfig, run_dir: Path, stopped_exit: int) -> int:
    """Runs the script; its exit status, or `stopped_exit` when trainers.job stopped it early on a SIGTERM
    (after its final checkpoint)."""
    program, code_dir = config.spec.program, config.code_dir
    if program is None or code_dir is None:
        raise ValueError("run_program needs a program job with its code bundle")
    target = program.target
    # The job is running once its script starts, whether or not the script ever reports.
    events = EventLog(run_dir, int(os.environ.get("RANK", "0")) == 0)
    phase = PhaseEvent(phase="running")
    mark(Mark.FIRST_STEP, phase.time)
    events.append(phase)
    # The script's first step, if it steps through trainers.job, adds its own mark later.
    events.append(StartupEvent(marks=marks()))
    os.chdir(code_dir)
    sys.path.insert(0, code_dir)
    if target.script is not None and not Path(code_dir, target.script).is_file():
        raise UserCodeError(f"program.entrypoint's script {target.script} is not in the code bundle")
    if target.module is not None and importlib.util.find_spec(target.module) is None:
        raise UserCodeError(f"program.entrypoint's module {target.module} is not in the code bundle")
    sys.argv = [target.script or target.module or "", *target.args]
    try:
        with blaming(code_dir):
            if target.script is not None:
                runpy.run_path(target.script, run_name="__main__")
            else:
                runpy.run_module(target.module or "", run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        if status := _exit_status(exit):
            return status  # a failed rank leaves the others waiting in collectives: no clean teardown
    # A script that used trainers.job: its last checkpoint durable, its process group left.
    session = job.current()
    finished = session is None or session.finish()
    return 0 if finished and not stopped_early() else stopped_exit
