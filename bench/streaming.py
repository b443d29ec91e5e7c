"""Streamed image data (issues 16, 34 and 48): ResNet-50 at 224 px (--image-size), bf16, channels_last,
random resized crop + flip, on an ImageNet-like JPEG folder this script writes to the machine's disk.

    python -m bench.streaming [--images N] [--classes C] [--picture-px P] [--image-size S] [--dir DIR]
        [--workers N[,N...]] [--steps N] [--budget-s S] [--smoke] [--s3 | --s3-only] [--pairs N]

The folder (--images JPEGs of about 400 x 350, or of about P x P with --picture-px, default 50,000, in
--classes folders, default 100, written by every core at once and kept for the next run) is read by, one
after another on GPU 0, at each loader-worker count of --workers (default cores-2), a table each:
  - the Trainyard trainer streaming it (data.placement=stream), decoded by the loader workers;
  - the same, decoded on the GPU (data.decode=gpu);
  - the same, data.decode=auto: its row names what it chose (bench/streaming_forecast.py gives its plan the
    forecast the service would store, which auto weighs the workers against); on the CPU, skipped, as
    auto is the first row there;
  - the same job with the folder decoded once onto the GPU before step 1 (data.placement=gpu);
  - bench/folder_loop.py: torchvision ImageFolder + PIL transforms + DataLoader(num_workers=the count);
  - with --s3, at the first count only, the first one again on the folder uploaded to moto's S3 server on
    loopback (bench/s3_root.py): data.root s3://..., each image a GET, the job's cache on; then the same
    pictures packed into shards (dataset shards, WebDataset's tar layout: bench/streaming_folder.py),
    streamed from the disk and from the server, with a cache they fit: read in 8 MiB blocks; --pairs N runs
    those two N times, alternated, and shows each one's median run.
Issue 48's targets are at 128 px with 4 and 14 loader workers, on pictures of about 160 px:

    python -m bench.streaming --images 20000 --picture-px 160 --image-size 128 --workers 4,14 --budget-s 1100

(two counts run ten jobs: give them the time, or run --workers 4 and --workers 14 one after the other).
The trainer runs under torchrun as the worker starts it (tests/integration/trainer_helpers.py), without the
service: "start→first step" runs from the launch to the trainer's first step. Its img/s is the median of its
samples_per_s reports after warm-up. GPU utilisation (nvidia-smi) and the CPU cores busy machine-wide
(/proc/stat: the loader workers and the training process) are sampled twice a second and averaged over the
timed steps. Rows and the targets' ratios (bench/streaming_tables.py) are printed and, unless --smoke,
appended to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.budget import Budget
from bench.report import record, section
from bench.result import SKIPPED, exit_code, failed, parse
from bench.run import CHILD_TIMEOUT_S, child_argv
from bench.s3_root import s3_root
from bench.service import Finished, job_result
from bench.streaming_folder import FOLDER, SHARDS, ensure_folder, ensure_shards, pictures
from bench.streaming_forecast import forecast, with_forecast
from bench.streaming_monitor import Monitor
from bench.streaming_tables import (
    AUTO_DECODE,
    FROM_S3,
    GPU_DECODE,
    RESIDENT,
    SHARDS_DISK,
    SHARDS_S3,
    STREAMED,
    Row,
    hand_written,
    tables,
)
from bench.warm_start import launch_run
from bench.workload import LR, MOMENTUM, WINDOW_PREFIX, Workload, default_workers, preset
from jobspec.datadir import DATA_DIR_ENV
from jobspec.events import MetricsEvent
from jobspec.forecast import Forecast
from tests.integration.trainer_helpers import TrainerRun, write_config

BUDGET_S = 560
IMAGES, CLASSES, SMOKE_IMAGES, SMOKE_CLASSES = 50_000, 100, 64, 4
# The rank's line of what data.decode=auto chose (trainers/data/decode_choice.py).
AUTO_LOG = "data: data.decode=auto: "


def job_spec(
    workload: Workload,
    placement: str,
    decode: str,
    workers: int,
    root: str = FOLDER,
    dataset: str = "image_folder",
) -> dict[str, Any]:
    on_gpu = workload.device == "cuda"
    return {
        "name": f"bench-streaming-{placement}-{decode}",
        "model": {"arch": workload.arch},
        "data": {
            "dataset": dataset,
            "root": root,
            "image_size": workload.image_size,
            "load_size": round(workload.image_size * 8 / 7),  # 256 for 224: ImageNet's usual resize
            "placement": placement,
            "decode": decode,
            "loader_workers": workers,
            "val_fraction": 0.0,
            "augment": {"random_resized_crop": {}, "hflip": 0.5},
        },
        "train": {
            "max_steps": workload.warmup + workload.steps,
            "batch_size": workload.batch_per_rank,
            "lr": LR,
            "momentum": MOMENTUM,
            "eval_every_epochs": 0,
        },
        "parallel": {"strategy": "single", **({"gpus": [0]} if on_gpu else {"nproc_per_node": 1})},
        "precision": "bf16",
        "performance": {"channels_last": True},
        "checkpoint": {"every_n_epochs": 0, "every_n_steps": 0, "save_final": False},
        "metrics": {"every_n_steps": 10 if on_gpu else 1},
    }


def timed_window(events: list[Any], warmup: int) -> tuple[float, float] | None:
    times_ = [(e.step, e.time) for e in events if isinstance(e, MetricsEvent)]
    after = [t for step, t in times_ if step >= warmup]
    return (after[0], after[-1]) if len(after) > 1 else None


def trainer_row(variant: str, spec: dict[str, Any], bench: Bench, run_dir: Path) -> Row:
    """The trainer's run of `spec`, its plan given the forecast the service would store."""
    workload = bench.workload
    timeout = bench.budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return Row(failed(variant, f"{SKIPPED}: out of time"))
    print(f"\n>>> {variant}", file=sys.stderr, flush=True)
    on_gpu = workload.device == "cuda"
    write_config(run_dir, spec)
    if bench.figures is not None:
        with_forecast(run_dir, bench.figures)
    monitor = Monitor(on_gpu)
    started = time.time()
    try:
        done = launch_run(run_dir, nproc=1, timeout=timeout, cuda_devices="0" if on_gpu else "")
    except subprocess.TimeoutExpired:
        return Row(failed(variant, f"over {timeout:.0f}s"))
    finally:
        monitor.stop.set()
    run = TrainerRun(run_dir, 1)
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-2000:], run.log(0)[-4000:], file=sys.stderr)
        return Row(failed(variant, f"exit {done.returncode}"))
    events = run.events()
    losses = run.metric("loss")
    job = {"created_at": datetime.fromtimestamp(started, UTC).isoformat(), "latest_metrics": {}}
    job["latest_metrics"] = {"loss": losses[-1][1]} if losses else {}
    result = job_result(
        chosen(variant, run.log(0)), Finished(job, events), workload.warmup, on_gpu, world_size=1
    )
    cores, gpu = monitor.mean(timed_window(events, workload.warmup))
    return Row(result, cores, gpu)


def chosen(variant: str, log: str) -> str:
    """The variant, with the decoder data.decode=auto chose where its rank's log line says (what precedes
    its first colon after the field: cpu, gpu, or split with the workers' and the GPU's shares)."""
    lines = [line for line in log.splitlines() if line.startswith(AUTO_LOG)]
    return f"{variant}: {lines[0][len(AUTO_LOG) :].split(':')[0]}" if lines else variant


def folder_loop_row(root: Path, workload: Workload, workers: int, budget: Budget) -> Row:
    variant = hand_written(workers)
    timeout = budget.timeout(CHILD_TIMEOUT_S)
    if timeout is None:
        return Row(failed(variant, f"{SKIPPED}: out of time"))
    argv = child_argv("bench.folder_loop", workload, 1, ["--root", str(root), "--workers", str(workers)])
    print(f"\n>>> {variant}", file=sys.stderr, flush=True)
    monitor = Monitor(workload.device == "cuda")
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Row(failed(variant, f"over {timeout:.0f}s"))
    finally:
        monitor.stop.set()
    found = parse(done.stdout)
    if done.returncode or found is None:
        return Row(failed(variant, f"exit {done.returncode}"))
    lines = [line for line in done.stdout.splitlines() if line.startswith(WINDOW_PREFIX)]
    start, end = json.loads(lines[-1][len(WINDOW_PREFIX) :])
    cores, gpu = monitor.mean((start, end))
    return Row(replace(found, variant=variant), cores, gpu)


@dataclass(frozen=True)
class Bench:
    """What every row of a run shares."""

    workload: Workload
    budget: Budget
    data_dir: Path
    runs: Path  # the run directories, fresh each time: a trainer must never read an earlier run's events
    s3_only: bool
    pairs: int  # --s3's runs of the shards from the disk and from the store, alternated
    figures: Forecast | None  # the model's forecast, stored in every trainer job's plan as the service would

    @property
    def root(self) -> Path:
        return self.data_dir / FOLDER


def worker_rows(bench: Bench, workers: int) -> list[Row]:
    """One loader-worker count's rows: streamed with each decode, resident, the hand-written loop."""
    workload = bench.workload
    on_gpu = workload.device == "cuda"
    gpu_only = on_gpu and not bench.s3_only
    variants = [
        (STREAMED, job_spec(workload, "stream", "cpu", workers)),
        (GPU_DECODE, job_spec(workload, "stream", "gpu", workers) if gpu_only else None),
        # On a CPU job auto is the loader workers' decoding by its rule: the row above.
        (AUTO_DECODE, job_spec(workload, "stream", "auto", workers) if gpu_only else None),
        (RESIDENT, None if bench.s3_only else job_spec(workload, "gpu" if on_gpu else "cpu", "cpu", workers)),
    ]
    skipped = f"{SKIPPED}: --s3-only" if bench.s3_only else f"{SKIPPED}: needs a GPU"
    rows = [
        trainer_row(variant, spec, bench, bench.runs / f"{workers}-{i}")
        if spec
        else Row(failed(variant, skipped))
        for i, (variant, spec) in enumerate(variants)
    ]
    hand = hand_written(workers)
    rows.append(
        Row(failed(hand, skipped))
        if bench.s3_only
        else folder_loop_row(bench.root, workload, workers, bench.budget)
    )
    return rows


def median_row(runs: list[Row]) -> Row:
    """Of one variant's runs, the one of median images/s (the lower middle of an even count); each run's
    rate is printed."""
    rates = [run.result.images_per_s for run in runs]
    print(f"{runs[0].result.variant}: {rates} img/s", file=sys.stderr, flush=True)
    measured = sorted(
        (run for run in runs if run.result.images_per_s), key=lambda run: run.result.images_per_s or 0
    )
    return measured[(len(measured) - 1) // 2] if measured else runs[0]


def s3_rows(bench: Bench, workers: int) -> list[Row]:
    """Issue 46's: the shards from the disk and from the S3 server, then the folder from the server."""
    rows, workload = [], bench.workload
    # The shards first: a few uploads, where the folder's are one per image.
    shards = ensure_shards(bench.data_dir, bench.root)
    on_disk = job_spec(workload, "stream", "cpu", workers, SHARDS, "shards")
    with s3_root(shards) as stored:
        from_store = job_spec(workload, "stream", "cpu", workers, stored, "shards")
        # A cache the shards fit, as docs/data.md advises, so that the job reads them in blocks.
        from_store["data"]["cache_bytes"] = 2 * sum(path.stat().st_size for path in shards.glob("*.tar"))
        disk_runs, store_runs = [], []
        # Alternated: a drift in the machine's speed between runs falls on both alike.
        for n in range(bench.pairs):
            disk_runs.append(trainer_row(SHARDS_DISK, on_disk, bench, bench.runs / f"shards-{n}"))
            store_runs.append(trainer_row(SHARDS_S3, from_store, bench, bench.runs / f"shards-s3-{n}"))
        rows += [median_row(disk_runs), median_row(store_runs)]
    with s3_root(bench.root) as stored:
        spec = job_spec(workload, "stream", "cpu", workers, stored)
        rows.append(trainer_row(FROM_S3, spec, bench, bench.runs / "s3"))
    return rows


def measure(args: argparse.Namespace) -> tuple[str, dict[int, list[Row]]]:
    """The rows of each loader-worker count (--workers), the S3 rows with the first."""
    workload = preset("resnet50", smoke=args.smoke, steps=args.steps)
    if args.image_size:
        workload = replace(workload, image_size=args.image_size)
    data_dir = Path(args.dir)
    images, classes = (SMOKE_IMAGES, SMOKE_CLASSES) if args.smoke else (IMAGES, CLASSES)
    ensure_folder(
        data_dir, pictures(args.images or images, args.classes or classes, args.smoke, args.picture_px)
    )
    os.environ[DATA_DIR_ENV] = str(data_dir)
    on_gpu = workload.device == "cuda"
    runs = Path(tempfile.mkdtemp(prefix="runs-", dir=data_dir))
    # The model's forecast is the same at every worker count: asked once.
    auto = job_spec(workload, "stream", "auto", args.workers[0])
    figures = forecast(write_config(runs / "forecast", auto)) if on_gpu and not args.s3_only else None
    bench = Bench(workload, Budget(args.budget_s), data_dir, runs, args.s3_only, args.pairs, figures)
    rows = {workers: worker_rows(bench, workers) for workers in args.workers}
    if args.s3 or args.s3_only:
        rows[args.workers[0]] += s3_rows(bench, args.workers[0])
    found = (row.result.device for counted in rows.values() for row in counted if row.result.device)
    return ("cpu" if not on_gpu else next(found, "GPU")), rows


def worker_counts(text: str) -> list[int]:
    """--workers: one count, or several separated by commas (4,14), each at least 1."""
    counts = [int(part) for part in text.split(",")]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--workers {text}: give counts of at least 1, e.g. 4,14")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--images", type=int, help=f"JPEGs to write (default {IMAGES:,}; --smoke: {SMOKE_IMAGES})"
    )
    parser.add_argument(
        "--classes", type=int, help=f"class folders (default {CLASSES}; --smoke: {SMOKE_CLASSES})"
    )
    parser.add_argument(
        "--picture-px", type=int, help="pictures of about this many px a side (not 400 x 350)"
    )
    parser.add_argument("--image-size", type=int, help="the model's input side (default 224; --smoke: 32)")
    parser.add_argument("--dir", default="/tmp/trainyard-bench-images", help="where the folder is written")
    parser.add_argument(
        "--workers",
        type=worker_counts,
        default=[default_workers()],
        help="loader workers, or a list (4,14): every row at each count (default cores-2)",
    )
    parser.add_argument("--steps", type=int, help="timed steps (after warm-up) per variant")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="skip variants past this")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU; prints only")
    parser.add_argument(
        "--s3", action="store_true", help="also stream the folder, and its shards, from moto's S3 server"
    )
    parser.add_argument(
        "--s3-only", action="store_true", help="--s3, with only the streamed job from the disk beside it"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=1,
        help="--s3: runs of the shards from the disk and from the store, alternated; each row the median",
    )
    args = parser.parse_args()
    device, rows = measure(args)
    body = "\n\n".join(f"### {workers} loader workers\n\n{tables(found)}" for workers, found in rows.items())
    heading, body = section(device, 1, body).split("\n", 1)
    record(f"{heading} (issues 16, 34 and 48: streamed image data)\n{body}", args.smoke)
    return exit_code([row.result for found in rows.values() for row in found])


if __name__ == "__main__":
    sys.exit(main())
