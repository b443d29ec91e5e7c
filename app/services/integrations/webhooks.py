"""A user's webhooks: made (destination checked), listed, deleted, and their latest deliveries read. Like
jobs, a user sees only their own and an admin every one; another user's webhook is missing, not forbidden."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.schemas import WebhookCreate
from app.services.errors import WebhookLimitReached, WebhookNotFound
from app.services.integrations.webhook_destinations import check_destination
from app.services.keys import Caller
from core.config import Settings
from core.models import Webhook, WebhookDelivery

DELIVERIES_SHOWN = 50


def create_webhook(session: Session, body: WebhookCreate, caller: Caller, settings: Settings) -> Webhook:
    """The caller's new webhook, within their limit; its URL must pass the destination check now and before
    every send. Two requests at the same instant can both pass the count (it is a read): the overshoot is
    bounded by the concurrent requests, as for the job quota."""
    owned = session.scalar(select(func.count()).where(Webhook.owner == caller.user)) or 0
    if owned >= settings.webhook_max_per_user:
        raise WebhookLimitReached(caller.user, settings.webhook_max_per_user)
    check_destination(body.url, settings.webhook_allow)
    hook = Webhook(
        owner=caller.user, url=body.url, events=body.events, secret=body.secret, all_users=body.all_users
    )
    session.add(hook)
    session.commit()
    return hook


def webhooks_seen_by(session: Session, caller: Caller) -> list[Webhook]:
    query = select(Webhook).order_by(Webhook.id)
    if not caller.is_admin:
        query = query.where(Webhook.owner == caller.user)
    return list(session.scalars(query))


def get_owned_webhook(session: Session, webhook_id: int, caller: Caller) -> Webhook:
    hook = session.get(Webhook, webhook_id)
    if hook is None or not caller.may_see(hook.owner):
        raise WebhookNotFound(webhook_id)
    return hook


def delete_webhook(session: Session, hook: Webhook) -> None:
    """Its deliveries go with it (ON DELETE CASCADE), sent or not."""
    session.delete(hook)
    session.commit()


def latest_deliveries(session: Session, hook: Webhook) -> list[WebhookDelivery]:
    query = (
        select(WebhookDelivery)
        .where(WebhookDelivery.webhook_id == hook.id)
        .order_by(WebhookDelivery.id.desc())
        .limit(DELIVERIES_SHOWN)
    )
    return list(session.scalars(query))
