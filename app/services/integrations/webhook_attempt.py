"""One webhook attempt, from its claim to its record: the body rendered, the destination checked again, one
POST, the outcome stored. Everything after the claim runs under one deadline, TRAINYARD_WEBHOOK_TIMEOUT_S
counted from the claim: name lookup, connect, send, status line, headers and body together. httpx's own
timeouts bound each read, so a receiver that sends a byte a second never trips them; the deadline is what
ends such an attempt, and the claim is held longer than it (claim_hold), so no other sender can take the row
while this one may still be on the wire.

The body carries the job as GET /v1/jobs/{id} shows it, rendered when sent, so a delivery retried later
carries the job as it is then, while `event` and `at` say what happened when.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import json
import ssl
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from prometheus_client import Counter
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.services.integrations.webhook_destinations import DestinationRefused, check_destination
from app.services.jobs import public_job
from core.clock import as_utc
from core.config import Settings
from core.db import new_session
from core.integrations.webhook_outbox import DeliveryStatus, settle
from core.models import Job, Webhook, WebhookDelivery, utcnow

MAX_RESPONSE_BYTES = 64 * 1024  # of a receiver's answer, kept only to explain a failure
ERROR_EXCERPT_CHARS = 200
# Past the attempt's deadline, for the database work that records it and for clocks of API hosts that
# differ by a few seconds: the claim lapses only for a sender that died.
CLAIM_SLACK_S = 30.0
# Process-wide, like the sender: the API's /metrics lists it beside its own series.
ATTEMPTS = Counter(
    "trainyard_webhook_attempts", "Webhook delivery attempts by outcome", ["outcome"], registry=None
)


@dataclass(frozen=True)
class Answer:
    """What an attempt got: a status code (with the start of the body), or an error before one came."""

    code: int | None
    text: str

    @property
    def ok(self) -> bool:
        return self.code is not None and 200 <= self.code < 300


@dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    headers: dict[str, str]


def claim_hold(settings: Settings) -> timedelta:
    """Longer than an attempt can last: its deadline counts from the claim."""
    return timedelta(seconds=settings.webhook_timeout_s + CLAIM_SLACK_S)


def signature(secret: str, body: bytes) -> str:
    """X-Trainyard-Signature: the receiver recomputes it over the raw body with the shared secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff_s(attempt: int, settings: Settings) -> float:
    return min(settings.webhook_backoff_s * 2 ** (attempt - 1), settings.webhook_backoff_max_s)


def delivery_body(delivery: WebhookDelivery, job: Job, session: Session) -> bytes:
    shown = public_job(session, job).model_dump(mode="json")
    at = as_utc(delivery.at).isoformat()
    return json.dumps({"id": delivery.id, "event": delivery.event, "at": at, "job": shown}).encode()


def request_for(delivery_id: int, attempt: int) -> Request | None:
    """The claimed delivery's request, or None when there is nothing to send: its webhook was deleted (and
    the delivery with it), or its job was (the delivery is failed here)."""
    with new_session() as session:
        delivery = session.get(WebhookDelivery, delivery_id)
        hook = session.get(Webhook, delivery.webhook_id) if delivery else None
        if delivery is None or hook is None:
            return None
        job = session.get(Job, delivery.job_id)
        if job is None:
            gone = Answer(None, f"job {delivery.job_id} was deleted before this was sent")
            _record(session, delivery_id, attempt, gone, (DeliveryStatus.FAILED, utcnow()))
            return None
        body = delivery_body(delivery, job, session)
        headers = {
            "X-Trainyard-Event": delivery.event,
            "X-Trainyard-Delivery": str(delivery_id),
            "X-Trainyard-Signature": signature(hook.secret, body),
        }
        return Request(hook.url, body, headers)


async def _read_capped(response: httpx.Response) -> bytes:
    read = bytearray()
    async for chunk in response.aiter_bytes():
        read += chunk
        if len(read) >= MAX_RESPONSE_BYTES:
            break
    return bytes(read[:MAX_RESPONSE_BYTES])


@functools.cache
def _verifying_tls() -> ssl.SSLContext:
    """The CA bundle a client loads when it is made, loaded once per process: tens of milliseconds of CPU,
    which a client per delivery paid each time. A context holds no connection, so no host's TLS name or
    session reaches another's."""
    return httpx.create_ssl_context(trust_env=False)


async def post(request: Request, settings: Settings) -> Answer:
    """One POST to a destination checked now, connecting to the checked address; redirects are answers, not
    followed, and proxies from the environment are not used (they would connect elsewhere). A new client
    each time: a pooled connection would carry one host's TLS name to another host at the same address."""
    try:
        destination = await asyncio.to_thread(check_destination, request.url, settings.webhook_allow)
    except DestinationRefused as refused:
        return Answer(None, str(refused.problems[0]))
    headers = {**request.headers, "Host": urlsplit(request.url).netloc, "Content-Type": "application/json"}
    try:
        async with (
            httpx.AsyncClient(
                timeout=settings.webhook_timeout_s,
                follow_redirects=False,
                trust_env=False,
                verify=_verifying_tls(),
            ) as client,
            client.stream(
                "POST",
                destination.connect_url,
                content=request.body,
                headers=headers,
                extensions={"sni_hostname": destination.host},
            ) as response,
        ):
            text = await _read_capped(response)
            return Answer(response.status_code, text.decode(errors="replace"))
    except httpx.HTTPError as error:
        return Answer(None, f"{type(error).__name__}: {error}")


async def send(delivery_id: int, attempt: int, claimed_at: float, settings: Settings) -> None:
    """The claimed attempt (claimed at `claimed_at`, time.monotonic()), sent and recorded. The request is
    rendered under the deadline too, so a slow database cannot push the send past the claim."""
    limit = settings.webhook_timeout_s
    try:
        async with asyncio.timeout(claimed_at + limit - time.monotonic()):
            request = await asyncio.to_thread(request_for, delivery_id, attempt)
            if request is None:
                return
            answer = await post(request, settings)
    except TimeoutError:
        answer = Answer(
            None,
            f"no whole answer within {limit:g} s (TRAINYARD_WEBHOOK_TIMEOUT_S: name lookup, connect, "
            "headers and body together); answer sooner, and do slow work after answering",
        )
    await asyncio.to_thread(record, delivery_id, attempt, answer, settings)


def _outcome(
    answer: Answer, attempt: int, at: datetime, settings: Settings
) -> tuple[DeliveryStatus, datetime]:
    """Delivered on a 2xx; else pending again after the backoff, or failed if that is past the deadline."""
    now = utcnow()
    if answer.ok:
        return DeliveryStatus.DELIVERED, now
    retry_at = now + timedelta(seconds=backoff_s(attempt, settings))
    if retry_at > as_utc(at) + timedelta(seconds=settings.webhook_retry_deadline_s):
        return DeliveryStatus.FAILED, now
    return DeliveryStatus.PENDING, retry_at


def record(delivery_id: int, attempt: int, answer: Answer, settings: Settings) -> None:
    """Store how the attempt went, unless the delivery was deleted meanwhile (with its webhook)."""
    with new_session() as session:
        at = session.scalar(select(WebhookDelivery.at).where(WebhookDelivery.id == delivery_id))
        if at is not None:
            _record(session, delivery_id, attempt, answer, _outcome(answer, attempt, at, settings))


def _record(
    session: Session, delivery_id: int, attempt: int, answer: Answer, outcome: tuple[DeliveryStatus, datetime]
) -> None:
    status, next_attempt_at = outcome
    ATTEMPTS.labels(
        "delivered" if answer.ok else "retry" if status is DeliveryStatus.PENDING else "failed"
    ).inc()
    said = f"HTTP {answer.code}: " if answer.code is not None else ""
    error = None if answer.ok else (said + answer.text)[:ERROR_EXCERPT_CHARS]
    settle(
        session,
        delivery_id,
        attempt,
        status=status,
        next_attempt_at=next_attempt_at,
        response_code=answer.code,
        error=error,
    )
