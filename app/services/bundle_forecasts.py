"""The forecasts of a spec whose model, data or loss come from its code bundle (issue 44). That is a user's
code, which the API never runs in its own process nor in the shared forecaster: a one-shot
`python -m trainers.forecast` runs it in the sandbox a job's ranks get (core/sandbox.py: the bundle and the
spec's data folders read-only, no network, none of the service's state, a uid of no account), is sent one
request line with stdin closed after it, and answers one line. It has TRAINYARD_FORECAST_TIMEOUT_S to import
torch and as long again for the user's code, then its process group is killed. One runs at a time per API
process; their outcomes share the forecaster's cache, by the spec's shape, whose `code` is the bundle's
content id.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from app.services.forecasts import (
    FORECASTER,
    UNFORECAST,
    Outcome,
    Target,
    forecaster_process,
    outcomes,
    read_line,
    request_line,
    shape_key,
    timed_out,
)
from core.code_store import BundleUnavailable, ensure_unpacked
from core.config import SandboxMode, Settings
from core.project import PROJECT_ROOT
from core.sandbox import Sandbox, sandbox_argv, service_state
from core.sandbox_host import host_system, named_data_folders, python_paths, rlimits
from jobspec.forecast import FORECASTER_READY
from jobspec.plan import RunConfig
from jobspec.spec import JobSpec
from jobspec.user_fit import entry_points

SANDBOX_OFF = (
    "a code bundle's functions run only in the sandbox, and TRAINYARD_SANDBOX=off here: not forecast "
    "before the job runs"
)
NO_BWRAP = (
    "a code bundle's functions run only in the sandbox, and bubblewrap (bwrap) is not installed on the API's "
    "host: not forecast before the job runs (`make servers` installs it)"
)
STDERR_SHOWN = 1000  # the last characters of a failed forecast's output, in its note
_ONE_AT_A_TIME = threading.Lock()  # each holds a torch process's memory


def runs_bundle_code(spec: JobSpec) -> bool:
    """Whether tracing the spec's step calls its bundle: model.factory, data.factory or train.loss."""
    return spec.program is None and bool(entry_points(spec))


def bundle_forecasts(settings: Settings, configs: list[RunConfig], target: Target) -> list[Outcome]:
    """One outcome per config (the forecasts of one spec and its fixes: one bundle), the cached ones without
    running anything; none (with why) where this host cannot sandbox."""
    keys = [shape_key(config, target, settings.data_dir) for config in configs]
    known = [FORECASTER.cached(key) for key in keys]
    if all(outcome is not None for outcome in known):
        return [outcome for outcome in known if outcome is not None]
    why = SANDBOX_OFF if settings.sandbox is SandboxMode.OFF else None if shutil.which("bwrap") else NO_BWRAP
    if why is not None:
        return [outcome or Outcome(None, why) for outcome in known]
    return FORECASTER.asking(
        settings,
        keys,
        configs,
        _ONE_AT_A_TIME,
        lambda missing, deadline: _sandboxed(settings, missing, target, deadline),
    )


def _sandbox(settings: Settings, spec: JobSpec, bundle: Path, scratch: Path) -> Sandbox:
    return Sandbox(
        run_dir=scratch,  # writes nothing; bwrap needs one place to bind read-write
        cwd=PROJECT_ROOT,
        limits=rlimits(settings),
        system=host_system(),
        state=tuple(folder.resolve() for folder in service_state(settings) if folder.is_dir()),
        shown=python_paths(PROJECT_ROOT),
        read_only=(bundle, *named_data_folders(settings, spec)),
        run_as=settings.job_uid if os.geteuid() == 0 else None,
    )


def _sandboxed(
    settings: Settings, configs: list[RunConfig], target: Target, deadline: float
) -> list[Outcome]:
    code = configs[0].spec.code
    assert code is not None
    try:
        bundle = ensure_unpacked(settings, code).resolve()
    except BundleUnavailable as error:
        return [Outcome(None, f"{UNFORECAST} {error}") for _ in configs]
    configs = [config.model_copy(update={"code_dir": str(bundle)}) for config in configs]
    with tempfile.TemporaryDirectory() as scratch:
        try:
            argv = sandbox_argv(_sandbox(settings, configs[0].spec, bundle, Path(scratch)))
        except ValueError as error:  # a data folder not there yet (a dry run), state holding the project
            return [Outcome(None, f"not forecast: {error}") for _ in configs]
        process = forecaster_process(argv, stderr=subprocess.PIPE)
        assert process.stderr is not None
        stderr = _Tail(process.stderr)
        try:
            return _exchange(settings, process, configs, target, deadline)
        except TimeoutError:
            return [Outcome(None, timed_out(settings)) for _ in configs]
        except OSError as error:
            said = stderr.text() or "no output"
            return [Outcome(None, f"the sandboxed forecast stopped ({error}): {said}") for _ in configs]
        except (ValueError, KeyError, TypeError) as error:  # the user's code wrote to its stdout's descriptor
            return [Outcome(None, f"the sandboxed forecast answered no forecast: {error}") for _ in configs]
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _exchange(
    settings: Settings,
    process: subprocess.Popen[str],
    configs: list[RunConfig],
    target: Target,
    deadline: float,
) -> list[Outcome]:
    """Once the process has its imports (by `deadline`), its answer to the request of `configs`, by as long
    again."""
    assert process.stdin is not None
    if read_line(process, deadline).strip() != FORECASTER_READY:
        raise OSError("it did not start as a forecaster")
    process.stdin.write(request_line(settings, configs, target))
    process.stdin.close()
    answers = outcomes(read_line(process, time.monotonic() + settings.forecast_timeout_s))
    if len(answers) != len(configs):
        raise ValueError(f"{len(answers)} answers to {len(configs)} jobs")
    return answers


class _Tail:
    """The last characters a process writes to a pipe, read by a thread of its own: the user's code may
    write without end, which then costs neither the API's memory nor its disk."""

    def __init__(self, stream: IO[str]) -> None:
        self._kept = ""
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        while chunk := stream.read(STDERR_SHOWN):
            self._kept = (self._kept + chunk)[-STDERR_SHOWN:]

    def text(self) -> str:
        """What it wrote, once it has exited."""
        self._thread.join(timeout=1.0)
        return self._kept.strip()
