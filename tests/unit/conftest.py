"""Each test gets its own SQLite database, run directory and embedded broker (no worker consumes it)."""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.config import Config
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.main import create_app
from core import db
from core.config import Settings, get_settings
from core.doorbell import drain_rings, get_celery
from core.models import Base, Job, JobEvent
from jobspec.datadir import DATA_DIR_ENV

RING_WAIT_S = 30.0


def _clear_caches() -> None:
    drain_rings(RING_WAIT_S)  # a ring asked for under these settings goes to their broker, not the next's
    if get_celery.cache_info().currsize:
        get_celery().close()
    get_celery.cache_clear()
    if db.engine_for.cache_info().currsize:
        db.get_engine().dispose()
    db.engine_for.cache_clear()
    db.sessionmaker_for.cache_clear()
    get_settings.cache_clear()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Settings pointing at tmp_path; the schema is not created (see `settings`)."""
    monkeypatch.setenv("TRAINYARD_DATABASE_URL", f"sqlite:///{tmp_path}/trainyard.db")
    monkeypatch.setenv("TRAINYARD_BROKER_URL", f"sqla+sqlite:///{tmp_path}/broker.db")
    monkeypatch.setenv("TRAINYARD_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("TRAINYARD_CODE_DIR", str(tmp_path / "code"))
    # TestClient's Host; the loopback names stay allowed through `host`.
    monkeypatch.setenv("TRAINYARD_ALLOWED_HOSTS", "testserver,localhost")
    # A forecaster process importing torch: on in the tests of forecasts (test_api_forecast.py).
    monkeypatch.setenv("TRAINYARD_FORECAST", "off")
    _clear_caches()
    yield get_settings()
    _clear_caches()


@functools.cache
def _created_schema() -> bytes:
    """The SQLite file create_all makes, made once a session, through an engine as the service makes one: its
    pragmas set the file's journal mode (WAL), which a test's own sqlite3 connections find as they open it."""
    with tempfile.TemporaryDirectory(prefix="schema-") as scratch:
        engine = db.engine_for(f"sqlite:///{scratch}/schema.db")
        Base.metadata.create_all(engine)
        engine.dispose()
        return Path(scratch, "schema.db").read_bytes()


def create_schema(engine: Engine) -> None:
    """create_all on engine's database. A new SQLite file is a copy of one made once: create_all cost 38 ms
    of CPU each time, and about a thousand tests of the API, the core and the worker start from it."""
    path = engine.url.database
    if engine.url.get_backend_name() == "sqlite" and path and path != ":memory:" and not Path(path).exists():
        Path(path).write_bytes(_created_schema())
    else:
        Base.metadata.create_all(engine)


@pytest.fixture
def settings(env: Settings) -> Settings:
    # create_all, not the migration, to keep tests fast; test_api_health runs the real migration and checks
    # that it builds exactly this schema.
    create_schema(db.get_engine())
    return env


@pytest.fixture
def auth_on(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """API keys required, as deployed."""
    monkeypatch.setenv("TRAINYARD_AUTH", "on")
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


@pytest.fixture
def client(settings: Settings) -> TestClient:
    return TestClient(create_app())


@pytest.fixture
def session(settings: Settings) -> Iterator[Session]:
    with db.new_session() as session:
        yield session


def job_body(**sections: Any) -> dict[str, Any]:
    """A small valid spec; keyword arguments replace whole sections."""
    body: dict[str, Any] = {
        "name": "test",
        "model": {"arch": "mlp"},
        "data": {"dataset": "synthetic", "num_samples": 64},
        "train": {"max_steps": 5, "batch_size": 8},
    }
    body.update(sections)
    return body


def enqueued(settings: Settings) -> list[int]:
    """Job ids rung for in the embedded broker, oldest first, once the rings asked for are sent."""
    assert drain_rings(RING_WAIT_S), f"rings still unsent after {RING_WAIT_S} s"
    path = settings.broker_url.removeprefix("sqla+sqlite:///")
    if not Path(path).exists():
        return []
    with sqlite3.connect(path) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "kombu_message" not in tables:
            return []
        rows = conn.execute("SELECT payload FROM kombu_message ORDER BY id").fetchall()
    return [json.loads(json.loads(payload)["headers"]["argsrepr"])[0] for (payload,) in rows]


def submit(client: TestClient, **sections: Any) -> dict[str, Any]:
    response = client.post("/v1/jobs", json=job_body(**sections))
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()["job"]
    return job


def assert_nothing_stored(session: Session, settings: Settings) -> None:
    assert session.scalar(select(func.count()).select_from(Job)) == 0
    assert session.scalar(select(func.count()).select_from(JobEvent)) == 0
    assert enqueued(settings) == []


def assert_problem(response: Any, field: str, fragment: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == 422
    assert field in [error["field"] for error in problem["errors"]], problem
    assert f"{field}: " in problem["detail"]
    assert fragment in problem["detail"], problem["detail"]


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TRAINYARD_DATA_DIR for trainers and the API alike, empty."""
    directory = tmp_path / "data"
    directory.mkdir()
    monkeypatch.setenv(DATA_DIR_ENV, str(directory))
    return directory


def alembic_config() -> Config:
    """The project's own migrations, as `make migrate` runs them, against the test's database."""
    config = Config(str(Path(__file__).resolve().parents[2] / "migrations" / "alembic.ini"))
    config.attributes["configure_logger"] = False
    return config


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on PATH, for stand-ins of the commands the service runs (Slurm's, say)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder
