"""What the service costs a job (issue 4, targets 4-6): reporting, start-up latency, and AMP's memory saving.

    python -m bench.overheads [--parts amp,reporting,latency,compiled] [--steps N] [--rounds R]
                              [--submissions 5] [--smoke]

One service, ResNet-50 224 px, 256 images per GPU, jobs one after another:

- reporting: the same job of 2K - 1 steps three times: reporting only at step K and at the end (no
  checkpoints), metrics every 10 steps, and metrics every 10 steps with the default checkpoint cadence (every
  epoch and at the end; an epoch is made K steps, so one checkpoint is taken at step K, inside the timed
  window, and the final one after it). The job's samples_per_s exists only where it reports, so all three
  are timed alike by the trainer's clock from their report at step K (warm-up is over) to their report at the
  last step. Target: <= 1 % cost. The final checkpoint is written after the last step, when the job is
  ending, not training: its seconds (last report to "done") are a column of their own. With --rounds R
  the three jobs run R times, interleaved (quiet, metrics, checkpoints, quiet, ...), so a slow spell of the
  machine touches every variant alike; each round's costs are against that round's quiet job, and the table
  gives their median and range. Run to run, a cost moves by about half a point, against a 1 % target.
- start-up: POST to the first optimizer step (the trainer's phase event) of 1-GPU single jobs and 2-GPU DDP
  jobs, p50 and max, and the p50 of each phase of the jobs' `timings`. Targets: p50 <= 5 s and <= 7 s.
- compiled start-up: the same 1-GPU job with performance.compile, once on an empty compile cache, then
  `submissions` times again, each finding the first's graphs and kernels in the host's cache
  (TRAINYARD_COMPILE_CACHE_DIR). POST to the first step as above; the first step itself, where
  torch.compile compiles (or loads from the cache) and cuDNN autotunes, is its own column. Target: the
  repeated job's p50 <= 10 s.
- AMP memory: the job's peak_mem_mb at fp32, bf16 and fp16. Target: lower than fp32.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from bench.budget import Budget
from bench.report import record, section
from bench.result import SKIPPED, Result, exit_code, failed
from bench.service import Service, run_series
from bench.table import markdown, name, number, ratio, times
from bench.trainyard_job import job_spec, with_sections
from bench.workload import Workload, preset

JOB_CAP_S = 120
COMPILED_JOB_CAP_S = 420  # a cold compile of ResNet-50's training step takes minutes on a few cores
BUDGET_S = 300
LATENCY_TARGETS = {"1 GPU single": 5.0, "2 GPU ddp": 7.0}  # p50 s, issue 21
COMPILED_TARGETS = {"1 GPU compiled, empty cache": None, "1 GPU compiled, repeated": 10.0}
REPORTING_STEPS, AMP_STEPS, LATENCY_STEPS = 160, 20, 5  # reporting: K = 20 warm-up + 160 / 2
NO_CHECKPOINTS = {"every_n_epochs": 0, "every_n_steps": 0, "save_final": False}
DEFAULT_CHECKPOINTS = {"every_n_epochs": 1, "every_n_steps": 0, "save_final": True}
PARTS = ("amp", "reporting", "latency", "compiled")
SPEC_MIN_SAMPLES = 16  # data.num_samples's lower bound


def part_names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in PARTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--parts takes some of {', '.join(PARTS)}, not {text!r}")
    return names


def reporting(service: Service, workload: Workload, rounds: int, budget: Budget) -> list[Result]:
    """`rounds` times three equal-length runs of 2K - 1 steps, each reporting at step K (every variant has
    that report: the quiet one's every_n_steps is K), timed by the trainer from that report to the last
    step's: K - 1 steps past warm-up. The rows in the order run."""
    marker = workload.warmup + workload.steps // 2
    steps = 2 * marker - 1
    base = with_sections(
        job_spec(replace(workload, warmup=0, steps=steps), 1, False),
        # Epochs of K steps: one save at step K. Smoke sizes fall under the spec's floor, so their epoch is
        # longer and they save only at the end.
        data={"num_samples": max(SPEC_MIN_SAMPLES, marker * workload.batch_per_rank)},
    )
    every_10 = {"every_n_steps": 10 if marker % 10 == 0 else 1}  # the marker step must report in all three
    variants = {
        "reports only at step K and the end": with_sections(
            base, metrics={"every_n_steps": marker}, checkpoint=NO_CHECKPOINTS
        ),
        "metrics every 10 steps": with_sections(base, metrics=every_10, checkpoint=NO_CHECKPOINTS),
        "metrics every 10 + default checkpoints": with_sections(
            base, metrics=every_10, checkpoint=DEFAULT_CHECKPOINTS
        ),
    }

    def timed(variant: str, spec: dict[str, Any]) -> Result:
        outcome = service.attempt(variant, spec, budget, JOB_CAP_S)
        if isinstance(outcome, Result):
            return outcome
        seconds = outcome.seconds_between(marker, steps)
        rate = (steps - marker) * workload.batch_per_rank / seconds if seconds else None
        tail = outcome.seconds_to_done(steps)
        return Result(variant, images_per_s=rate, peak_mem_mb=None, tail_s=tail)

    return [timed(variant, spec) for _ in range(rounds) for variant, spec in variants.items()]


def cost_percent(result: Result, quiet: Result) -> float | None:
    kept = ratio(result.images_per_s, quiet.images_per_s)
    return None if kept is None else 100 * (1 - kept)


def median_of(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def reporting_table(results: list[Result]) -> str:
    """A row per variant: medians over the rounds, each round's cost against that round's quiet job (the
    first variant)."""
    by_variant: dict[str, list[Result]] = {}
    for r in results:
        by_variant.setdefault(r.variant, []).append(r)
    quiet = next(iter(by_variant.values()))
    rows = []
    for variant, runs in by_variant.items():
        costs = [c for c in (cost_percent(r, q) for r, q in zip(runs, quiet, strict=False)) if c is not None]
        cost = median_of(list[float | None](costs))
        spread = f"{min(costs):+.2f} … {max(costs):+.2f} %" if len(costs) > 1 else "—"
        errors = "; ".join(sorted({r.error for r in runs if r.error}))
        rows.append(
            [
                variant + (f" ({errors})" if errors else ""),
                f"{len(runs) - sum(1 for r in runs if r.error)}/{len(runs)}",
                number(median_of([r.images_per_s for r in runs]), 0),
                "—" if cost is None else f"{cost:+.2f} %",
                spread,
                number(median_of([r.tail_s for r in runs]), 2),
            ]
        )
    columns = ("variant", "ran", "img/s (step K → last step)", "cost", "cost range", "last step → done s")
    return markdown(columns, rows)


def start_latencies(service: Service, workload: Workload, submissions: int, budget: Budget) -> list[Result]:
    """`submissions` short jobs on 1 GPU (single), then as many on 2 GPUs (DDP): one row per job."""
    on_gpu = workload.device == "cuda"
    short = replace(workload, warmup=0, steps=LATENCY_STEPS)
    results = []
    for gpus, strategy in ((1, "single"), (2, "ddp")):
        spec = with_sections(job_spec(short, gpus, False), metrics={"every_n_steps": LATENCY_STEPS})
        results += [
            service.result(f"{gpus} GPU {strategy}", spec, budget, JOB_CAP_S, 0, on_gpu)
            for _ in range(submissions)
        ]
    return results


def compiled_latencies(
    service: Service, workload: Workload, submissions: int, budget: Budget
) -> list[Result]:
    """One compiled 1-GPU job on the service's empty compile cache, then `submissions` more of it."""
    short = replace(workload, warmup=0, steps=LATENCY_STEPS)
    spec = with_sections(job_spec(short, 1, True), metrics={"every_n_steps": LATENCY_STEPS})
    on_gpu = workload.device == "cuda"
    first, repeated = COMPILED_TARGETS
    results = [service.result(first, spec, budget, COMPILED_JOB_CAP_S, 0, on_gpu)]
    return results + [
        service.result(repeated, spec, budget, COMPILED_JOB_CAP_S, 0, on_gpu) for _ in range(submissions)
    ]


def first_step_s(result: Result) -> list[float]:
    return [seconds for phase, seconds in result.phases if phase == "first_step"]


def latency_table(results: list[Result], targets: Mapping[str, float | None] = LATENCY_TARGETS) -> str:
    rows = []
    for variant, target in targets.items():
        runs = [r for r in results if r.variant == variant]
        seconds = [r.latency_s for r in runs if r.latency_s is not None]
        errors = sorted({name(r) for r in runs if r.error})
        p50 = statistics.median(seconds) if seconds else None
        every = "; ".join(part for part in [", ".join(f"{s:.1f}" for s in seconds), *errors] if part)
        first_steps = [s for r in runs for s in first_step_s(r)]
        rows.append(
            [
                variant,
                f"{len(seconds)}/{len(runs)}",
                number(p50, 1),
                number(max(seconds, default=None), 1),
                "" if target is None else f"p50 ≤ {target:.0f}",
                every,
                number(statistics.median(first_steps) if first_steps else None, 1),
            ]
        )
    columns = ("job", "ran", "p50 s", "max s", "target", "each s", "first step p50 s")
    latency = markdown(columns, rows)
    phases = phase_table(results, list(targets))
    return f"{latency}\n\nWhere it went (`timings` of each job, p50 s of each phase):\n\n{phases}"


def phase_table(results: list[Result], variants: list[str]) -> str:
    names = list(dict.fromkeys(phase for r in results for phase, _ in r.phases))
    rows = []
    for phase in names:
        cells = []
        for variant in variants:
            seconds = [s for r in results if r.variant == variant for p, s in r.phases if p == phase]
            cells.append(number(statistics.median(seconds) if seconds else None, 2))
        rows.append([phase, *cells])
    return markdown(("phase", *variants), rows)


def amp_memory(service: Service, workload: Workload, budget: Budget) -> list[Result]:
    on_gpu = workload.device == "cuda"
    spec = job_spec(replace(workload, steps=AMP_STEPS), 1, False)
    results = []
    for precision in ("fp32", "bf16", "fp16"):
        if precision == "fp16" and not on_gpu:
            results.append(failed(precision, f"{SKIPPED}: fp16 needs a GPU"))
            continue
        results.append(
            service.result(
                precision, {**spec, "precision": precision}, budget, JOB_CAP_S, workload.warmup, on_gpu
            )
        )
    return results


def amp_table(results: list[Result]) -> str:
    fp32 = results[0].peak_mem_mb
    rows = [
        [name(r), number(r.peak_mem_mb, 0), times(ratio(r.peak_mem_mb, fp32)), number(r.images_per_s, 0)]
        for r in results
    ]
    return markdown(("precision", "peak MB", "x fp32", "img/s"), rows)


def body(workload: Workload, submissions: int, parts: dict[str, list[Result]]) -> list[str]:
    """The RESULTS.md text: a line of setup, then a titled table for each part that ran."""
    size = f"ResNet-50 {workload.image_size} px, {workload.batch_per_rank} images per GPU"
    titles = {
        "amp": f"AMP peak memory (1 GPU, {workload.warmup + AMP_STEPS} steps; img/s: steady rate)",
        "reporting": (
            f"Reporting cost (1 GPU, bf16, K = {workload.warmup + workload.steps // 2}, "
            f"{2 * (workload.warmup + workload.steps // 2) - 1} steps each, epochs of K steps; img/s by the "
            "trainer's clock from its report at step K to its last step's; cost against the first row of the "
            "same round, median and range over the rounds)"
        ),
        "latency": f"POST → first optimizer step ({submissions} submissions each, {LATENCY_STEPS}-step jobs)",
        "compiled": (
            f"POST → first optimizer step of a compiled job ({LATENCY_STEPS}-step jobs): "
            f"once on an empty compile cache, then {submissions} more; the first step, where it compiles or "
            "loads from the cache and cuDNN autotunes, in its own column"
        ),
    }
    tables: dict[str, Callable[[list[Result]], str]] = {
        "amp": amp_table,
        "reporting": reporting_table,
        "latency": latency_table,
        "compiled": lambda rows: latency_table(rows, COMPILED_TARGETS),
    }
    texts = [f"{size}, channels_last, data on the GPU, one job at a time."]
    return texts + [f"**{titles[key]}**\n\n{tables[key](rows)}" for key, rows in parts.items() if rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="timed steps of the reporting runs (after warm-up)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved repeats of the reporting jobs")
    parser.add_argument("--submissions", type=int, help="start-up latency jobs per GPU count (default 5)")
    parser.add_argument("--parts", type=part_names, default=PARTS, help=f"some of {','.join(PARTS)}")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (gloo); prints only")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="skip jobs past this")
    args = parser.parse_args()
    workload = preset(
        "resnet50", smoke=args.smoke, steps=args.steps or (None if args.smoke else REPORTING_STEPS)
    )
    submissions = args.submissions or (2 if args.smoke else 5)
    budget = Budget(args.budget_s)
    parts: dict[str, list[Result]] = {}

    measures: dict[str, Callable[[Service], list[Result]]] = {
        "amp": lambda service: amp_memory(service, workload, budget),
        "reporting": lambda service: reporting(service, workload, args.rounds, budget),
        "latency": lambda service: start_latencies(service, workload, submissions, budget),
        "compiled": lambda service: compiled_latencies(service, workload, submissions, budget),
    }

    def series(service: Service) -> list[Result]:
        # In PARTS order, cheapest first, so a spent budget skips the longest part rather than every part.
        for part in (p for p in PARTS if p in args.parts):
            parts[part] = measures[part](service)
        return [row for rows in parts.values() for row in rows]

    device, results = run_series(2, workload.device == "cuda", series)
    failures = [name(r) for r in results if r.variant == "service"]  # the service itself failed
    record(section(device, 2, "\n\n".join([*failures, *body(workload, submissions, parts)])), args.smoke)
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
