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
from contextlib import redirect_stdout, suppress
from typing import Any

from jobspec.datadir import DATA_DIR_ENV
from jobspec.forecast import FORECASTER_CPUS_ENV, FORECASTER_READY
from jobspec.plan import RunConfig


def answer(request: dict[str, Any]) -> dict[str, Any]:
    from trainers.forecast.estimate import Target, forecast  # imported by main() first: see there

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


def take_back_cpus() -> None:
    """The CPUs the API process had before it kept its threads to one (app/cpu_pin.py): this process
    inherited that one, and takes them back before it imports torch, which sizes its threads by them."""
    if cpus := os.environ.get(FORECASTER_CPUS_ENV):
        with suppress(OSError):  # none of them left to a sandbox's cgroup: it stays where it is
            os.sched_setaffinity(0, {int(cpu) for cpu in cpus.split(",")})


def main() -> None:
    take_back_cpus()
    # torch, which the estimate imports, sizes its pool of threads by the CPUs it may use as it is imported:
    # so only now, and before the process says it is ready.
    import trainers.forecast.estimate  # noqa: F401

    print(FORECASTER_READY, flush=True)
    for line in sys.stdin:
        # A code bundle's factory may print: its words go to stderr, stdout carries only answers.
        with redirect_stdout(sys.stderr):
            found = answer(json.loads(line))
        print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
