"""An API process leaves what it holds once started out of the garbage collector's full passes while it serves
(app/api/heap.py), and gives it back when it stops."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from app.main import create_app
from core.config import Settings


def test_the_started_process_is_frozen_while_it_serves_and_thawed_after(settings: Settings) -> None:
    with TestClient(create_app()) as client:
        assert client.get("/healthz").status_code == 200
        frozen = gc.get_freeze_count()
        assert frozen > 10_000, "the modules, the app and its routes were left to every full pass"
        tracked = len(gc.get_objects())
        assert tracked < frozen, f"{tracked} objects still scanned, {frozen} frozen"
    assert gc.get_freeze_count() == 0
