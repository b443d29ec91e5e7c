"""Each user's turn at an API process (app/api/fair_share.py): past TRAINYARD_USER_MAX_REQUESTS a user's
request waits its turn while another user's is served at once, and past TRAINYARD_USER_MAX_WAITING it is
refused with a 429 that names the settings. The turns are taken by the /v1 gate and given back by the app's
GiveBackTurns middleware; here they are taken directly in the app's event loop, as a user's requests still
being served would hold them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from app.api.fair_share import TURNS_KEY, GiveBackTurns, give_back_turns, take_turn
from app.main import create_app
from app.services.keys import Caller
from core.config import Settings, get_settings
from core.keys import create_key

SETTLE_S = 0.3  # long enough for an answer that was not held to come back on an idle ASGI app


@asynccontextmanager
async def held(user: str, turns: int) -> AsyncIterator[None]:
    """`turns` of `user`'s turns taken, as that many of their requests being served would take them."""
    scopes: list[dict[str, Any]] = [{TURNS_KEY: []} for _ in range(turns)]
    try:
        for scope in scopes:
            await take_turn(Caller(user), scope)
        yield
    finally:
        for scope in scopes:
            give_back_turns(scope)


@pytest.fixture
def tokens(auth_on: Settings, session: Session, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("TRAINYARD_USER_MAX_REQUESTS", "2")
    monkeypatch.setenv("TRAINYARD_USER_MAX_WAITING", "1")
    get_settings.cache_clear()
    return {user: create_key(session, user, admin=False) for user in ("alice", "bob")}


def _client(token: str, transport: httpx.ASGITransport) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers)


async def _busy_alice(tokens: dict[str, str]) -> None:
    transport = httpx.ASGITransport(app=create_app())
    async with _client(tokens["alice"], transport) as alice, _client(tokens["bob"], transport) as bob:
        async with held("alice", 2):
            waiting = asyncio.create_task(alice.get("/v1/jobs"))
            # Bob is served while Alice's request waits for one of her turns.
            assert (await asyncio.wait_for(bob.get("/v1/jobs"), 10)).status_code == 200
            await asyncio.sleep(SETTLE_S)
            assert not waiting.done(), "alice's request was served past her turns"
            refused = await asyncio.wait_for(alice.get("/v1/jobs"), 10)  # past the one that may wait
            assert refused.status_code == 429, refused.text
            assert refused.headers["Retry-After"] == "1"
            assert "TRAINYARD_USER_MAX_REQUESTS" in refused.json()["detail"]
        # Her turns given back, the one that waited is served.
        assert (await asyncio.wait_for(waiting, 10)).status_code == 200
        assert (await alice.get("/v1/jobs")).status_code == 200


def test_a_user_past_their_turns_waits_then_is_refused_while_another_is_served(
    tokens: dict[str, str],
) -> None:
    asyncio.run(_busy_alice(tokens))


async def _streaming_answers(streams: int) -> bool:
    """Whether another request of alice's gets a turn at once while `streams` of hers, past her two turns,
    stream their bodies: an answer gives its turn back once its head is sent."""
    heads_sent, bodies_may_go = asyncio.Semaphore(0), asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await take_turn(Caller("alice"), scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        heads_sent.release()
        await bodies_may_go.wait()
        await send({"type": "http.response.body", "body": b"a long download"})

    async def nothing(message: Any) -> None:
        return None

    served = GiveBackTurns(app)
    answers = [asyncio.create_task(served({"type": "http"}, nothing, nothing)) for _ in range(streams)]
    for _ in range(streams):
        await asyncio.wait_for(heads_sent.acquire(), 10)
    async with held("alice", 1):
        bodies_may_go.set()
        await asyncio.gather(*answers)
        return True


def test_a_streaming_answer_gives_its_turn_back_once_its_head_is_sent(tokens: dict[str, str]) -> None:
    assert asyncio.run(asyncio.wait_for(_streaming_answers(streams=2), 10))
