"""Each user's turn at an API process: at most TRAINYARD_USER_MAX_REQUESTS of one user's requests are served
at once, the rest wait their turn as coroutines on the event loop (no pool thread, no database connection),
and past TRAINYARD_USER_MAX_WAITING waiting a new one is refused with 429.

A process serves one request's Python at a time, so without this a user whose dashboards keep 30 requests in
flight puts 30 requests ahead of everyone else's each time: another user's GET waited seconds behind them
(bench/soak). With it, another user's request waits behind at most the cap of each busy user. The turn is
held while the route runs and its answer is made, not while the answer's body streams (a download, a followed
log), so a slow reader does not keep their own other requests waiting. With auth off every request is the
local admin's, and nobody takes turns.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from anyio import Semaphore
from anyio.lowlevel import RunVar
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.services.errors import QuotaExceeded
from app.services.keys import Caller
from core.config import AuthMode, get_settings

# A refused request is worth sending again as soon as one of the user's requests in flight ends.
RETRY_AFTER_S = 1


@dataclass
class _Lane:
    turns: Semaphore
    holders: int = 0  # requests holding or waiting for a turn; the lane goes when none do


# One table per event loop, as anyio's primitives belong to the loop that made them (tests start several).
_lanes: RunVar[dict[str, _Lane]] = RunVar("trainyard_user_lanes")


def _lanes_here() -> dict[str, _Lane]:
    try:
        return _lanes.get()
    except LookupError:
        lanes: dict[str, _Lane] = {}
        _lanes.set(lanes)
        return lanes


def _refusal(user: str, waiting: int, in_flight: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"user {user!r} has {in_flight} requests being served by this API process and {waiting} waiting; "
        f"send fewer at once (TRAINYARD_USER_MAX_REQUESTS, TRAINYARD_USER_MAX_WAITING) or try again in "
        f"{RETRY_AFTER_S} s",
        retry_after_s=RETRY_AFTER_S,
    )


# Where a request's turn is kept between the gate that takes it and GiveBackTurns, which gives it back.
TURNS_KEY = "trainyard.turns"


@dataclass
class _Turn:
    lanes: dict[str, _Lane]
    user: str
    lane: _Lane
    held: bool = False  # False while it waits for the turn

    def give_back(self) -> None:
        if self.held:
            self.lane.turns.release()
        self.lane.holders -= 1
        if self.lane.holders == 0:
            del self.lanes[self.user]


async def take_turn(caller: Caller, scope: MutableMapping[str, Any]) -> None:
    """Wait for the caller's turn for the request of `scope`, taken by every /v1 route's gate
    (app/api/gate.py); GiveBackTurns gives it back once the request's answer is made."""
    settings = get_settings()
    if settings.auth is AuthMode.OFF:  # one user (the local admin): there is no one else to take turns with
        return
    lanes = _lanes_here()
    lane = lanes.get(caller.user)
    if lane is None:
        lane = lanes[caller.user] = _Lane(Semaphore(settings.user_max_requests))
    waiting = lane.holders - settings.user_max_requests
    if waiting >= settings.user_max_waiting:
        raise _refusal(caller.user, waiting, settings.user_max_requests)
    lane.holders += 1
    turn = _Turn(lanes, caller.user, lane)
    scope[TURNS_KEY].append(turn)  # before the wait: a request cancelled while it waits leaves its place too
    await lane.turns.acquire()
    turn.held = True


def give_back_turns(scope: MutableMapping[str, Any]) -> None:
    turns = scope.get(TURNS_KEY)
    while turns:
        turns.pop().give_back()


class GiveBackTurns:
    """Gives a request's turn back once its answer is made: when the answer's head is sent, not after its
    body streams, or when the request ends without one. A middleware rather than a dependency that yields,
    whose exit FastAPI runs for every /v1 request at a cost of its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[TURNS_KEY] = []

        async def answering(message: Message) -> None:
            if message["type"] == "http.response.start":
                give_back_turns(scope)
            await send(message)

        try:
            await self.app(scope, receive, answering)
        finally:
            give_back_turns(scope)
