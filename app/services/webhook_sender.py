"""Sends the webhook outbox (core/webhooks.py): a thread in each API process, started by the app's lifespan,
so `make run` and the compose deployment send with no process of their own. It runs in the API because the
body carries the job as GET /v1/jobs/{id} shows it, which only app/ can render; it is rendered when sent,
so a delivery retried later carries the job as it is then, while `event` and `at` say what happened when.

Every attempt claims its row first (core.webhooks.claim), so two API processes never send one row at once,
and a row answered 2xx is never sent again; a sender killed mid-attempt leaves the row to be claimed again
once its hold lapses, with the same delivery id: at least once on the wire.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from prometheus_client import Counter
from sqlalchemy.orm import Session

from app.services.jobs import public_job
from app.services.webhook_destinations import DestinationRefused, check_destination
from core.clock import as_utc
from core.config import Settings, get_settings
from core.db import new_session
from core.models import Job, Webhook, WebhookDelivery, utcnow
from core.webhooks import DeliveryStatus, claim, due_deliveries, settle

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 64 * 1024  # of a receiver's answer, kept only to explain a failure
ERROR_EXCERPT_CHARS = 200
BATCH = 32  # deliveries sent per look at the outbox
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


def signature(secret: str, body: bytes) -> str:
    """X-Trainyard-Signature: the receiver recomputes it over the raw body with the shared secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff_s(attempt: int, settings: Settings) -> float:
    return min(settings.webhook_backoff_s * 2 ** (attempt - 1), settings.webhook_backoff_max_s)


def claim_hold(settings: Settings) -> timedelta:
    """Longer than an attempt can last (name lookup, connect, send, read, each bounded by the timeout), so
    a claim lapses only for a sender that died."""
    return timedelta(seconds=6 * settings.webhook_timeout_s + 30)


def delivery_body(delivery: WebhookDelivery, job: Job, session: Session) -> bytes:
    shown = public_job(session, job).model_dump(mode="json")
    at = as_utc(delivery.at).isoformat()
    return json.dumps({"id": delivery.id, "event": delivery.event, "at": at, "job": shown}).encode()


def _read_capped(response: httpx.Response, deadline: float) -> bytes:
    """At most MAX_RESPONSE_BYTES, and no longer than the deadline: a receiver that drips its answer byte by
    byte is cut off as one that sends too much."""
    read = bytearray()
    for chunk in response.iter_bytes():
        read += chunk
        if len(read) >= MAX_RESPONSE_BYTES or time.monotonic() > deadline:
            break
    return bytes(read[:MAX_RESPONSE_BYTES])


def post(url: str, body: bytes, headers: dict[str, str], settings: Settings) -> Answer:
    """One POST to a destination checked now, connecting to the checked address; redirects are answers, not
    followed, and proxies from the environment are not used (they would connect elsewhere)."""
    try:
        destination = check_destination(url, settings.webhook_allow)
    except DestinationRefused as refused:
        return Answer(None, str(refused.problems[0]))
    timeout = settings.webhook_timeout_s
    headers = {**headers, "Host": urlsplit(url).netloc, "Content-Type": "application/json"}
    try:
        with (
            httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client,
            client.stream(
                "POST",
                destination.connect_url,
                content=body,
                headers=headers,
                extensions={"sni_hostname": destination.host},
            ) as response,
        ):
            text = _read_capped(response, time.monotonic() + timeout)
            return Answer(response.status_code, text.decode(errors="replace"))
    except httpx.HTTPError as error:
        return Answer(None, f"{type(error).__name__}: {error}")


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


def _settle(
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


def send_one(session: Session, delivery_id: int, settings: Settings) -> None:
    """Claim the delivery, send it once, record how it went."""
    attempt = claim(session, delivery_id, utcnow(), claim_hold(settings))
    if attempt is None:
        return
    delivery = session.get(WebhookDelivery, delivery_id, populate_existing=True)
    hook = session.get(Webhook, delivery.webhook_id) if delivery else None
    if delivery is None or hook is None:  # the webhook was deleted, and its deliveries with it
        return
    job = session.get(Job, delivery.job_id, populate_existing=True)
    if job is None:
        gone = Answer(None, f"job {delivery.job_id} was deleted before this was sent")
        return _settle(session, delivery_id, attempt, gone, (DeliveryStatus.FAILED, utcnow()))
    at, url, body = delivery.at, hook.url, delivery_body(delivery, job, session)
    headers = {
        "X-Trainyard-Event": delivery.event,
        "X-Trainyard-Delivery": str(delivery_id),
        "X-Trainyard-Signature": signature(hook.secret, body),
    }
    session.rollback()  # no transaction stays open while the receiver answers
    answer = post(url, body, headers, settings)
    _settle(session, delivery_id, attempt, answer, _outcome(answer, attempt, at, settings))


def send_due(settings: Settings, now: datetime | None = None) -> int:
    """Send every delivery due now, oldest first; returns how many were due."""
    with new_session() as session:
        due = due_deliveries(session, now or utcnow(), BATCH)
        session.rollback()
        for delivery_id in due:
            send_one(session, delivery_id, settings)
    return len(due)


class WebhookSender(threading.Thread):
    """Looks at the outbox every webhook_poll_s, sooner while there is a backlog."""

    def __init__(self) -> None:
        super().__init__(name="webhook-sender", daemon=True)
        self.stopping = threading.Event()

    def run(self) -> None:
        settings = get_settings()
        wait, failures = 0.0, 0
        while not self.stopping.wait(wait):
            try:
                backlog = send_due(settings) == BATCH
            except Exception:  # a database restart must not end the thread; the rows keep the state
                # Once per outage, not once per poll; the wait grows while it lasts.
                if not failures:
                    log.exception("webhook sender: a pass failed; trying again, less often while it fails")
                failures += 1
                wait = min(settings.webhook_poll_s * 2**failures, settings.webhook_backoff_max_s)
                continue
            if failures:
                log.warning("webhook sender: passes succeed again after %d failures", failures)
            failures = 0
            wait = 0.0 if backlog else settings.webhook_poll_s

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=get_settings().webhook_timeout_s * 6)
