"""Times as stored: every one is UTC, which SQLite forgets on the way back."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; every time stored here is UTC, so say so on the way out."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
