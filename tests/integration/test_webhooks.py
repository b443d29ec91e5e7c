"""Webhooks through the real service: a job run by the shared embedded stack's worker has each of its state
changes POSTed once, signed, by the API's sender to a receiver on loopback; and migration 0013 goes up and
down on PostgreSQL, whose ids are BIGINT there."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from tests.integration.jobs import submit, wait_status
from tests.integration.servers import Postgres, Stack
from tests.unit.conftest import _clear_caches, alembic_config
from tests.unit.core.test_webhook_outbox import SECRET, Receiver, verified

TINY = {
    "name": "hooked",
    "model": {"arch": "mlp"},
    "data": {"dataset": "synthetic", "num_samples": 64},
    "train": {"max_steps": 2, "batch_size": 8},
    "parallel": {"strategy": "single"},
}


def test_each_state_change_of_a_job_arrives_once_signed(embedded_stack: Stack) -> None:
    receiver = Receiver()

    def of_job(job_id: int) -> list[tuple[dict[str, str], dict[str, Any]]]:
        sent = [(headers, json.loads(body)) for headers, body in receiver.received]
        return [(headers, body) for headers, body in sent if body["job"]["id"] == job_id]

    try:
        with embedded_stack.client() as client:
            made = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["*"], "secret": SECRET})
            assert made.status_code == 201, made.text
            job_id = submit(client, TINY)["id"]
            wait_status(client, job_id, {"succeeded"}, timeout=120)
            deadline = time.monotonic() + 15
            while not any(body["event"] == "job.succeeded" for _, body in of_job(job_id)):
                assert time.monotonic() < deadline, of_job(job_id)
                time.sleep(0.1)
            client.delete(f"/v1/webhooks/{made.json()['id']}")
            events = client.get(f"/v1/jobs/{job_id}/events").json()["data"]
        moved = [f"job.{event['to_status']}" for event in events if event["from_status"] is not None]
        assert sorted(body["event"] for _, body in of_job(job_id)) == sorted(moved)
        assert len({body["id"] for _, body in of_job(job_id)}) == len(moved)
        for headers, body in receiver.received:
            assert verified(headers, body)
    finally:
        receiver.close()


def test_migration_0013_up_and_down_on_postgresql(
    postgres_server: Postgres, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = postgres_server.new_database()
    monkeypatch.setenv("TRAINYARD_DATABASE_URL", url)
    _clear_caches()
    config = alembic_config()
    engine = create_engine(url)
    try:
        command.upgrade(config, "0013")
        columns = {c["name"]: c for c in inspect(engine).get_columns("webhook_deliveries")}
        assert str(columns["id"]["type"]) == "BIGINT" and str(columns["webhook_id"]["type"]) == "BIGINT"
        command.downgrade(config, "0012")
        assert not {"webhooks", "webhook_deliveries"} & set(inspect(engine).get_table_names())
        command.upgrade(config, "0013")
    finally:
        engine.dispose()
        _clear_caches()
