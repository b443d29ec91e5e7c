"""The webhook outbox: a delivery row per matching webhook, written by core.transitions.move in the
transition's own transaction (so a state change and its deliveries commit or vanish together), then claimed
by a sender for one attempt at a time, until a 2xx or the deadline. The sender is
app/services/integrations/webhook_sender.py: only the API can render the job as GET /v1/jobs/{id} shows it."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from core.integrations.webhook_events import ALL_EVENTS, event_name
from core.models import Job, Webhook, WebhookDelivery, utcnow
from core.states import JobStatus


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"  # a 2xx: never sent again
    FAILED = "failed"  # the deadline passed, or there was nothing left to send


def _wants(webhook: Webhook, event: str) -> bool:
    return ALL_EVENTS in webhook.events or event in webhook.events


def record_deliveries(session: Session, job: Job, to_status: JobStatus) -> None:
    """Add a pending delivery for each webhook of the job's owner (and each admin's all_users one) that
    asks for this event. The caller's commit writes them with the transition."""
    event, now = event_name(to_status), utcnow()
    hooks = session.scalars(select(Webhook).where(or_(Webhook.owner == job.owner, Webhook.all_users)))
    session.add_all(
        WebhookDelivery(
            webhook_id=hook.id,
            job_id=job.id,
            event=event,
            at=now,
            status=DeliveryStatus.PENDING,
            next_attempt_at=now,
        )
        for hook in hooks
        if _wants(hook, event)
    )


class Due(NamedTuple):
    """A due delivery and where it goes: the sender bounds its attempts per destination host."""

    id: int
    webhook_id: int
    url: str


def due_deliveries(session: Session, now: datetime, limit: int, skip_webhooks: Collection[int]) -> list[Due]:
    """Pending deliveries whose time has come, oldest first (read from ix_webhook_deliveries_due), but none
    of `skip_webhooks`: those the sender already found waiting on a busy host, so a slow receiver's backlog
    cannot fill every page."""
    query = (
        select(WebhookDelivery.id, WebhookDelivery.webhook_id, Webhook.url)
        .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
        .where(WebhookDelivery.status == DeliveryStatus.PENDING, WebhookDelivery.next_attempt_at <= now)
        .order_by(WebhookDelivery.next_attempt_at)
        .limit(limit)
    )
    if skip_webhooks:
        query = query.where(WebhookDelivery.webhook_id.not_in(skip_webhooks))
    return [Due(*row) for row in session.execute(query)]


def claim(session: Session, delivery_id: int, now: datetime, hold: timedelta) -> int | None:
    """Take a due delivery for one attempt: its due time moves past the attempt, so no other sender finds it
    due until `hold` has passed (a sender that died mid-send). Returns the attempt's number, or None when
    another sender claimed it first. Commits, so the claim holds before anything is sent."""
    result = session.execute(
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == delivery_id,
            WebhookDelivery.status == DeliveryStatus.PENDING,
            WebhookDelivery.next_attempt_at <= now,
        )
        .values(attempts=WebhookDelivery.attempts + 1, next_attempt_at=now + hold, last_attempt_at=now)
        .returning(WebhookDelivery.attempts)
    )
    attempt = result.scalar_one_or_none()
    session.commit()
    return attempt


def settle(
    session: Session,
    delivery_id: int,
    attempt: int,
    *,
    status: DeliveryStatus,
    next_attempt_at: datetime,
    response_code: int | None,
    error: str | None,
) -> None:
    """Record an attempt's outcome, only if the row is still this attempt's: a sender whose claim lapsed and
    was taken over leaves the newer attempt's record alone."""
    delivered_at = utcnow() if status is DeliveryStatus.DELIVERED else None
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.attempts == attempt)
        .values(
            status=status,
            next_attempt_at=next_attempt_at,
            delivered_at=delivered_at,
            response_code=response_code,
            error=error,
        )
    )
    session.commit()
