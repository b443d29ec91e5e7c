"""The forecast the service would store in bench.streaming's data.decode=auto job's plan: auto weighs its
loader workers against the images a second the forecast says the model takes, and a trainer started
without the service has none. Asked of `python -m trainers.forecast` in a process of its own, as the API
asks it (app/services/forecasts.py), so that this one never initialises CUDA beside the jobs it times; the
GPU is named as nvidia-smi names it. The service's learned calibration (app/services/forecast_learning.py)
is not applied: the table's forecast is what a first job of its kind gets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobspec.datadir import DATA_DIR_ENV
from jobspec.events import SPEC_FILE
from jobspec.forecast import Forecast
from jobspec.plan import RunConfig

FORECAST_TIMEOUT_S = 180


def gpu_target() -> dict[str, object]:
    """GPU 0 as the forecaster's Target: its name and memory."""
    query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits", "-i", "0"]
    name, memory_mib = subprocess.run(query, capture_output=True, text=True, check=True).stdout.split(", ")
    return {"gpu_name": name.strip(), "memory_bytes": int(memory_mib) * 2**20, "cpu_cores": 1}


def forecast(config: RunConfig) -> Forecast | None:
    """The job's forecast on GPU 0, or None (and why, on stderr) when the forecaster gives none."""
    request = {
        "data_dir": os.environ[DATA_DIR_ENV],
        "target": gpu_target(),
        "jobs": [{"config": config.model_dump(mode="json")}],
    }
    argv = [sys.executable, "-m", "trainers.forecast"]
    done = subprocess.run(
        argv, input=json.dumps(request) + "\n", capture_output=True, text=True, timeout=FORECAST_TIMEOUT_S
    )
    lines = done.stdout.splitlines()
    (answer,) = json.loads(lines[-1])["forecasts"] if len(lines) > 1 else [{"error": done.stderr[-2000:]}]
    if "forecast" not in answer:
        print(f"no forecast for data.decode=auto: {answer['error']}", file=sys.stderr, flush=True)
        return None
    return Forecast.model_validate(answer["forecast"])


def with_forecast(run_dir: Path, figures: Forecast) -> None:
    """The run directory's config, its plan given the forecast, as the service stores it."""
    path = run_dir / SPEC_FILE
    config = RunConfig.model_validate_json(path.read_text())
    config.plan.forecast = figures
    path.write_text(config.model_dump_json(), encoding="utf-8")
