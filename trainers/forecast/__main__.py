"""`python -m trainers.forecast`: the forecasts of the jobs a request names, as the API asks for them
(app/services/forecasts.py): a JSON request a line on stdin, a JSON answer a line on stdout, one entry per
job, each a forecast or why there is none; it serves until stdin closes. A process of its own: torch stays
out of the API's (its memory with it), and is imported once for every request. A spec with a code bundle
is forecast by one of its own, in the sandbox, with RunConfig.code_dir set (app/services/bundle_forecasts.py).

Request: {"data_dir": str, "target": {"gpu_name", "memory_bytes", "cpu_cores", "host_op_s"},
          "jobs": [{"config": RunConfig, "total_steps": int | None}]}
Answer: {"forecasts": [{"forecast": Forecast} | {"error": str}, ...]}
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import redirect_stdout
from typing import Any

from jobspec.datadir import DATA_DIR_ENV
from jobspec.forecast import FORECASTER_READY
from jobspec.plan import RunConfig
from trainers.forecast.estimate import Target, forecast


def answer(request: dict[str, Any]) -> dict[str, Any]:
    # Where model.path and data.root are, for this request's API process (its settings may differ).
    os.environ[DATA_DIR_ENV] = request["data_dir"]
    target = Target(**request["target"])
    found: list[dict[str, Any]] = []
    for job in request["jobs"]:
        try:
            config = RunConfig.model_validate(job["config"])
            found.append({"forecast": forecast(config, target, job.get("total_steps")).model_dump()})
        except Exception as error:  # one job's failure is its answer; the others are still forecast
            found.append({"error": f"{type(error).__name__}: {error}"[:2000]})
    return {"forecasts": found}


def main() -> None:
    print(FORECASTER_READY, flush=True)
    for line in sys.stdin:
        # A code bundle's factory may print: its words go to stderr, stdout carries only answers.
        with redirect_stdout(sys.stderr):
            found = answer(json.loads(line))
        print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
