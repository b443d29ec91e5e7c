"""What every /v1 route passes before it runs, as one FastAPI dependency (app/main.py): the caller is known
(app/api/auth.py), takes a turn (app/api/fair_share.py), and the body's text is checked (app/api/storable.py).
One dependency rather than one each: FastAPI's work per request grows with every dependency it resolves,
and every /v1 request, a job's GET that clients poll most among them, resolves these."""

from __future__ import annotations

from collections.abc import Collection

from fastapi import Request

from app.api.deps import CallerDep
from app.api.fair_share import take_turn
from app.api.storable import RefuseUnstorableText


class V1Gate:
    """Auth first: a turn is taken, and text checked, only for a caller who may. The app's GiveBackTurns
    middleware gives the turn back once the route's answer is made."""

    def __init__(self, raw_bodies: Collection[tuple[str, str]]) -> None:
        self.refuse_unstorable_text = RefuseUnstorableText(raw_bodies)

    async def __call__(self, request: Request, caller: CallerDep) -> None:
        await take_turn(caller, request.scope)
        await self.refuse_unstorable_text(request)
