"""A code bundle's forecast (issue 44): its model.factory and data.factory are the user's code, run by a
one-shot forecaster inside the real bubblewrap sandbox (app/services/bundle_forecasts.py), never in the API's
process. A hostile factory sees neither the service's database nor the network; without a sandbox, no
forecast and the reason."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.services.bundle_forecasts import SANDBOX_OFF
from core.config import Settings, get_settings
from tests.unit.app.test_api_code import GZIP
from tests.unit.code_archives import bundle_archive
from tests.unit.conftest import job_body

# Module names of their own, so that sys.modules tells whether the API's process imported them.
NET = """
import torch
from torch import nn
from torch.utils.data import Dataset


def build(width):
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, width), nn.ReLU(), nn.Linear(width, 10))


class Squares(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, index):
        return torch.full((3, 8, 8), float(index)), index % 10


def data(count):
    return Squares(), None
"""
PEEK = """
import socket
from torch import nn


def build(database, port):
    seen = []
    try:
        open(database, "rb").read(16)
        seen.append("the database")
    except OSError:
        pass
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        seen.append("a socket")
    except OSError:
        pass
    raise RuntimeError(f"saw {seen}")
"""
FILES = {"forecast_probe_net.py": NET, "forecast_probe_peek.py": PEEK}
NET_PARAMETERS = (3 * 8 * 8 * 32 + 32) + (32 * 10 + 10)


@pytest.fixture(autouse=True)
def forecasting(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TRAINYARD_FORECAST", "on")
    # A loaded 2-core box imports torch slowly; the limit is what is tested elsewhere.
    monkeypatch.setenv("TRAINYARD_FORECAST_TIMEOUT_S", "600")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def pushed(client: TestClient) -> str:
    response = client.post("/v1/code", content=bundle_archive(FILES), headers=GZIP)
    assert response.status_code in (200, 201), response.text
    code: str = response.json()["id"]
    return code


def dry_run(client: TestClient, **sections: Any) -> dict[str, Any]:
    response = client.post("/v1/jobs?dry_run=true", json=job_body(**sections))
    assert response.status_code == 200, response.text
    plan: dict[str, Any] = response.json()["plan"]
    return plan


def test_a_bundles_factories_are_forecast_in_the_sandbox(client: TestClient) -> None:
    code = pushed(client)
    spec = {
        "code": code,
        "model": {"factory": "forecast_probe_net:build", "kwargs": {"width": 32}},
        "data": {"factory": "forecast_probe_net:data", "kwargs": {"count": 100}},
        "train": {"max_steps": 4, "batch_size": 16},
    }
    plan = dry_run(client, **spec)
    forecast = plan["forecast"]
    assert forecast is not None, plan["forecast_note"]
    assert forecast["breakdown"]["parameters"] == NET_PARAMETERS
    # The micro-batch is the data factory's first sample, 16 times: (16, 3, 8, 8) inputs through the first
    # layer forward and for its weights' gradient, through the second forward and for both gradients.
    assert forecast["breakdown"]["flops_per_step"] == 2 * 2 * 16 * 192 * 32 + 3 * 2 * 16 * 32 * 10
    assert forecast["fits"] is True and forecast["job_time_s"] == pytest.approx(forecast["step_time_s"] * 4)
    assert "forecast_probe_net" not in sys.modules
    # A second dry run of the same bundle and shape is the cache's.
    assert dry_run(client, **spec)["forecast"] == forecast


def test_a_factory_sees_neither_the_services_database_nor_the_network(
    client: TestClient, settings: Settings
) -> None:
    database = settings.database_url.removeprefix("sqlite:///")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # reachable from here
        kwargs = {"database": database, "port": port}
        plan = dry_run(
            client, code=pushed(client), model={"factory": "forecast_probe_peek:build", "kwargs": kwargs}
        )
    assert plan["forecast"] is None
    assert "could not be forecast" in plan["forecast_note"] and "saw []" in plan["forecast_note"]
    assert "forecast_probe_peek" not in sys.modules


def test_without_the_sandbox_a_bundle_is_not_forecast(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_SANDBOX", "off")
    get_settings.cache_clear()
    plan = dry_run(
        client, code=pushed(client), model={"factory": "forecast_probe_net:build", "kwargs": {"width": 32}}
    )
    assert plan["forecast"] is None and plan["forecast_note"] == SANDBOX_OFF
