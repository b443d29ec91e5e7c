"""The markdown tables the benchmarks print and append to RESULTS.md: pure functions of the results."""

from __future__ import annotations

from collections.abc import Sequence

from bench.result import SKIPPED, Result

MISSING = "—"
COLUMNS = ("variant", "img/s", "x seed loop", "x ceiling", "peak MB", "POST→first step s")


def markdown(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table whose first column is a name (left-aligned) and the rest numbers (right-aligned)."""
    header = "| " + " | ".join(columns) + " |"
    rule = "| --- |" + " ---: |" * (len(columns) - 1)
    return "\n".join([header, rule, *("| " + " | ".join(row) + " |" for row in rows)])


HEADER = markdown(COLUMNS, [])


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, or None when either is unknown (a variant failed) or the reference is zero."""
    if value is None or not reference:
        return None
    return value / reference


def number(value: float | None, digits: int) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def times(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}x"


def percent(value: float | None) -> str:
    return MISSING if value is None else f"{100 * value:.1f} %"


def name(result: Result) -> str:
    """The variant, and why it has no numbers when it failed or was skipped."""
    if not result.error:
        return result.variant
    reason = result.error if result.error.startswith(SKIPPED) else f"failed: {result.error}"
    return f"{result.variant} ({reason})"


def _row(result: Result, seed: float | None, ceiling: float | None) -> list[str]:
    return [
        name(result),
        number(result.images_per_s, 0),
        times(ratio(result.images_per_s, seed)),
        times(ratio(result.images_per_s, ceiling)),
        number(result.peak_mem_mb, 0),
        number(result.latency_s, 1),
    ]


def markdown_table(results: list[Result], seed: Result, ceiling: Result) -> str:
    """One row per result; the ratio columns divide by the seed loop's and the ceiling's throughput."""
    rows = [_row(result, seed.images_per_s, ceiling.images_per_s) for result in results]
    return markdown(COLUMNS, rows)
