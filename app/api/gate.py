"""What every /v1 route passes before it runs, as one FastAPI dependency (app/main.py): the caller is known
(app/api/auth.py), takes a turn (app/api/fair_share.py), and the body's text is checked (app/api/storable.py).
One dependency rather than one each: FastAPI's work per request grows with every dependency it resolves
(one it has cached still has its own dependencies solved again wherever it is named), and every /v1 request,
a job's GET that clients poll most among them, resolves these. So the gate finds the caller itself and
leaves it in the request's scope, where the routes' CallerDep reads it without solving the bearer again."""

from __future__ import annotations

from collections.abc import Collection

from fastapi import Request

from app.api.auth import BearerDep, get_caller
from app.api.fair_share import take_turn
from app.api.storable import RefuseUnstorableText
from app.services.keys import Caller

# Where the gate leaves the caller for the route (app/api/deps.py's CallerDep).
CALLER_KEY = "trainyard.caller"


class V1Gate:
    """Auth first: a turn is taken, and text checked, only for a caller who may. The app's GiveBackTurns
    middleware gives the turn back once the route's answer is made."""

    def __init__(self, raw_bodies: Collection[tuple[str, str]]) -> None:
        self.refuse_unstorable_text = RefuseUnstorableText(raw_bodies)

    async def __call__(self, request: Request, credentials: BearerDep) -> None:
        caller = await get_caller(credentials)
        request.scope[CALLER_KEY] = caller
        await take_turn(caller, request.scope)
        await self.refuse_unstorable_text(request)


async def gate_caller(request: Request) -> Caller:
    """The caller the gate found: every /v1 router has the gate (app/main.py), and FastAPI solves a router's
    dependencies before its routes' own."""
    caller: Caller = request.scope[CALLER_KEY]
    return caller
