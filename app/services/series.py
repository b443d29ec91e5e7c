"""Shortening long metric series for plotting without hiding what matters: first, last, spikes and dips."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from core.models import Metric


def downsample(rows: Sequence[Metric], max_points: int) -> list[Metric]:
    """At most `max_points` rows of one series in step order. The first and last rows stay; the rows between
    are cut into equal buckets and each bucket keeps its lowest and highest value, so a loss spike or a
    collapse survives where evenly spaced picks would step over it."""
    if len(rows) <= max_points:
        return list(rows)
    first, *middle, last = rows
    buckets = (max_points - 2) // 2
    if buckets == 0:
        return [first, last]
    kept = [first]
    for b in range(buckets):
        bucket = middle[b * len(middle) // buckets : (b + 1) * len(middle) // buckets]
        low = min(bucket, key=lambda row: row.value)
        high = max(bucket, key=lambda row: row.value)
        kept += sorted({id(low): low, id(high): high}.values(), key=lambda row: row.step)
    kept.append(last)
    return kept


def downsample_by_name(rows: Sequence[Metric], max_points: int) -> list[Metric]:
    """Each series on its own (loss has thousands of points, eval_accuracy a handful), merged back in the
    order the metrics endpoint uses: step, then name."""
    by_name = sorted(rows, key=lambda row: (row.name, row.step))
    kept = [
        row
        for _, series in groupby(by_name, key=lambda row: row.name)
        for row in downsample(list(series), max_points)
    ]
    return sorted(kept, key=lambda row: (row.step, row.name))
