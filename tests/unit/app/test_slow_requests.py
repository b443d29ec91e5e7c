"""Requests answered slower than TRAINYARD_SLOW_REQUEST_S are logged with their time
(app/api/slow_requests.py); faster ones are not."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from core.config import Settings, get_settings


def test_a_request_slower_than_the_setting_is_logged_and_a_quicker_one_is_not(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    client = TestClient(create_app())
    with caplog.at_level(logging.WARNING, logger="trainyard.slow_requests"):
        assert client.get("/v1/jobs").status_code == 200
        assert not caplog.records
        monkeypatch.setenv("TRAINYARD_SLOW_REQUEST_S", "0.000001")
        get_settings.cache_clear()
        assert client.get("/v1/jobs/99").status_code == 404
    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith("slow request: GET /v1/jobs/99 404 took ") and "others in flight" in line
