"""Where a forecast configuration's step goes, to set the forecast's model of the step against (issue 44):
each configuration of bench/forecast.py run by the trainer as the forecast bench runs it, its warm-up and
timed steps first (every metrics window's step time is printed, to show how steady the step is), then the
trainer's own profiler (profile.steps) on rank 0 for a few more steps. The trace is reduced to what the
forecast models: the step's wall time, the GPU's busy time (compute and NCCL's kernels apart), the host's
time in fsdp's hooks, the optimizer's step and the operations it launched.

    python -m bench.forecast_profile --strategy fsdp --gpus 2 --only resnet50-b64 [--warmup N] [--steps N]
                                     [--profile-steps N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.budget import Budget
from bench.forecast import CONFIGS, job_spec
from bench.hf_lora import LLAMA_1B, write_model_and_data
from bench.run import CHILD_TIMEOUT_S
from jobspec.datadir import DATA_DIR_ENV
from jobspec.profile_summary import PROFILE_DIR, SUMMARY_FILE, TRACE_FILE
from tests.integration.trainer_helpers import TrainerRun, launch, write_config

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
HOST_WAITS = frozenset({"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize"})
LAUNCHES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"})


def union_ms(intervals: list[tuple[float, float]]) -> float:
    """The time covered by at least one of the intervals (microsecond starts and ends), in ms."""
    covered, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            covered += stop - max(start, end)
            end = stop
    return covered / 1000


def outermost(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events no other of the list holds, per thread (fsdp's hooks nest their own labels)."""
    kept: list[dict[str, Any]] = []
    ends: dict[Any, float] = {}
    for event in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        if event["ts"] >= ends.get(event["tid"], float("-inf")):
            kept.append(event)
            ends[event["tid"]] = event["ts"] + event["dur"]
    return kept


def step_figures(events: list[dict[str, Any]], start: float, stop: float) -> dict[str, Any]:
    inside = [e for e in events if e.get("ph") == "X" and start <= e["ts"] < stop]
    gpu = [e for e in inside if e.get("cat") in GPU_CATEGORIES]
    nccl = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if "nccl" in e["name"].lower()]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if "nccl" not in e["name"].lower()]
    labels = [e for e in inside if e.get("cat") == "user_annotation"]
    fsdp = outermost([e for e in labels if e["name"].startswith("FSDP::")])
    by_hook: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for event in fsdp:
        hook = event["name"].split(" (")[0]  # without the module's name that fsdp appends
        by_hook[hook] += event["dur"] / 1000
        calls[hook] += 1
    optimizer = [e for e in labels if e["name"].startswith("Optimizer.")]
    runtime = [e for e in inside if e.get("cat") == "cuda_runtime"]
    threads = Counter(e["tid"] for e in inside if e.get("cat") == "cpu_op")
    return {
        "wall_ms": (stop - start) / 1000,
        "gpu_busy_ms": union_ms([(e["ts"], e["ts"] + e["dur"]) for e in gpu]),
        "compute_busy_ms": union_ms(compute),
        "nccl_busy_ms": union_ms(nccl),
        "kernels": len(gpu),
        "launches": sum(e["name"] in LAUNCHES for e in runtime),
        "cpu_ops": sum(threads.values()),
        "cpu_ops_by_thread": dict(threads),
        "host_wait_ms": sum(e["dur"] for e in runtime if e["name"] in HOST_WAITS) / 1000,
        "fsdp_hooks_ms": sum(by_hook.values()),
        "fsdp_hooks": {name: [calls[name], round(ms, 2)] for name, ms in by_hook.most_common(12)},
        "optimizer_ms": {e["name"]: round(e["dur"] / 1000, 2) for e in optimizer},
        "last_kernel_end_after_step_ms": (max((e["ts"] + e["dur"] for e in gpu), default=stop) - stop) / 1000,
    }


def reduce_trace(path: Path) -> list[dict[str, Any]]:
    events = json.loads(path.read_text())["traceEvents"]
    steps = sorted(
        (e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    return [step_figures(events, s["ts"], s["ts"] + s["dur"]) for s in steps]


def profile_one(name: str, args: argparse.Namespace, run_dir: Path, budget: Budget) -> dict[str, Any]:
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return {"name": name, "note": "skipped: out of time"}
    config = CONFIGS[name]
    if args.strategy:
        config = {**config, "parallel": {"strategy": args.strategy}}
    spec = job_spec(config, args)
    timed = args.warmup + args.steps
    spec["train"]["max_steps"] = timed + args.profile_steps + 1
    spec["profile"] = {"steps": args.profile_steps, "skip_first": timed}
    write_config(run_dir, spec)
    gpus = ",".join(str(index) for index in range(args.gpus))
    done = launch(run_dir, nproc=args.gpus, timeout=timeout, cuda_devices=gpus)
    run = TrainerRun(run_dir, args.gpus)
    if done.returncode:
        print(done.stdout[-2000:], run.log(0)[-4000:], file=sys.stderr)
        return {"name": name, "note": f"job failed: exit {done.returncode}"}
    windows = [(step, value * 1000) for step, value in run.metric("step_time_s")]
    trace = run_dir / PROFILE_DIR / TRACE_FILE
    summary = json.loads((run_dir / PROFILE_DIR / SUMMARY_FILE).read_text())
    return {
        "name": name,
        "windows_ms": [[step, round(ms, 2)] for step, ms in windows],
        "peak_reserved_mb": max(value for _, value in run.metric("peak_reserved_mb")),
        "profiled_steps": reduce_trace(trace),
        "top_cpu_ops": summary["top_cpu_ops"],
        "top_gpu_ops": summary["top_gpu_ops"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", required=True, help="configurations: " + ", ".join(CONFIGS))
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--strategy", default="fsdp")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.smoke = False  # job_spec reads it: these are the full configurations
    budget = Budget(args.budget_s)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-forecast-profile-") as scratch:
        data_dir = Path(scratch) / "data"
        write_model_and_data(data_dir, LLAMA_1B, 4096)
        os.environ[DATA_DIR_ENV] = str(data_dir)
        # A configuration named twice runs twice: how its step moves from one launch to the next.
        for index, name in enumerate(args.only.split(",")):
            results.append(profile_one(name, args, Path(scratch) / f"{index}-{name}", budget))
            brief = {k: v for k, v in results[-1].items() if k not in ("top_cpu_ops", "top_gpu_ops")}
            print(json.dumps(brief), flush=True)
            if args.json is not None:
                args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
