"""Where a retry starts: a module of its own, without pydantic, so that the `trainyard` command offers the
choices of `retry --from` without importing the API's schemas (app.schemas re-exports it)."""

from __future__ import annotations

from enum import StrEnum


class RetryFrom(StrEnum):
    """Where a retry starts."""

    LATEST = "latest"  # the job's latest checkpoint; its spec's own start when it has none
    SCRATCH = "scratch"  # the job's spec as it was submitted
