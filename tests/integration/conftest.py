"""Real servers per test session, and a Trainyard stack per backend: embedded, or Redis + PostgreSQL."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command

from core.db import get_engine
from deploy.slurm_cluster import SlurmCluster
from tests.integration.servers import Postgres, Redis, Stack, await_exit
from tests.unit.conftest import _clear_caches, alembic_config
from tests.unit.mlflow_fixtures import MlflowServer


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


@pytest.fixture
def postgres_migrated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_server: Postgres
) -> Iterator[None]:
    """A new database on the session's PostgreSQL, migrated to head, as the service's settings: only the
    database and the migrations, no stack."""
    monkeypatch.setenv("TRAINYARD_DATABASE_URL", postgres_server.new_database())
    monkeypatch.setenv("TRAINYARD_BROKER_URL", f"sqla+sqlite:///{tmp_path}/broker.db")
    _clear_caches()
    command.upgrade(alembic_config(), "head")
    yield
    get_engine().dispose()
    _clear_caches()


@pytest.fixture(scope="session")
def mlflow_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """The embedded stack's MLflow tracking server: its address is fixed when the stack starts, and it runs
    only once a test asks for `mlflow_server` (its start costs seconds that other tests need not wait for)."""
    server = MlflowServer.at_free_port(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mlflow_server(mlflow_address: MlflowServer) -> MlflowServer:
    return mlflow_address if mlflow_address.running else mlflow_address.start()


def _start_stack(kind: str, workdir: Path, request: pytest.FixtureRequest) -> Stack:
    if kind == "embedded":
        mlflow: MlflowServer = request.getfixturevalue("mlflow_address")
        # Waiting standbys as many as a sweep's trials that start together (test_sweeps.py: 4 at once).
        return Stack.embedded(workdir, TRAINYARD_MLFLOW_URI=mlflow.uri, TRAINYARD_WARM_STANDBYS="4")
    redis: Redis = request.getfixturevalue("redis_server")
    postgres: Postgres = request.getfixturevalue("postgres_server")
    return Stack.start(workdir, postgres.new_database(), redis.new_url())


@pytest.fixture(scope="session")
def stopping() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes of embedded stacks, told to stop when their fixture ends and waited for together when the
    session ends: a worker's warm shutdown takes seconds that the next tests need not wait for. (Stacks on
    Redis + PostgreSQL are waited for at once: their servers stop at the end of the session too.)"""
    told: list[subprocess.Popen[bytes]] = []
    yield told
    await_exit(told)


# One running service per backend for the whole session: starting one and stopping it again costs about ten
# seconds, and each test asserts only on the jobs it submitted itself. Modules that need settings of their
# own (auth aside, which has its shared stack below) start a stack of their own.
@pytest.fixture(scope="session")
def embedded_stack(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    stopping: list[subprocess.Popen[bytes]],
) -> Iterator[Stack]:
    running = _start_stack("embedded", tmp_path_factory.mktemp("stack-embedded"), request)
    yield running
    stopping += running.terminate()


@pytest.fixture(scope="session")
def redis_postgres_stack(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    running = _start_stack("redis-postgres", tmp_path_factory.mktemp("stack-redis-postgres"), request)
    yield running
    running.stop()


@pytest.fixture(scope="module", params=["embedded", "redis-postgres"])
def stack(request: pytest.FixtureRequest) -> Stack:
    """Each backend in turn, for tests that must pass on both."""
    shared: Stack = request.getfixturevalue(f"{request.param.replace('-', '_')}_stack")
    return shared


@pytest.fixture(scope="session")
def auth_stack(
    tmp_path_factory: pytest.TempPathFactory, stopping: list[subprocess.Popen[bytes]]
) -> Iterator[Stack]:
    """Auth on (embedded backend): a user sees only their own jobs, so tests sharing it stay apart."""
    running = Stack.embedded(tmp_path_factory.mktemp("stack-auth"), TRAINYARD_AUTH="on")
    yield running
    stopping += running.terminate()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A real Slurm cluster of two nodes (deploy/slurm_cluster.py), shared by the tests that need one: it
    starts in about a second, but a test that takes a node down must bring it up again."""
    if not (shutil.which("slurmctld") and shutil.which("slurmd")):
        pytest.skip("slurmctld and slurmd are not installed: `make servers` installs slurm-wlm and munge")
    cluster = SlurmCluster.start(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()
