"""Refused before it runs, and its fix runs (issue 44): for one configuration per model that runs out of GPU
memory, the forecast the service makes at submit (it will not fit), the job run as it was asked for anyway
(does it run out of memory?), and the quickest of the fixes the service's 422 would suggest
(app/services/forecast_check.py), run: does it fit, and how close was its forecast?

    python -m bench.forecast_oom [--only NAME,...] [--budget-s S]

Each configuration runs twice on GPU 0: as asked (expected to die of out-of-memory at its first step), then
with the suggested fix for --warmup + --steps steps.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from app.services.forecast_check import Fix, candidate_fixes, fitting_fixes
from bench.budget import Budget
from bench.forecast import gpt, job_spec, llama, resnet50, target
from bench.hf_lora import LLAMA_1B, write_model_and_data
from bench.report import record, section
from bench.run import CHILD_TIMEOUT_S
from bench.runtime import device_name
from bench.table import markdown, number, ratio, times
from jobspec.cluster import Inventory
from jobspec.datadir import DATA_DIR_ENV
from jobspec.plan import RunConfig, resolve_plan
from jobspec.spec import JobSpec
from tests.integration.trainer_helpers import TrainerRun, launch, write_config
from trainers.forecast.estimate import forecast

GiB = 2**30


def _without_checkpointing(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, "performance": {**config["performance"], "activation_checkpointing": False}}


# Per-GPU batches past the H200's memory as asked; eager, so that an out-of-memory comes at the first step
# rather than after a compile.
CASES: dict[str, dict[str, Any]] = {
    "gpt2-b256-eager": gpt(256, compiled=False),
    "resnet50-b4096": {**resnet50(4096), "data": {**resnet50(4096)["data"], "num_samples": 8192}},
    "llama1b-b24-no-ac": _without_checkpointing(llama(24, lora=False)),
    "llama1b-lora-b32-no-ac": _without_checkpointing(llama(32, lora=True)),
}
COLUMNS = (
    *("configuration", "forecast as asked (GiB)", "as asked, run", "suggested fix"),
    *("fix: forecast (GiB)", "fix: measured (GiB)", "x measured", "fix: step forecast / measured (ms)"),
)
OOM_WORDS = ("OutOfMemoryError", "CUDA out of memory")


@dataclass
class Outcome:
    name: str
    asked_gib: float | None
    asked_run: str
    fix: Fix | None
    fix_peak_gib: float | None = None
    fix_step_s: float | None = None


def _run(run_dir: Path, spec: dict[str, Any], budget: Budget) -> TrainerRun | str:
    """The job under torchrun on GPU 0; what stopped it, when it did not finish."""
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return "skipped: out of time"
    write_config(run_dir, spec)
    done, run = launch(run_dir, nproc=1, timeout=timeout, cuda_devices="0"), TrainerRun(run_dir, 1)
    if done.returncode == 0:
        return run
    log = run.log(0)
    if any(word in log for word in OOM_WORDS):
        return "out of memory"
    print(done.stdout[-2000:], log[-4000:], file=sys.stderr)
    return f"failed: exit {done.returncode}"


def _suggested(spec: JobSpec) -> tuple[float | None, Fix | None]:
    """The forecast of `spec` as asked, in GiB, and the quickest fix the service would suggest."""
    plan, where = resolve_plan(spec), target()
    asked = forecast(RunConfig(job_id=0, attempt=1, spec=spec, plan=plan), where, None)
    fixes = list(candidate_fixes(spec, plan, Inventory()))
    configs = [RunConfig(job_id=0, attempt=1, spec=fix.spec, plan=fix.plan) for fix in fixes]
    fitting = fitting_fixes(fixes, [forecast(config, where, None) for config in configs])
    return asked.peak_memory_bytes / GiB, (fitting[0] if fitting and not asked.fits else None)


def measure(name: str, args: argparse.Namespace, scratch: Path, budget: Budget) -> Outcome:
    asked_spec = job_spec(CASES[name], args)
    asked_gib, fix = _suggested(JobSpec.model_validate(asked_spec))
    asked = _run(scratch / f"{name}-asked", asked_spec, budget)
    outcome = Outcome(name, asked_gib, "ran to its end" if isinstance(asked, TrainerRun) else asked, fix)
    if fix is None:
        return outcome
    fixed = _run(scratch / f"{name}-fixed", fix.spec.model_dump(mode="json"), budget)
    if isinstance(fixed, TrainerRun):
        peaks = [value for _, value in fixed.metric("peak_reserved_mb")]
        steps = [value for step, value in fixed.metric("step_time_s") if step > args.warmup]
        outcome.fix_peak_gib = max(peaks) / 1024 if peaks else None
        outcome.fix_step_s = statistics.median(steps) if steps else None
    return outcome


def table(outcomes: list[Outcome]) -> str:
    rows = []
    for outcome in outcomes:
        fix = outcome.fix
        predicted = None if fix is None or fix.plan.forecast is None else fix.plan.forecast
        peak = None if predicted is None else predicted.peak_memory_bytes / GiB
        step = None if predicted is None else predicted.step_time_s * 1000
        measured_step = None if outcome.fix_step_s is None else outcome.fix_step_s * 1000
        rows.append(
            [
                outcome.name,
                number(outcome.asked_gib, 1),
                outcome.asked_run,
                "none fits" if fix is None else fix.change,
                number(peak, 1),
                number(outcome.fix_peak_gib, 1),
                times(ratio(peak, outcome.fix_peak_gib)),
                f"{number(step, 0)} / {number(measured_step, 0)}",
            ]
        )
    return markdown(COLUMNS, rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(CASES), help="configurations: " + ", ".join(CASES))
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps of the fix")
    parser.add_argument("--steps", type=int, default=5, help="timed steps of the fix")
    parser.add_argument("--budget-s", type=float, default=540, help="no run starts past it")
    args = parser.parse_args()
    args.gpus, args.smoke = 1, False
    names = args.only.split(",")
    if unknown := [n for n in names if n not in CASES]:
        parser.error(f"--only names {', '.join(unknown)}; choose from {', '.join(CASES)}")
    if not torch.cuda.is_available():
        parser.error("this bench runs jobs out of a GPU's memory: run it on a GPU machine")
    budget, outcomes = Budget(args.budget_s), []
    with tempfile.TemporaryDirectory(prefix="bench-forecast-oom-") as scratch:
        data_dir = Path(scratch) / "data"
        write_model_and_data(data_dir, LLAMA_1B, 4096)
        os.environ[DATA_DIR_ENV] = str(data_dir)
        for name in names:
            outcomes.append(measure(name, args, Path(scratch), budget))
            print(outcomes[-1], flush=True)
    record(section(device_name(torch.device("cuda", 0)), 1, table(outcomes)), False)
    return 0 if all(o.asked_run == "out of memory" and o.fix_peak_gib for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
