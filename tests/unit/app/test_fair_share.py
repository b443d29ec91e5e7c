"""Each user's turn at an API process (app/api/fair_share.py): past TRAINYARD_USER_MAX_REQUESTS a user's
request waits its turn while another user's is served at once, and past TRAINYARD_USER_MAX_WAITING it is
refused with a 429 that names the settings. The turns are held by a route's own dependency, entered here
directly in the app's event loop, as a user's requests still being served would hold them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
import pytest
from sqlalchemy.orm import Session

from app.api.fair_share import turn
from app.main import create_app
from app.services.keys import Caller
from core.config import Settings, get_settings
from core.keys import create_key

SETTLE_S = 0.3  # long enough for an answer that was not held to come back on an idle ASGI app


@asynccontextmanager
async def held(user: str, turns: int) -> AsyncIterator[None]:
    """`turns` of `user`'s turns taken, as that many of their requests being served would take them."""
    async with AsyncExitStack() as stack:
        for _ in range(turns):
            await stack.enter_async_context(turn(Caller(user)))
        yield


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
