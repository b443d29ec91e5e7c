"""Each plan's forecast (issue 44): its peak memory per device, step and job time, and whether it fits the GPU
it will run on, made before the job is stored. The tracing needs torch, which the API never imports: one
forecaster process per API process (`python -m trainers.forecast`), started at the first forecast and kept,
answers a request at a time. Forecasts are cached by the spec's shape, so a sweep's trials or a resubmitted
spec cost nothing; one that takes longer than TRAINYARD_FORECAST_TIMEOUT_S is given up (the process is
stopped and started again next time) and the job goes ahead without one, saying so. A spec whose step calls
its code bundle is forecast in the sandbox instead (bundle_forecasts.py), into the same cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import selectors
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import Row

from app.cpu_pin import process_cpus
from core.config import Settings
from core.hosts import HOST_OP_S
from core.launch import inherited
from core.project import PROJECT_ROOT
from jobspec.forecast import FORECASTER_CPUS_ENV, FORECASTER_READY, Forecast
from jobspec.plan import Plan, RunConfig
from jobspec.spec import JobSpec

log = logging.getLogger(__name__)

FORECAST_MODULE = "trainers.forecast"
BUSY_WAIT_S = 5.0
# What of a spec and its plan a step's memory and time do not depend on: left out of the cache's key.
SPEC_NOISE = ("name", "priority", "tracking", "metrics", "checkpoint", "limits", "environment", "program")
TRAIN_NOISE = ("lr", "seed", "max_steps", "epochs", "max_tokens", "warmup_steps", "min_lr", "schedule")
PLAN_NOISE = (
    *("argv", "batch_script", "warnings", "lr", "resume_path", "runnable", "not_runnable_because"),
    *("forecast", "forecast_note", "max_steps", "host", "gpus", "strategy_reason", "data_reason"),
)


@dataclass(frozen=True)
class Target:
    """The device a job will run on, as trainers/forecast/estimate.py's Target reads it."""

    gpu_name: str | None
    memory_bytes: int | None
    cpu_cores: int = 1
    host_op_s: float | None = None


@dataclass(frozen=True)
class Outcome:
    forecast: Forecast | None
    note: str | None  # why there is none


# Asks a forecaster for the outcomes of configs before a deadline (time.monotonic()).
Ask = Callable[[list[RunConfig], float], list[Outcome]]


def target_for(reports: Sequence[Row[Any]], plan: Plan) -> Target:
    """From the workers' last reports (app/services/gpus.py's read_cluster): a GPU job's target is the
    registered GPU with the least memory, where it may land, and what an eager operation costs its host as
    its worker probed it (none where not probed); a CPU job's, the memory of the worker with the least,
    shared by the ranks of one node, and the cores a worker reported. While none has reported its memory (a
    worker from before 0021), this host's."""
    if plan.device == "cuda":
        gpus = [gpu for row in reports for gpu in row.gpus or []]
        smallest = min(gpus, key=lambda gpu: int(gpu.get("memory_total_mb", 0)), default=None)
        if smallest is None:
            return Target(None, None)
        return Target(
            str(smallest.get("name", "")),
            int(smallest.get("memory_total_mb", 0)) * 2**20,
            host_op_s=smallest.get(HOST_OP_S),
        )
    ranks = max(plan.nproc_per_node * plan.workers, 1)
    cores = max((row.cpus or 0 for row in reports), default=0) or os.cpu_count() or 1
    reported = [row.memory_mb * 2**20 for row in reports if row.memory_mb]
    memory = min(reported, default=None) or _this_host_memory()
    return Target(None, memory // ranks, max(cores // ranks, 1))


@lru_cache(maxsize=1)
def _this_host_memory() -> int:
    # Read once: it does not change while the API runs, and psutil parses /proc/meminfo on every call.
    return int(psutil.virtual_memory().total)


def total_steps(spec: JobSpec, plan: Plan) -> int | None:
    """The optimizer steps the job will run, where the spec says so before it runs."""
    return plan.max_steps or spec.train.max_steps


# What the cache's key leaves out, as pydantic's serialiser takes it: each dump is then made in one pass.
_SPEC_SHAPE: dict[str, bool | set[str]] = {**dict.fromkeys(SPEC_NOISE, True), "train": set(TRAIN_NOISE)}
_PLAN_SHAPE = set(PLAN_NOISE)


def shape_key(config: RunConfig, target: Target, data_dir: Path) -> str:
    spec = config.spec.model_dump_json(exclude=_SPEC_SHAPE)
    plan = config.plan.model_dump_json(exclude=_PLAN_SHAPE)
    shape = "\n".join((spec, plan, json.dumps(asdict(target)), str(data_dir)))
    return hashlib.sha256(shape.encode()).hexdigest()


class Forecaster:
    """The API process's forecaster process and its cache. Thread-safe: one request at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a request at a time
        self._starting = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._ready = threading.Event()  # the process has its imports and serves
        self._cache: OrderedDict[str, Outcome] = OrderedDict()
        # The shared forecaster and the sandboxed ones (bundle_forecasts.py) fill it from their own threads.
        self._cache_lock = threading.Lock()

    def forecasts(self, settings: Settings, configs: list[RunConfig], target: Target) -> list[Outcome]:
        """One outcome per config, the cached ones without asking; none (with why) while the forecaster
        starts, when it is busy with other submissions, or when it takes longer than the timeout: a job is
        never held up long for its forecast, nor refused for lack of one."""
        keys = [shape_key(config, target, settings.data_dir) for config in configs]
        known = self.known(keys)
        if all(outcome is not None for outcome in known):
            return [outcome for outcome in known if outcome is not None]
        self.start()
        if not self._ready.is_set():
            return [outcome or Outcome(None, STARTING) for outcome in known]
        return self.asking(
            settings,
            keys,
            configs,
            self._lock,
            lambda missing, deadline: self._ask(settings, missing, target, deadline),
        )

    def cached(self, key: str) -> Outcome | None:
        return self.known([key])[0]

    def known(self, keys: list[str]) -> list[Outcome | None]:
        with self._cache_lock:
            return [self._cache.get(key) for key in keys]

    def asking(
        self, settings: Settings, keys: list[str], configs: list[RunConfig], lock: threading.Lock, ask: Ask
    ) -> list[Outcome]:
        """The outcomes of `configs` (by their `keys`), those not cached from `ask` while holding `lock`.
        Another submission's forecast holds it: a short wait, then none, so that no user's stream of new
        shapes holds up another's submissions for long."""
        if not lock.acquire(timeout=min(BUSY_WAIT_S, settings.forecast_timeout_s)):
            return [outcome or Outcome(None, BUSY) for outcome in self.known(keys)]
        deadline = time.monotonic() + settings.forecast_timeout_s
        try:
            before = self.known(keys)
            missing = [
                (key, config)
                for key, config, outcome in zip(keys, configs, before, strict=True)
                if outcome is None
            ]
            answers = ask([config for _, config in missing], deadline)
            for (key, _), outcome in zip(missing, answers, strict=True):
                self._remember(settings, key, outcome)
            known = dict(zip([key for key, _ in missing], answers, strict=True))
            return [outcome or known[key] for key, outcome in zip(keys, self.known(keys), strict=True)]
        finally:
            lock.release()

    def _remember(self, settings: Settings, key: str, outcome: Outcome) -> None:
        if outcome.forecast is None and outcome.note is not None and not outcome.note.startswith(UNFORECAST):
            return  # timed out or stopped: another time, less busy, it may come
        with self._cache_lock:
            self._cache[key] = outcome
            self._cache.move_to_end(key)
            while len(self._cache) > settings.forecast_cache_entries:
                self._cache.popitem(last=False)

    def _ask(
        self, settings: Settings, configs: list[RunConfig], target: Target, deadline: float
    ) -> list[Outcome]:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(request_line(settings, configs, target))
            process.stdin.flush()
            line = read_line(process, deadline)
        except TimeoutError:
            self.stop()
            return [Outcome(None, timed_out(settings)) for _ in configs]
        except OSError as error:
            self.stop()
            return [Outcome(None, f"the forecaster stopped ({error}); it starts again") for _ in configs]
        return outcomes(line)

    def start(self) -> None:
        """Start the forecaster process unless one runs; it imports torch meanwhile (seconds, a minute on a
        loaded box), and serves once it says it is ready."""
        with self._starting:
            if self._process is not None and self._process.poll() is None:
                return
            self._ready.clear()
            self._process = forecaster_process([], stderr=subprocess.DEVNULL)
            threading.Thread(target=self._await_ready, args=(self._process,), daemon=True).start()

    def _await_ready(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        if process.stdout.readline().strip() == FORECASTER_READY and process is self._process:
            self._ready.set()

    def wait_ready(self, timeout_s: float) -> bool:
        return self._ready.wait(timeout_s)

    def stop(self) -> None:
        with self._starting:
            self._ready.clear()
            if self._process is not None:
                self._process.kill()
                self._process.wait()
                self._process = None


def forecaster_process(prefix: list[str], stderr: int) -> subprocess.Popen[str]:
    """`python -m trainers.forecast` behind `prefix` (a sandbox's argv, or none), talking over pipes, in a
    process group of its own: a Ctrl-C at the API's terminal stops the API, which stops it, and a kill of
    the group stops all of it."""
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", FORECAST_MODULE],
        cwd=PROJECT_ROOT,
        env={
            **inherited(os.environ),
            "CUDA_VISIBLE_DEVICES": "",
            FORECASTER_CPUS_ENV: ",".join(str(cpu) for cpu in sorted(process_cpus())),
        },
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )


@contextmanager
def forecasting(settings: Settings) -> Iterator[None]:
    """While the API serves: its forecaster, started at once so that it has its imports before the first
    submission."""
    if settings.forecast:
        FORECASTER.start()
    try:
        yield
    finally:
        FORECASTER.stop()


STARTING = "the forecaster is still starting (importing torch); this job goes without a forecast"
BUSY = "the forecaster was busy with other submissions; this job goes without a forecast"
UNFORECAST = "could not be forecast:"
TIMED_OUT = "forecasting took longer than"


def request_line(settings: Settings, configs: list[RunConfig], target: Target) -> str:
    """A request as trainers/forecast/__main__.py reads it."""
    request = {
        "data_dir": str(settings.data_dir),
        "target": asdict(target),
        "jobs": [{"config": config.model_dump(mode="json")} for config in configs],
    }
    return json.dumps(request) + "\n"


def outcomes(line: str) -> list[Outcome]:
    """The forecaster's answer, an outcome per job of its request."""
    return [
        Outcome(Forecast.model_validate(answer["forecast"]), None)
        if "forecast" in answer
        else Outcome(None, f"{UNFORECAST} {answer['error']}")
        for answer in json.loads(line)["forecasts"]
    ]


def timed_out(settings: Settings) -> str:
    return f"{TIMED_OUT} TRAINYARD_FORECAST_TIMEOUT_S={settings.forecast_timeout_s:g} s"


def read_line(process: subprocess.Popen[str], deadline: float) -> str:
    """The forecaster's answer, a line written at once, or TimeoutError once the deadline passes."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(max(deadline - time.monotonic(), 0)):
            raise TimeoutError
    line = process.stdout.readline()
    if not line:
        raise OSError(f"it exited with {process.wait()}")
    return line


FORECASTER = Forecaster()
