"""Sends the webhook outbox (core/integrations/webhook_outbox.py): a thread in each API process, started by
the app's lifespan, so `make run` and the compose deployment send with no process of their own. It runs in the
API because the body carries the job as GET /v1/jobs/{id} shows it, which only app/ can render.

The thread runs an event loop with up to TRAINYARD_WEBHOOK_MAX_IN_FLIGHT attempts at once, at most
TRAINYARD_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION of them to one destination, so a slow receiver delays only its
own deliveries; each attempt ends at its deadline (app/services/integrations/webhook_attempt.py). Every
attempt claims its row first (core.integrations.webhook_outbox.claim), so two API processes never send one row
at once, and a row answered 2xx is never sent again; a sender killed mid-attempt leaves the row to be claimed
again once its hold lapses, with the same delivery id: at least once on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from app.services.integrations.webhook_attempt import claim_hold, send
from core.config import Settings, get_settings
from core.db import new_session
from core.integrations.webhook_outbox import claim, due_deliveries
from core.models import utcnow

log = logging.getLogger(__name__)

BATCH = 32  # due deliveries read per look at the outbox


@dataclass(frozen=True)
class Claimed:
    delivery_id: int
    attempt: int
    target: str  # its destination (scheme, host, port)
    claimed_at: float  # time.monotonic(), taken before the claim: the deadline counts from it


@dataclass(frozen=True)
class Look:
    """One look at the outbox: what was claimed, the webhooks passed over because their destination was full,
    and whether the page was full (more may be due)."""

    claimed: list[Claimed]
    passed_over: dict[str, set[int]]
    full_page: bool


def destination(url: str) -> str:
    """What one slow receiver may hold slots of: its origin (scheme, host, port), so two receivers on one
    host (two users' services behind one address, on different ports) do not share a bound."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def look(settings: Settings, busy: Counter[str], free: int, skip_webhooks: set[int]) -> Look:
    """Claim up to `free` due deliveries, oldest first, leaving a destination that `busy` already sends
    webhook_max_in_flight_per_destination attempts to. Blocking (the database): runs in a worker thread."""
    claimed: list[Claimed] = []
    passed_over: dict[str, set[int]] = {}
    with new_session() as session:
        due = due_deliveries(session, utcnow(), BATCH, skip_webhooks)
        session.rollback()
        for row in due:
            if len(claimed) == free:
                break
            target = destination(row.url)
            if busy[target] >= settings.webhook_max_in_flight_per_destination:
                passed_over.setdefault(target, set()).add(row.webhook_id)
                continue
            claimed_at = time.monotonic()
            attempt = claim(session, row.id, utcnow(), claim_hold(settings))
            if attempt is not None:  # else another sender took it first
                busy[target] += 1
                claimed.append(Claimed(row.id, attempt, target, claimed_at))
    return Look(claimed, passed_over, len(due) == BATCH)


class InFlight:
    """The attempts this process is sending, counted per destination. Runs on the sender's loop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.tasks: set[asyncio.Task[None]] = set()
        self.busy: Counter[str] = Counter()
        # Webhooks found due while their destination was full: left out of the next looks until a slot there
        # frees.
        self.waiting: dict[str, set[int]] = {}
        self.freed = asyncio.Event()

    async def start_due(self) -> bool:
        """Claim and start what is due and fits; True when more may be due and could start now."""
        free = self.settings.webhook_max_in_flight - len(self.tasks)
        if not free:
            return False
        skip = set().union(*self.waiting.values())
        # A copy: attempts that end while the look runs change the count on this thread.
        found = await asyncio.to_thread(look, self.settings, Counter(self.busy), free, skip)
        for target, webhooks in found.passed_over.items():
            self.waiting.setdefault(target, set()).update(webhooks)
        for claimed in found.claimed:
            self._start(claimed)
        return found.full_page and len(found.claimed) < free

    def _start(self, claimed: Claimed) -> None:
        self.busy[claimed.target] += 1
        task = asyncio.create_task(
            send(claimed.delivery_id, claimed.attempt, claimed.claimed_at, self.settings)
        )
        self.tasks.add(task)
        task.add_done_callback(lambda done: self._ended(done, claimed.target))

    def _ended(self, task: asyncio.Task[None], target: str) -> None:
        self.tasks.discard(task)
        self.busy[target] -= 1
        if self.busy[target] <= 0:
            del self.busy[target]
        self.waiting.pop(target, None)  # a slot there is free: its waiting webhooks may be looked at again
        self.freed.set()
        if not task.cancelled() and task.exception() is not None:
            # Its outcome was not stored: the row is claimed again once its hold lapses.
            log.error("webhook sender: an attempt failed", exc_info=task.exception())

    async def finish(self) -> None:
        """Wait for the attempts under way: each ends at its deadline."""
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _own_threads(settings: Settings) -> None:
    """A thread for each attempt's blocking steps (database, name lookup) and one for the looks, so a slow
    name server cannot starve the rest of the loop of asyncio's few default threads."""
    threads = ThreadPoolExecutor(settings.webhook_max_in_flight + 1, thread_name_prefix="webhook")
    asyncio.get_running_loop().set_default_executor(threads)


def send_due(settings: Settings) -> int:
    """One look at the outbox, its attempts sent and recorded; returns how many were claimed."""

    async def once() -> int:
        _own_threads(settings)
        in_flight = InFlight(settings)
        await in_flight.start_due()
        started = len(in_flight.tasks)
        await in_flight.finish()
        return started

    return asyncio.run(once())


class WebhookSender(threading.Thread):
    """Looks at the outbox every webhook_poll_s, when an attempt ends, and at once while there is more."""

    def __init__(self) -> None:
        super().__init__(name="webhook-sender", daemon=True)
        self.stopping = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.in_flight: InFlight | None = None

    def run(self) -> None:
        asyncio.run(self._serve(get_settings()))

    async def _serve(self, settings: Settings) -> None:
        _own_threads(settings)
        self.in_flight = in_flight = InFlight(settings)
        self.loop = asyncio.get_running_loop()
        wait, failures = 0.0, 0
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(in_flight.freed.wait(), wait)
            in_flight.freed.clear()
            if self.stopping.is_set():
                break
            try:
                backlog = await in_flight.start_due()
            except Exception:  # a database restart must not end the thread; the rows keep the state
                # Once per outage, not once per look; the wait grows while it lasts.
                if not failures:
                    log.exception("webhook sender: a look failed; trying again, less often while it fails")
                failures += 1
                wait = min(settings.webhook_poll_s * 2**failures, settings.webhook_backoff_max_s)
                continue
            if failures:
                log.warning("webhook sender: looks succeed again after %d failures", failures)
            failures = 0
            wait = 0.0 if backlog else settings.webhook_poll_s
        await in_flight.finish()

    def stop(self) -> None:
        """Start no attempt more; wait for those under way, which end at their deadline."""
        self.stopping.set()
        if self.loop is not None and self.in_flight is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed already: nothing to wake
                self.loop.call_soon_threadsafe(self.in_flight.freed.set)
        self.join(timeout=claim_hold(get_settings()).total_seconds())
