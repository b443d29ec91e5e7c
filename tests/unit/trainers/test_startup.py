"""The rank's start-up clock: when its process began, the marks of one attempt, and the event rank 0 writes
after its first step through the real loop."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from jobspec import startup
from jobspec.events import MetricsEvent, PhaseEvent, StartupEvent, parse_event
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from jobspec.startup import Mark
from trainers import loop
from trainers.dist_env import DistEnv
from trainers.program import run_program

SOLO = DistEnv(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"))
# One clock tick: /proc counts a process's start in ticks, rounded down.
TICK_S = 0.01


def test_a_process_start_is_read_from_before_its_interpreter_ran() -> None:
    before = time.time()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; from jobspec import startup; print(startup.process_start_time(), time.time())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    started, then = map(float, child.stdout.split())
    # Its start lies between its parent's call and its own first line: not when the clock was read.
    assert before - TICK_S <= started <= then


def test_restart_forgets_a_parents_marks_and_the_first_mark_stands() -> None:
    startup.restart()
    startup.mark(Mark.DATA_READY, at=1.0)
    startup.restart()  # as a rank forked from a warm process does
    assert list(startup.marks()) == [Mark.PROCESS_STARTED]
    startup.mark(Mark.IMPORTS_DONE, at=2.0)
    startup.mark(Mark.IMPORTS_DONE, at=3.0)
    assert startup.marks()[Mark.IMPORTS_DONE] == 2.0


def test_rank_0_reports_its_marks_in_order_once_after_its_first_step(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(
        {
            "model": {"arch": "mlp"},
            "data": {"dataset": "synthetic", "num_samples": 256},
            "train": {"max_steps": 6, "batch_size": 32, "eval_every_epochs": 0},
            "parallel": {"strategy": "single"},
            "checkpoint": {"every_n_epochs": 0, "save_final": False},
            "metrics": {"every_n_steps": 3},
        }
    )
    startup.restart()
    startup.mark(Mark.IMPORTS_DONE)  # what trainers/run.py marks before the loop
    assert loop.train(RunConfig(job_id=1, attempt=1, spec=spec, plan=resolve_plan(spec)), tmp_path, SOLO)
    events = [parse_event(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    kinds = [type(event) for event in events]
    assert kinds.count(StartupEvent) == 1
    assert kinds.index(PhaseEvent) < kinds.index(StartupEvent) < kinds.index(MetricsEvent)
    reported = next(event for event in events if isinstance(event, StartupEvent))
    rank_marks = [
        Mark.PROCESS_STARTED,
        Mark.IMPORTS_DONE,
        Mark.DATA_READY,
        Mark.MODEL_BUILT,
        Mark.FIRST_STEP,
        Mark.FIRST_STEP_DONE,
    ]
    assert list(reported.marks) == rank_marks
    times = list(reported.marks.values())
    assert times == sorted(times)
    phase = next(event for event in events if isinstance(event, PhaseEvent))
    assert reported.marks[Mark.FIRST_STEP] == phase.time


def test_a_program_job_reports_the_marks_it_has_as_its_script_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, run_dir = tmp_path / "code", tmp_path / "run"
    code.mkdir()
    run_dir.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    # run_program runs the script in this process: its working directory, import path and argv.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    spec = JobSpec.model_validate(
        {"code": f"sha256:{'0' * 64}", "program": {"entrypoint": ["python", "train.py"]}}
    )
    config = RunConfig(job_id=1, attempt=1, spec=spec, plan=resolve_plan(spec), code_dir=str(code))
    startup.restart()
    startup.mark(Mark.IMPORTS_DONE)
    assert run_program(config, run_dir, stopped_exit=143) == 0
    events = [parse_event(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    reported = [event for event in events if isinstance(event, StartupEvent)]
    assert [list(event.marks) for event in reported] == [
        [Mark.PROCESS_STARTED, Mark.IMPORTS_DONE, Mark.FIRST_STEP]
    ]
