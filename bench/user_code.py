"""User code and the sandbox (issue 15): the built-in ResNet-50 job against the same model from a code bundle.

    python -m bench.user_code [--steps N] [--submissions N] [--budget-s S] [--smoke]

Three jobs on GPU 0 through the real service (bench.service), each `trainyard_job.job_spec` for ResNet-50:
the built-in `model.arch: resnet50`; the same spec with `model.factory: models:build` from a bundle this
script writes (models.py, whose build() returns torchvision's resnet50) and pushes with POST /v1/code, in a
service with the sandbox at its default (TRAINYARD_SANDBOX=auto: bundle jobs run in bubblewrap); and the
same bundle job in a second service with TRAINYARD_SANDBOX=off. Rows: steady img/s, x built-in, peak memory,
POST→first step; then the sandbox's cost, sandboxed against not: step time (%) and start-up (s).

With --submissions N (issue 34, item 4), start-up alone instead: N short built-in jobs and N short bundle
jobs, alternating, in one service with the sandbox on (auto), after one unmeasured job of each (the first
job of a service finds its standbys still importing): POST→first step p50, max, and each phase's p50 from
the jobs' `timings`. Target: the bundle job's p50 <= 5 s.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.cli.pack import pack
from bench.budget import Budget
from bench.overheads import LATENCY_STEPS, latency_table
from bench.report import record, section
from bench.result import Result, exit_code, failed
from bench.service import Finished, Service, job_result, run_series
from bench.table import markdown, number, percent, ratio, times
from bench.trainyard_job import JOB_TIMEOUT_S, job_spec, with_sections
from bench.workload import NUM_CLASSES, Workload, preset

BUDGET_S = 500  # the whole run, both services' start-up included, inside one device call
COLUMNS = ("variant", "in bwrap", "img/s", "x built-in", "peak MB", "POST→first step s")
BUILT_IN, SANDBOXED, UNSANDBOXED = "built-in resnet50", "bundle, sandbox on (auto)", "bundle, sandbox off"
LATENCY_TARGETS = {BUILT_IN: None, SANDBOXED: 5.0}  # p50 s, issue 34 item 4
LATENCY_JOB_CAP_S = 120

MODELS_PY = '''"""A code bundle's model: torchvision's ResNet-50, the built-in `resnet50`'s network."""

import torchvision


def build(num_classes: int = 10):
    return torchvision.models.resnet50(weights=None, num_classes=num_classes)
'''


def bundle_bytes() -> bytes:
    """The bundle's tar.gz as `trainyard code push` packs it (deterministic: the same bytes every run)."""
    with tempfile.TemporaryDirectory(prefix="trainyard-bundle-") as tmp:
        (Path(tmp) / "models.py").write_text(MODELS_PY)
        out = io.BytesIO()
        pack(Path(tmp), out)
        return out.getvalue()


def push(service: Service, archive: bytes) -> str:
    """POST /v1/code; the bundle's id for spec.code."""
    response = service.client.post("/v1/code", content=archive, headers={"Content-Type": "application/gzip"})
    if response.status_code not in (200, 201):
        raise RuntimeError(f"POST /v1/code: {response.status_code} {response.text[:200]}")
    code_id: str = response.json()["id"]
    return code_id


def bundle_spec(base: dict[str, Any], code_id: str) -> dict[str, Any]:
    """The built-in job's spec with its model from the bundle: nothing else differs."""
    model = {"factory": "models:build", "kwargs": {"num_classes": NUM_CLASSES}}
    return {**base, "name": base["name"] + "-bundle", "code": code_id, "model": model}


def row(
    service: Service, variant: str, spec: dict[str, Any], budget: Budget, warmup: int, on_gpu: bool
) -> Result:
    """The job's row (bench.service.job_result), its variant saying whether the worker ran it in bwrap, as
    the plan's argv (GET /v1/jobs/{id}) shows: the proof that the sandbox was on, or off."""
    outcome = service.attempt(variant, spec, budget, JOB_TIMEOUT_S)
    if not isinstance(outcome, Finished):
        return outcome
    argv = (outcome.job.get("plan") or {}).get("argv") or []
    boxed = "yes" if "bwrap" in argv else "no"  # env --ignore-signal=TERM bwrap ... torchrun ...
    return job_result(f"{variant}\t{boxed}", outcome, warmup, on_gpu, world_size=1)


def bundle_row(service: Service, variant: str, base: dict[str, Any], archive: bytes, **run: Any) -> Result:
    try:
        code_id = push(service, archive)
    except Exception as exc:  # a refused push is this row's failure, not the run's
        return failed(variant, repr(exc)[:160])
    return row(service, variant, bundle_spec(base, code_id), **run)


def measure(workload: Workload, budget: Budget) -> tuple[str, list[Result]]:
    """Built-in and sandboxed bundle in one service (sandbox auto), the unsandboxed bundle in a second."""
    on_gpu = workload.device == "cuda"
    base = job_spec(workload, 1, compile_model=False)
    archive = bundle_bytes()
    run: dict[str, Any] = {"budget": budget, "warmup": workload.warmup, "on_gpu": on_gpu}

    def sandbox_auto(service: Service) -> list[Result]:
        return [
            row(service, BUILT_IN, base, **run),
            bundle_row(service, SANDBOXED, base, archive, **run),
        ]

    def sandbox_off(service: Service) -> list[Result]:
        return [bundle_row(service, UNSANDBOXED, base, archive, **run)]

    device, first = run_series(1, on_gpu, sandbox_auto)
    print("\n>>> second service: TRAINYARD_SANDBOX=off", file=sys.stderr, flush=True)
    _, second = run_series(1, on_gpu, sandbox_off, TRAINYARD_SANDBOX="off")
    return device, [*first, *second]


def start_latencies(workload: Workload, submissions: int, budget: Budget) -> tuple[str, list[Result]]:
    """One unmeasured job of each kind, then `submissions` short built-in and bundle jobs, alternating, so
    that a slow spell of the machine touches both alike."""
    on_gpu = workload.device == "cuda"
    short = replace(workload, warmup=0, steps=LATENCY_STEPS)
    base = with_sections(job_spec(short, 1, compile_model=False), metrics={"every_n_steps": LATENCY_STEPS})
    archive = bundle_bytes()

    def series(service: Service) -> list[Result]:
        bundle = bundle_spec(base, push(service, archive))
        specs = {BUILT_IN: base, SANDBOXED: bundle}
        for variant, spec in specs.items():
            service.result(f"{variant} (unmeasured)", spec, budget, LATENCY_JOB_CAP_S, 0, on_gpu)
        return [
            service.result(variant, spec, budget, LATENCY_JOB_CAP_S, 0, on_gpu)
            for _ in range(submissions)
            for variant, spec in specs.items()
        ]

    return run_series(1, on_gpu, series)


def tables(results: list[Result]) -> str:
    """The rows, x the built-in row's img/s; then the sandbox's cost: (b) against (c)."""
    base = results[0].images_per_s
    rows = [
        [
            *(r.variant.split("\t") if not r.error else [f"{r.variant} (failed: {r.error})", "—"]),
            number(r.images_per_s, 0),
            times(ratio(r.images_per_s, base)),
            number(r.peak_mem_mb, 0),
            number(r.latency_s, 1),
        ]
        for r in results
    ]
    by_name = {r.variant.split("\t")[0]: r for r in results}
    on, off = by_name.get(SANDBOXED), by_name.get(UNSANDBOXED)
    # Step time is 1 / img/s at a fixed batch: the sandboxed step's extra time is off/on - 1.
    speed = ratio(off.images_per_s, on.images_per_s) if on and off else None
    step_cost = None if speed is None else speed - 1
    start_cost = (
        on.latency_s - off.latency_s
        if on and off and on.latency_s is not None and off.latency_s is not None
        else None
    )
    cost = markdown(
        ("sandbox's cost (on vs off)", "value", "target"),
        [
            ["step time", percent(step_cost), "≤ 1 %"],
            ["POST→first step (one sample each)", number(start_cost, 2) + " s", "≤ 0.5 s"],
        ],
    )
    return markdown(COLUMNS, rows) + "\n\n" + cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="timed steps (after warm-up) per job")
    parser.add_argument("--submissions", type=int, help="start-up only: this many jobs of each kind")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU; prints only")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="skip jobs past this")
    args = parser.parse_args()
    workload = preset("resnet50", smoke=args.smoke, steps=args.steps)
    if args.submissions:
        device, results = start_latencies(workload, args.submissions, Budget(args.budget_s))
        title = (
            f"POST → first optimizer step, {args.submissions} submissions each ({LATENCY_STEPS}-step jobs)"
        )
        text, issue = (
            f"**{title}**\n\n{latency_table(results, LATENCY_TARGETS)}",
            "issue 34: user code starts warm",
        )
    else:
        device, results = measure(workload, Budget(args.budget_s))
        text, issue = tables(results), "issue 15: user code and the sandbox"
    heading, body = section(device, 1, text).split("\n", 1)
    record(f"{heading} ({issue})\n{body}", args.smoke)
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
