"""Real servers per test session, and a Trainyard stack per backend: embedded, or Redis + PostgreSQL."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.servers import Postgres, Redis, Stack


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is missing: run `make test`, which installs it")
    server = Redis.start(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    server = Postgres.start()
    yield server
    server.stop()


def _start_stack(kind: str, workdir: Path, request: pytest.FixtureRequest) -> Stack:
    if kind == "embedded":
        return Stack.embedded(workdir)
    redis: Redis = request.getfixturevalue("redis_server")
    postgres: Postgres = request.getfixturevalue("postgres_server")
    return Stack.start(workdir, postgres.new_database(), redis.new_url())


@pytest.fixture(scope="module", params=["embedded", "redis-postgres"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One running service per backend, shared by a module's tests (starting one costs seconds)."""
    workdir = tmp_path_factory.mktemp(f"stack-{request.param}")
    running = _start_stack(request.param, workdir, request)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def embedded_stack(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("stack-embedded")
    running = _start_stack("embedded", workdir, request)
    yield running
    running.stop()
