"""The events a webhook may ask for: one per job state, named as its deliveries' X-Trainyard-Event. No
SQLAlchemy, so the API's schemas (which the CLI loads) can check a request's names."""

from __future__ import annotations

from core.states import JobStatus

ALL_EVENTS = "*"


def event_name(status: JobStatus) -> str:
    return f"job.{status}"


EVENT_NAMES: tuple[str, ...] = tuple(event_name(status) for status in JobStatus)


def unknown_events(events: list[str]) -> list[str]:
    """The names in `events` that are neither an event nor "*"."""
    return [event for event in events if event != ALL_EVENTS and event not in EVENT_NAMES]
