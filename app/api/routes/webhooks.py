"""/v1/webhooks: POST a user's job state changes to a URL of theirs, signed with their secret; an admin's
may fire for every user's jobs (all_users). The sender runs for as long as the API serves (`lifespan`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, status

from app.api.deps import CallerDep, CanonicalInt, SessionDep, SettingsDep
from app.api.openapi import BODY_PROBLEMS, problems
from app.schemas import (
    WebhookCreate,
    WebhookDeliveriesPublic,
    WebhookDeliveryPublic,
    WebhookPublic,
    WebhooksPublic,
)
from app.services.integrations import webhooks as service
from app.services.integrations.webhook_sender import WebhookSender
from core.models import Webhook

router = APIRouter(prefix="/webhooks", tags=["webhooks"])

WebhookId = Annotated[int, CanonicalInt, Path(ge=1, le=2**63 - 1, description="webhook id")]


def owned_webhook(webhook_id: WebhookId, session: SessionDep, caller: CallerDep) -> Webhook:
    """The path's webhook, if it is the caller's: another user's is a 404, like a missing one."""
    return service.get_owned_webhook(session, webhook_id, caller)


OwnedWebhook = Annotated[Webhook, Depends(owned_webhook)]


@router.post("", status_code=status.HTTP_201_CREATED, responses={**BODY_PROBLEMS, **problems(403)})
def create_webhook(
    body: WebhookCreate, session: SessionDep, caller: CallerDep, settings: SettingsDep
) -> WebhookPublic:
    if body.all_users and not caller.is_admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"all_users: only an admin's webhook may fire for every user's jobs, and {caller.user!r} is not "
            "one; leave all_users out to be told of your own jobs",
        )
    return WebhookPublic.model_validate(service.create_webhook(session, body, caller, settings))


@router.get("")
def list_webhooks(session: SessionDep, caller: CallerDep) -> WebhooksPublic:
    return WebhooksPublic(
        data=[WebhookPublic.model_validate(hook) for hook in service.webhooks_seen_by(session, caller)]
    )


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT, responses=problems(404))
def delete_webhook(hook: OwnedWebhook, session: SessionDep) -> None:
    service.delete_webhook(session, hook)


@router.get("/{webhook_id}/deliveries", responses=problems(404))
def list_deliveries(hook: OwnedWebhook, session: SessionDep) -> WebhookDeliveriesPublic:
    deliveries = service.latest_deliveries(session, hook)
    return WebhookDeliveriesPublic(data=[WebhookDeliveryPublic.model_validate(d) for d in deliveries])


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """One webhook sender per API process, for as long as it serves (its attempts are on /metrics). Its stop
    waits for attempts under way, up to their deadline, off the server's event loop."""
    sender = WebhookSender()
    sender.start()
    try:
        yield
    finally:
        await to_thread.run_sync(sender.stop)
