"""The markdown table `bench.run` prints and appends to RESULTS.md: a pure function of the results."""

from __future__ import annotations

from bench.result import Result

HEADER = (
    "| variant | img/s | x seed loop | x ceiling | peak MB | POST→first step s |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: |"
)
MISSING = "—"


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, or None when either is unknown (a variant failed) or the reference is zero."""
    if value is None or not reference:
        return None
    return value / reference


def _number(value: float | None, digits: int) -> str:
    return MISSING if value is None else f"{value:,.{digits}f}"


def _times(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}x"


def _row(result: Result, seed: float | None, ceiling: float | None) -> str:
    name = result.variant if not result.error else f"{result.variant} (failed: {result.error})"
    cells = [
        name,
        _number(result.images_per_s, 0),
        _times(ratio(result.images_per_s, seed)),
        _times(ratio(result.images_per_s, ceiling)),
        _number(result.peak_mem_mb, 0),
        _number(result.latency_s, 1),
    ]
    return "| " + " | ".join(cells) + " |"


def markdown_table(results: list[Result], seed: Result, ceiling: Result) -> str:
    """One row per result; the ratio columns divide by the seed loop's and the ceiling's throughput."""
    rows = (_row(result, seed.images_per_s, ceiling.images_per_s) for result in results)
    return "\n".join([HEADER, *rows])
