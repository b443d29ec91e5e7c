"""Run the trainer the way the worker does (torchrun over trainers.run) on a spec, and read what it left."""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import torch

from core.launch import JOB_TOKEN_ENV, Launch
from jobspec.events import (
    EVENTS_FILE,
    LOG_DIR,
    SPEC_FILE,
    CheckpointEvent,
    Event,
    MetricsEvent,
    parse_event,
    rank_log_name,
)
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from worker.executors.local.kill import JobMark, job_processes, kill_job
from worker.executors.local.warm.factory_handle import JobProcess
from worker.executors.local.warm.launcher import WarmLauncher

ROOT = Path(__file__).resolve().parents[2]


def spec_with(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    """A copy of base whose named sections are updated key by key."""
    spec = copy.deepcopy(base)
    for name, values in sections.items():
        spec[name] = {**spec.get(name, {}), **values}
    return spec


def write_config(
    run_dir: Path, spec: dict[str, Any], resume_path: Path | None = None, code_dir: Path | None = None
) -> RunConfig:
    """code_dir: the unpacked code bundle, as the worker passes it, for specs with user code."""
    job = JobSpec.model_validate(spec)
    plan = resolve_plan(job)
    plan.resume_path = None if resume_path is None else str(resume_path)
    bundle = None if code_dir is None else str(code_dir)
    config = RunConfig(job_id=1, attempt=1, spec=job, plan=plan, code_dir=bundle)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / SPEC_FILE).write_text(config.model_dump_json(), encoding="utf-8")
    return config


# train_together runs up to three at once: each of them finds a standby ready.
STANDBYS = 3
FACTORY_IMPORT_S = 120  # on two cores the other parts of `make test` keep busy


@functools.cache
def _session_launcher() -> WarmLauncher:
    """Warm standbys for the session, as the worker keeps them (worker/executors/local/warm/launcher.py): a
    CPU run's ranks are forked from a torchrun forked from the factory that imported torch and the trainer
    once, rather than each importing them anew. A standby whose test session ends reads end-of-file and
    exits."""
    launcher = WarmLauncher(sys.executable, ROOT, count=STANDBYS)
    launcher.prepare()
    # Until the factory has its imports, a run starts cold, each of its ranks importing torch itself: a
    # session's first runs, started together, cost seconds of CPU more each on a box of two cores than the
    # wait for the factory does.
    first = launcher.standby
    if first is not None:
        first.forked(FACTORY_IMPORT_S)
    return launcher


_first_call = threading.Lock()


def warm_launcher() -> WarmLauncher:
    """The session's launcher, made once however many runs start together."""
    with _first_call:
        return _session_launcher()


def _mark(run_dir: Path) -> JobMark:
    """How a cancel would find the run's processes, as the worker marks a job's."""
    return JobMark(token=f"test/{run_dir}", run_dir=run_dir)


def _launch_env(mark: JobMark, run_dir: Path, cuda_devices: str) -> dict[str, str]:
    return {
        **os.environ,
        **mark.env(),
        JOB_TOKEN_ENV: mark.token,
        # A CPU rank's share of this 2-core box, as the worker gives it (core/launch.py).
        "OMP_NUM_THREADS": "1",
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": cuda_devices,
        "TORCHELASTIC_ERROR_FILE": str(run_dir / "error.json"),
        "PYTHONUNBUFFERED": "1",
    }


def _torchrun_argv(run_dir: Path, nproc: int) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    return [*argv, "--max-restarts", "0", "-m", "trainers.run", "--run-dir", str(run_dir)]


@dataclass
class Started:
    """A CPU run under way, for a test that acts on it mid-run; `stop` it however the test ends."""

    process: JobProcess
    mark: JobMark
    output: Path

    def processes(self) -> list[psutil.Process]:
        """Every live process of the run, as a cancel finds them: the standby that became its torchrun, the
        ranks it forked and what they started."""
        return job_processes(self.mark)

    def stop(self) -> None:
        kill_job(self.mark, grace_s=5)


def start(run_dir: Path, nproc: int) -> Started:
    """torchrun over trainers.run on the configured `run_dir`, on the CPU, through the warm standby."""
    mark = _mark(run_dir)
    output = run_dir / "launcher-output.log"
    launch = Launch(_torchrun_argv(run_dir, nproc), _launch_env(mark, run_dir, ""))
    return Started(warm_launcher().start(launch, output), mark, output)


def launch(
    run_dir: Path, nproc: int, timeout: float = 240, cuda_devices: str = ""
) -> subprocess.CompletedProcess[str]:
    """cuda_devices: CUDA_VISIBLE_DEVICES for the run; empty hides every GPU (gloo on the CPU), and the run
    goes through the warm standby; a GPU run starts cold, as GPU tests time and probe it that way.

    Recent torchrun puts every rank in a session of its own, so a timeout that stops torchrun alone would
    leave ranks running (on a GPU box, holding a GPU for the next test): the run is marked like a job's
    and every marked process is stopped however the run ends. The output is torchrun's and the launcher's,
    as stdout; stderr is empty.
    """
    if cuda_devices:
        mark = _mark(run_dir)
        argv, env = _torchrun_argv(run_dir, nproc), _launch_env(mark, run_dir, cuda_devices)
        try:
            return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        finally:
            kill_job(mark, grace_s=5)
    run = start(run_dir, nproc)
    try:
        code = run.process.wait(timeout)
        return subprocess.CompletedProcess([], code, run.output.read_text(errors="replace"), "")
    finally:
        run.stop()


@dataclass
class TrainerRun:
    run_dir: Path
    nproc: int

    def log(self, rank: int) -> str:
        path = self.run_dir / LOG_DIR / rank_log_name(rank)
        return path.read_text() if path.exists() else f"(no {path.name})"

    def events(self) -> list[Event]:
        return [parse_event(line) for line in (self.run_dir / EVENTS_FILE).read_text().splitlines()]

    def metric(self, name: str) -> list[tuple[int, float]]:
        metrics = [e for e in self.events() if isinstance(e, MetricsEvent)]
        return [(e.step, e.values[name]) for e in metrics if name in e.values]

    def checkpoint_steps(self) -> list[int]:
        return [e.step for e in self.events() if isinstance(e, CheckpointEvent)]

    def final_checkpoint(self) -> dict[str, Any]:
        """The last checkpoint the run announced, loaded as the trainer loads one."""
        last = [e for e in self.events() if isinstance(e, CheckpointEvent)][-1]
        state: dict[str, Any] = torch.load(self.run_dir / last.path, weights_only=True)
        return state

    def parameter_sum(self) -> float:
        """Every model tensor of the final checkpoint summed in float64: runs that end with the same
        parameters give the same sum, and a step taken differently moves it."""
        return sum(value.double().sum().item() for value in self.final_checkpoint()["model"].values())


def train(
    run_dir: Path,
    spec: dict[str, Any],
    nproc: int,
    resume_path: Path | None = None,
    cuda_devices: str = "",
    code_dir: Path | None = None,
) -> TrainerRun:
    """Train to the end; on failure the assertion shows the launcher's output and every rank's log."""
    write_config(run_dir, spec, resume_path, code_dir)
    done = launch(run_dir, nproc, cuda_devices=cuda_devices)
    run = TrainerRun(run_dir, nproc)
    if done.returncode != 0:
        logs = "\n".join(f"--- rank {r}\n{run.log(r)}" for r in range(nproc))
        raise AssertionError(f"torchrun exited {done.returncode}\n{done.stdout}\n{done.stderr}\n{logs}")
    return run


def train_together(*runs: Callable[[], TrainerRun]) -> list[TrainerRun]:
    """Independent runs side by side, their results in the order given. Most of a short run is torchrun and
    its ranks importing torch one process at a time, so on a few cores several runs at once end sooner than
    one after another; each run's numbers do not depend on what else runs."""
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = [pool.submit(run) for run in runs]
        return [future.result() for future in futures]
