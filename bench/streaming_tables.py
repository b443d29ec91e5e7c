"""bench.streaming's rows and tables, one table per loader-worker count: the variants' img/s against the
resident job's and the hand-written loop's, then the issues' targets. Pure functions of the results."""

from __future__ import annotations

from dataclasses import dataclass

from bench.result import Result
from bench.table import markdown, name, number, ratio, times

COLUMNS = (
    "variant",
    "img/s",
    "x resident",
    "x hand-written",
    "GPU util",
    "CPU cores busy",
    "start→first step s",
)
STREAMED, GPU_DECODE, AUTO_DECODE, RESIDENT, FROM_S3, SHARDS_DISK, SHARDS_S3 = (
    "streamed (loader workers)",
    "streamed (data.decode=gpu)",
    "streamed (data.decode=auto)",
    "decoded once, resident",
    "streamed from a local S3 server",
    "shards streamed from the disk",
    "shards streamed from a local S3 server",
)


@dataclass(frozen=True)
class Row:
    result: Result
    cores: float | None = None
    gpu_percent: float | None = None


def hand_written(workers: int) -> str:
    return f"hand-written ImageFolder loop ({workers} workers)"


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} %"


def target(label: str, result: Result, reference: Result, goal: str) -> list[str]:
    return [label, times(ratio(result.images_per_s, reference.images_per_s)), goal]


def better(*results: Result) -> Result:
    """The faster of results that have a rate (the first when none has)."""
    measured = [result for result in results if result.images_per_s is not None]
    return max(measured, key=lambda result: result.images_per_s or 0.0) if measured else results[0]


def auto_targets(auto: Result, cpu: Result, gpu: Result, resident: Result) -> list[list[str]]:
    """Issue 48's, at 128 px on pictures of about 160 px: auto against what it chooses between."""
    return [
        target("data.decode=auto: cpu decode img/s", auto, cpu, "≥ 1.50x at 4 workers"),
        target("data.decode=auto: resident img/s", auto, resident, "≥ 0.90x at 4 workers"),
        target(
            "data.decode=auto: better of cpu and gpu img/s", auto, better(cpu, gpu), "≥ 0.97x at 14 workers"
        ),
    ]


def tables(rows: list[Row]) -> str:
    """One worker count's rows (streamed, gpu, auto, resident, hand-written, then any from S3), x the
    resident job's and the hand-written loop's img/s; then the issues' targets."""
    streamed, gpu, auto, resident, hand = (row.result for row in rows[:5])
    named = {row.result.variant: row for row in rows[5:]}
    body = [
        [
            name(row.result),
            number(row.result.images_per_s, 0),
            times(ratio(row.result.images_per_s, resident.images_per_s)),
            times(ratio(row.result.images_per_s, hand.images_per_s)),
            percent(row.gpu_percent),
            number(row.cores, 1),
            number(row.result.latency_s, 1),
        ]
        for row in rows
    ]
    late = None
    if streamed.latency_s is not None and resident.latency_s is not None:
        late = streamed.latency_s - resident.latency_s
    targets = markdown(
        ("against", "value", "target"),
        [
            target("streamed: resident img/s", streamed, resident, "≥ 0.90x"),
            target("streamed: hand-written img/s", streamed, hand, "≥ 1.20x"),
            ["streamed: resident start→first step", number(late, 1) + " s later", "≤ 5 s later"],
            # issue 34's, at 128 px on pictures of about 160 px
            target("data.decode=gpu: resident img/s", gpu, resident, "≥ 0.90x"),
            target("data.decode=gpu: hand-written img/s", gpu, hand, "≥ 1.50x"),
            *auto_targets(auto, streamed, gpu, resident),
            # issue 46's: the same streamed job, its folder or its shards in an object store
            *[
                target(f"{label}: {against.result.variant} img/s", found.result, against.result, "≥ 0.90x")
                for label, against in ((SHARDS_S3, named.get(SHARDS_DISK)), (FROM_S3, rows[0]))
                if (found := named.get(label)) is not None and against is not None
            ],
        ],
    )
    return markdown(COLUMNS, body) + "\n\n" + targets
