"""Many requests at once through the real ASGI app and its thread pool, as uvicorn would send them."""

from __future__ import annotations

import asyncio

import httpx
from fastapi.testclient import TestClient

from app.main import create_app
from tests.unit.conftest import submit

# More than the thread pool's 40 slots and the old pool's 15 connections: together they waited on each other.
IN_FLIGHT = 64


async def _get_all(paths: list[str]) -> list[int]:
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        responses = await asyncio.wait_for(asyncio.gather(*(client.get(path) for path in paths)), 20)
    return [response.status_code for response in responses]


def test_sync_routes_answer_a_burst_without_stalling(client: TestClient) -> None:
    job_id = submit(client)["id"]
    paths = ["/healthz", f"/v1/jobs/{job_id}/events"] * (IN_FLIGHT // 2)
    assert asyncio.run(_get_all(paths)) == [200] * len(paths)
